"""The Textual console driven like a person would, with Pilot: each screen and key on real run records."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from conftest import FIXED_NOW, make_recorded_home
from textual.widgets import Input, Log, Select, Static, Switch

from trnconsole.monitors.host import HostSample
from trnconsole.monitors.hub import MonitorSnapshot
from trnconsole.monitors.neuron import missing_text
from trnconsole.service import Console
from trnconsole.ui.app import TrnConsoleApp
from trnconsole.ui.screens.compare import CompareScreen
from trnconsole.ui.screens.dashboard import Dashboard
from trnconsole.ui.screens.dialogs import ConfirmScreen, HelpScreen
from trnconsole.ui.screens.launch import LaunchScreen
from trnconsole.ui.screens.logs import LogsScreen


class FixedMonitors:
    """The same snapshot every tick: a two-core host, no Neuron tools, no NVIDIA driver."""

    neuron = None

    def sample(self, roots: dict[str, int]) -> MonitorSnapshot:
        host = HostSample(t=FIXED_NOW, cpu_percent=(12.0, 34.0), memory_used=4 << 30, memory_total=16 << 30)
        return MonitorSnapshot(
            t=FIXED_NOW,
            host=host,
            neuron=None,
            neuron_status=missing_text("neuron-monitor"),
            nvidia=None,
            nvidia_status="NVIDIA driver library libnvidia-ml.so not found",
        )

    def close(self) -> None:
        pass


def make_app(home: Path, **kwargs) -> TrnConsoleApp:
    kwargs.setdefault("monitor_hub", FixedMonitors())
    return TrnConsoleApp(service=Console(home), clock=lambda: FIXED_NOW, **kwargs)


async def settle(pilot, app: TrnConsoleApp, seconds: float = 0.3) -> None:
    """Until the refresh -> select -> read chain has run out: each step may start the next worker."""
    await pilot.pause(seconds)
    for _ in range(4):
        await app.workers.wait_for_complete()
        await pilot.pause(0.1)
    app.redraw()
    await pilot.pause()


def text_of(app: TrnConsoleApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


async def wait_until(pilot, app, predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out: {state_of(app)}"
        await settle(pilot, app, 0.5)


def state_of(app: TrnConsoleApp) -> str:
    """What a failed wait saw: the screen, the focused widget, each run's status and the notifications."""
    runs = ", ".join(f"{r.id} {r.status}" for r in app.live.records) or "no runs"
    notes = " | ".join(n.message for n in app._notifications)
    screen = type(app.screen).__name__
    form_errors = app.screen.query("#error")  # the launch form's own line
    if form_errors:
        screen += f" (form says {str(form_errors.first().render())!r})"
    return f"screen {screen}, focus {app.focused!r}, {runs}; notifications: {notes or 'none'}"


@pytest.mark.smoke
def test_dashboard_shows_the_run_its_numbers_charts_and_log(recorded_home):
    home, (run_id,) = recorded_home

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot, app)
            assert isinstance(app.screen, Dashboard)
            table = app.screen.table
            assert table.row_count == 1 and table.selected_id == run_id
            numbers = text_of(app, "#numbers")
            assert "step 80/80 (100%)" in numbers and "eval accuracy 1.00" in numbers
            assert "[completed]" in numbers
            devices = text_of(app, "#devices")
            assert "host  CPU  23% [ 12  34]" in devices and "neuron-monitor not found" in devices
            log = app.screen.query_one("#log", Log)
            assert any("eval_accuracy" in line for line in log.lines)
            chart = str(app.screen.query_one("#chart-loss").render())
            assert "loss" in chart and any("\u2800" < ch <= "\u28ff" for ch in chart)
            eval_chart = app.screen.query_one("#chart-eval")
            assert eval_chart.display and "eval accuracy" in str(eval_chart.render())  # 120 columns: room
            # The recorded run's throughput fell from ~60 to ~6 samples/s near its end: an alert toast.
            titles = [str(n.title) for n in app._notifications]
            assert any(t.startswith(run_id) and "throughput drop" in t for t in titles), titles

    asyncio.run(scenario())


def test_log_filter_keeps_matching_lines_and_escape_clears_it(recorded_home):
    home, _ = recorded_home

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot, app)
            await pilot.press("slash")
            await pilot.press(*"eval_")
            await pilot.press("enter")
            await settle(pilot, app)
            lines = app.screen.query_one("#log", Log).lines
            assert lines and all("eval_" in line for line in lines)
            await pilot.press("slash", "escape")
            await settle(pilot, app)
            assert len(app.screen.query_one("#log", Log).lines) > 50

    asyncio.run(scenario())


