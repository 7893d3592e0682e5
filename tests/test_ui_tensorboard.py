"""The console's TensorBoard screen (t): the selected run's event files read incrementally, any other log
directory opened by path, new points picked up while it is open, points a restart purged dropped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
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


async def open_tensorboard(pilot, app, until: Callable[[DataTable], bool]) -> DataTable:
    """`t` pressed on the runs screen: the TensorBoard screen's table, once `until` holds for it."""
    await settle(pilot, app)
    await pilot.press("t")
    await settle(pilot, app)
    assert isinstance(app.screen, TensorBoardScreen)
    table = app.screen.query_one(DataTable)
    await wait_until(pilot, app, lambda: until(table))
    return table


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
            table = await open_tensorboard(pilot, app, lambda t: t.row_count == 2)
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


def test_points_a_restarted_job_purged_leave_the_table_and_the_chart(recorded_home):
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    home, (run_id,) = recorded_home
    writer = open_writer(home / "runs" / run_id / "tb")
    for step in range(5):
        add_scalar(writer, "train/loss", step, 1.0 / (step + 1))
    add_scalar(writer, "eval/acc", 4, 0.75)

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(120, 36)) as pilot:
            table = await open_tensorboard(pilot, app, lambda t: t.row_count == 2)
            # The job restarted from its checkpoint at step 2: its writer says so (what purge_step writes).
            writer.add_event(
                Event(wall_time=time.time(), step=2, session_log=SessionLog(status=SessionLog.START))
            )
            add_scalar(writer, "train/loss", 2, 0.4)
            await wait_until(pilot, app, lambda: table.row_count == 1)  # eval/acc had only step 4
            assert [str(c) for c in table.get_row_at(0)][:5] == [".", "train/loss", "3", "0-2", "0.4"]
            series = app.screen.series[(".", "train/loss")]
            assert (series.count, series.last_x) == (3, 2) and series.last == pytest.approx(0.4)

    try:
        asyncio.run(scenario())
    finally:
        writer.close()
