"""The console's TensorBoard screen (t): the selected run's event files read incrementally, any other log
directory opened by path, new points picked up while it is open."""

from __future__ import annotations

import asyncio
import time

from test_ui_app import make_app, settle, text_of, wait_until
from textual.widgets import DataTable

from trnconsole.ui.screens.tensorboard import TensorBoardScreen


def open_writer(log_dir):
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    return EventFileWriter(str(log_dir), flush_secs=0.2)


def add_scalar(writer, tag: str, step: int, value: float) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
    writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))
    writer.flush()


def test_the_run_scalars_are_tabled_charted_and_followed(recorded_home, tmp_path):
    home, (run_id,) = recorded_home
    writer = open_writer(home / "runs" / run_id / "tb")
    for step in range(5):
        add_scalar(writer, "train/loss", step, 1.0 / (step + 1))
        add_scalar(writer, "train/lr", step, 1e-3)
    other = open_writer(tmp_path / "elsewhere" / "job")
    add_scalar(other, "val/acc", 7, 0.9)
    other.close()

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot, app)
            await pilot.press("t")
            await settle(pilot, app)
            assert isinstance(app.screen, TensorBoardScreen)
            table = app.screen.query_one(DataTable)
            await wait_until(pilot, app, lambda: table.row_count == 2)
            assert [str(c) for c in table.get_row_at(0)][:4] == [".", "train/loss", "5", "0-4"]
            assert "train/loss" in str(app.screen.query_one("#tb-chart").render())
            add_scalar(writer, "train/loss", 5, 0.1)
            await wait_until(pilot, app, lambda: str(table.get_row_at(0)[2]) == "6")
            assert "2 series" in text_of(app, "#tb-status")
            await pilot.press("o")
            await pilot.press("ctrl+a", "ctrl+k")
            await pilot.press(*str(tmp_path / "elsewhere"), "enter")
            await wait_until(pilot, app, lambda: table.row_count == 1)
            assert [str(c) for c in table.get_row_at(0)][:3] == ["job", "val/acc", "1"]

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