def test_help_opens_with_question_mark_and_closes_with_escape(recorded_home):
    home, _ = recorded_home

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot, app)
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, Dashboard)

    asyncio.run(scenario())


def test_compare_marked_runs_with_ratios_baseline_and_sort(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("TRNCONSOLE_HOME", str(home))
    first, second = make_recorded_home(home, copies=2)

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(160, 30)) as pilot:
            await settle(pilot, app)
            await pilot.press("space", "down", "space")
            await settle(pilot, app)
            assert app.live.marked == {first, second}
            await pilot.press("c")
            await settle(pilot, app, 0.5)
            assert isinstance(app.screen, CompareScreen)
            rows = app.screen.rows
            assert [r["id"] for r in rows] == [first, second]
            assert rows[1]["avg_samples_per_s_ratio"] == pytest.approx(1.0)
            await pilot.press("down", "b")
            assert app.screen.runs[app.screen.baseline][0] == second
            await pilot.press("right", "right", "s")
            assert app.screen.sort_column == "steps"
            await pilot.press("escape")
            assert isinstance(app.screen, Dashboard)

    asyncio.run(scenario())


def test_logs_screen_searches_the_whole_log(recorded_home):
    home, _ = recorded_home

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot, app)
            await pilot.press("l")
            await settle(pilot, app, 0.5)
            assert isinstance(app.screen, LogsScreen)
            assert len(app.screen.lines) == 83
            await pilot.press("slash", *r"\(0, 4\d\)", "enter")
            await pilot.pause()
            assert len(app.screen.matches) == 11  # steps 40-49 and the evaluation at step 40
            assert "match 1 of 11" in text_of(app, "#status")
            await pilot.press("n")
            assert "match 2 of 11" in text_of(app, "#status")
            await pilot.press("escape")
            assert isinstance(app.screen, Dashboard)

    asyncio.run(scenario())


def test_launch_form_lists_flags_checks_values_inline_and_cancels(recorded_home):
    home, _ = recorded_home

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot, app)
            await pilot.press("n")
            await wait_until(pilot, app, lambda: bool(app.screen.query("#flag-batch_size")))
            assert isinstance(app.screen, LaunchScreen)
            box = app.screen.query_one("#flag-batch_size", Input)
            assert box.placeholder == "default 8"
            box.value = "-4"
            await pilot.pause()
            assert "batch_size must be > 0" in text_of(app, "#error")
            box.value = "16"
            await pilot.pause()
            assert text_of(app, "#error") == ""
            assert "batch_size=16" in app.screen._sets()
            app.screen.query_one("#quick", Input).value = "synthetic=true steps=-1"
            await pilot.press("ctrl+s")
            await wait_until(pilot, app, lambda: "checking" not in text_of(app, "#error"))
            assert isinstance(app.screen, LaunchScreen)  # the form stays open with the CLI's message
            assert "--set steps=-1: steps must be > 0" in text_of(app, "#error")
            await pilot.press("escape")
            await pilot.pause()
            assert isinstance(app.screen, Dashboard)

    asyncio.run(scenario())


def test_rerun_form_is_prefilled_and_shows_the_diff(recorded_home):
    home, _ = recorded_home

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot, app)
            await pilot.press("r")
            await wait_until(pilot, app, lambda: bool(app.screen.query("#flag-steps")))
            assert app.screen.query_one("#flag-steps", Input).value == "80"
            app.screen.query_one("#flag-steps", Input).value = "120"
            await pilot.pause()
            assert "steps: 80 -> 120" in text_of(app, "#diff")
            await pilot.press("escape")

    asyncio.run(scenario())


