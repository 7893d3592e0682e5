"""The dashboard: the run list, and for the selected run its charts, key numbers, host panel and log tail."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Log, Static

from ..format import device_panel, key_numbers
from ..widgets.chart import Chart
from ..widgets.runs_table import RunsTable

if TYPE_CHECKING:
    from ...live import RunView


ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
LOG_LINES = 1000
WIDE = 120
EVAL_NAMES = {"accuracy": "eval_accuracy", "perplexity": "eval_perplexity", "loss": "eval_loss"}


def clean_line(line: str) -> str:
    """No terminal escapes in the log pane (they can blank it); a progress bar's \\r keeps its last frame."""
    if "\x1b" in line:
        line = ANSI.sub("", line)
    if "\r" in line:
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
    return line


class Dashboard(Screen):
    BINDINGS = [
        Binding("space", "mark", "Mark", id="mark"),
        Binding("slash", "filter_log", "Filter log", id="filter_log"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="clear_filter"),
    ]
    DEFAULT_CSS = """
    Dashboard #runs { height: 2fr; min-height: 4; }
    Dashboard #middle { height: 3fr; min-height: 6; }
    Dashboard #numbers { width: 34; padding: 0 1; border-right: solid $panel; }
    Dashboard Chart { width: 1fr; }
    Dashboard #chart-loss > .chart--line { color: $chart-line; }
    Dashboard #chart-speed > .chart--line { color: $chart-line-2; }
    Dashboard #chart-eval > .chart--line { color: $success; }
    Dashboard #chart-eval { display: none; }
    Dashboard.wide #chart-eval.has-data { display: block; }
    Dashboard #devices {
        height: auto; max-height: 3; text-wrap: nowrap; text-overflow: ellipsis; color: $text-muted;
        padding: 0 1;
    }
    Dashboard #log-filter { height: 1; border: none; padding: 0 1; }
    Dashboard #log-filter.hidden { display: none; }
    Dashboard #log { height: 2fr; min-height: 3; border-top: solid $panel; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.log_filter = ""
        self.shown_run: str | None = None
        self.ready = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical():
            yield RunsTable(id="runs")
            with Horizontal(id="middle"):
                yield Static(id="numbers", markup=False)
                yield Chart(id="chart-loss")
                yield Chart(id="chart-speed")
                yield Chart(id="chart-eval")
            yield Static(id="devices", markup=False)
            yield Input(
                placeholder="filter the log (regex); Enter to apply, Esc to clear",
                id="log-filter",
                classes="hidden",
            )
            yield Log(id="log", max_lines=LOG_LINES, auto_scroll=True)
        yield Footer()

    def on_mount(self) -> None:
        self.ready = True
        self.app.redraw()  # type: ignore[attr-defined]

    @property
    def table(self) -> RunsTable:
        return self.query_one(RunsTable)

    @property
    def selected_id(self) -> str | None:
        return self.table.selected_id

    # ---- drawing (called by the app's timer) ----

    def draw(
        self, views: list[RunView], marked: set[str], now: float, snapshot: Any, new_lines: list[str]
    ) -> None:
        self.table.show(views, marked, now)
        selected = next((v for v in views if v.record.id == self.selected_id), None)
        self.query_one("#numbers", Static).update(key_numbers(selected, now))
        self.query_one("#devices", Static).update(device_panel(snapshot, self.selected_id))
        series = selected.series if selected else {}
        self.query_one("#chart-loss", Chart).update_series(series.get("loss"), "loss")
        speed_name = "samples_per_s" if "samples_per_s" in series else "step_time_s"
        self.query_one("#chart-speed", Chart).update_series(
            series.get(speed_name), speed_name.replace("_", " ")
        )
        eval_name = EVAL_NAMES.get(selected.eval_metric or "", "eval_loss") if selected else "eval_loss"
        eval_chart = self.query_one("#chart-eval", Chart)
        eval_chart.update_series(series.get(eval_name), eval_name.replace("_", " "))
        eval_chart.set_class(series.get(eval_name) is not None, "has-data")
        if new_lines:
            self.write_log(new_lines)

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "wide")  # room for a third chart: the evaluation metric

    def reset_log(self, lines: list[str]) -> None:
        log = self.query_one("#log", Log)
        log.clear()
        self.write_log(lines)

    def write_log(self, lines: list[str]) -> None:
        cleaned = [clean_line(line) for line in lines]
        if self.log_filter:
            try:
                pattern = re.compile(self.log_filter)
            except re.error:
                pattern = re.compile(re.escape(self.log_filter))
            cleaned = [line for line in cleaned if pattern.search(line)]
        if cleaned:
            self.query_one("#log", Log).write_lines(cleaned)

    # ---- actions ----

    def action_mark(self) -> None:
        run_id = self.selected_id
        if run_id:
            marked = self.app.live.marked  # type: ignore[attr-defined]
            marked.symmetric_difference_update({run_id})
            self.app.redraw()  # type: ignore[attr-defined]

    def action_filter_log(self) -> None:
        box = self.query_one("#log-filter", Input)
        box.remove_class("hidden")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#log-filter", Input)
        box.value = ""
        box.add_class("hidden")
        self.log_filter = ""
        self.table.focus()
        self.app.reload_log()  # type: ignore[attr-defined]

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "log-filter":
            self.log_filter = event.value.strip()
            if not self.log_filter:
                event.input.add_class("hidden")
            self.table.focus()
            self.app.reload_log()  # type: ignore[attr-defined]

    def on_data_table_row_highlighted(self, event: RunsTable.RowHighlighted) -> None:
        run_id = event.row_key.value if event.row_key else None
        if run_id != self.shown_run:
            self.shown_run = run_id
            self.app.select_run(run_id)  # type: ignore[attr-defined]