def test_launch_form_takes_a_remote_backends_options_checked_as_the_cli_checks_them(recorded_home):
    home, _ = recorded_home

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot, app)
            await pilot.press("n")
            await wait_until(pilot, app, lambda: bool(app.screen.query("#flag-batch_size")))
            assert not app.screen.query_one("#remote").display  # local: nothing to ask
            app.screen.query_one("#backend", Select).value = "sagemaker"
            await wait_until(pilot, app, lambda: bool(app.screen.query("#opt-s3_prefix")))
            assert app.screen.query_one("#remote").display
            assert "(required)" in app.screen.query_one("#opt-role", Input).placeholder
            app.screen.query_one("#quick", Input).value = "synthetic=true"
            await pilot.press("ctrl+s")
            await wait_until(pilot, app, lambda: "checking" not in text_of(app, "#error"))
            assert "--s3-prefix: required with --backend sagemaker" in text_of(app, "#error")
            app.screen.query_one("#opt-s3_prefix", Input).value = "s3://bucket/runs"
            app.screen.query_one("#opt-role", Input).value = "arn:aws:iam::123456789012:role/Training"
            app.screen.query_one("#opt-spot", Switch).value = True
            app.screen.query_one("#nnodes", Input).value = "2"
            request = app.screen._request()
            assert request.backend == "sagemaker" and request.nnodes == 2
            assert request.backend_options == {
                "s3_prefix": "s3://bucket/runs",
                "role": "arn:aws:iam::123456789012:role/Training",
                "spot": "true",
            }
            await pilot.press("escape")

    asyncio.run(scenario())


def test_stop_on_a_finished_run_only_says_so(recorded_home):
    home, (run_id,) = recorded_home

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot, app)
            await pilot.press("s")
            await pilot.pause()
            assert isinstance(app.screen, Dashboard)
            assert any(f"run {run_id} already completed" in str(n.message) for n in app._notifications)

    asyncio.run(scenario())


def test_light_theme_by_name_and_unknown_theme_falls_back(recorded_home):
    home, _ = recorded_home

    async def scenario(theme: str) -> tuple[str, list[str]]:
        app = make_app(home, theme=theme)
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot, app)
            return app.theme, [str(n.message) for n in app._notifications]

    assert asyncio.run(scenario("trn-light"))[0] == "trn-light"
    name, notes = asyncio.run(scenario("no-such-theme"))
    assert name == "trn-dark" and any("no-such-theme" in n for n in notes)


# Runs until stopped: the test stops it. The deadline only bounds what a failed test leaves behind; it is
# long because a loaded machine takes a while to get to the stop (the job ending first fails the test).
CHATTY = """
import sys, time
print("chatty up", flush=True)
step = 0
deadline = time.time() + 900
while time.time() < deadline:
    lines = []
    for _ in range(1000):
        step += 1
        lines.append(f"LOG Sun Nov 22 07:42:44 - (0, {step}) step_loss : {1 / step:.6f} throughput : 100.0")
    sys.stdout.write("\\n".join(lines) + "\\n")
    sys.stdout.flush()
    time.sleep(0.1)  # about 10,000 lines a second
"""


@pytest.mark.slow
def test_launch_from_the_form_then_stop_with_confirmation_while_it_floods_the_log(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("TRNCONSOLE_HOME", str(home))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "config.toml"))
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)

    async def scenario():
        app = make_app(home)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot, app)
            await pilot.press("n")
            await wait_until(pilot, app, lambda: isinstance(app.screen, LaunchScreen))
            app.screen.query_one("#runner").value = "script"

            # The form takes the runner from Select.Changed, which a loaded machine may handle after a pause.
            def form_is_for_a_script() -> bool:
                return app.screen.runner == "script" and bool(app.screen.query("#script-flags"))

            await wait_until(pilot, app, form_is_for_a_script, timeout=20)
            app.screen.query_one("#script", Input).value = str(script)
            app.screen.query_one("#name", Input).value = "chatty"
            await pilot.press("ctrl+s")
            await wait_until(pilot, app, lambda: bool(app.live.records) and app.selected is not None)
            run_id = app.live.records[0].id
            await wait_until(pilot, app, lambda: (app.live.view(app.live.records[0]).step or 0) > 20_000)
            # Keys are handled while ~10,000 lines a second stream in.
            # A loaded machine may take more than one pause to switch screens.
            await pilot.press("question_mark")
            await wait_until(pilot, app, lambda: isinstance(app.screen, HelpScreen), timeout=20)
            await pilot.press("escape")
            await wait_until(pilot, app, lambda: isinstance(app.screen, Dashboard), timeout=20)
            await pilot.press("s")
            await wait_until(pilot, app, lambda: isinstance(app.screen, ConfirmScreen), timeout=20)
            await pilot.press("y")
            stopped = lambda: app.live.record(run_id).status == "stopped"  # noqa: E731
            await wait_until(pilot, app, stopped, timeout=60)
        return run_id

    try:
        run_id = asyncio.run(scenario())
    finally:
        console = Console(home)
        for left in console.store.list():
            if not console.refresh(left).finished:
                console.stop(left, grace_s=1.0)
    record = Console(home).store.get(run_id)
    assert record.status == "stopped" and record.name == "chatty"
