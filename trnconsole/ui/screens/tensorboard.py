"""TensorBoard scalars of any log directory (the selected run's by default: its run directory and wherever
its script's writer put its files), read incrementally by our own event-file reader: the series of every
(run, tag) in a table, the highlighted one charted, new points picked up each second, points a restarted
job's writer purged dropped as TensorBoard drops them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static

from ...core.series import Series
from ...monitors.tensorboard import SUMMARY_HEADERS, LogRoot
from ..widgets.chart import Chart


class TensorBoardScreen(Screen):
    BINDINGS = [
        Binding("escape,t", "back", "Back"),
        Binding("o", "open_path", "Open a log dir"),
    ]
    DEFAULT_CSS = """
    TensorBoardScreen #tb-path { height: 1; border: none; padding: 0 1; }
    TensorBoardScreen #tb-path.hidden { display: none; }
    TensorBoardScreen #tb-status { height: 1; padding: 0 1; color: $text-muted; }
    TensorBoardScreen DataTable { height: 1fr; min-height: 4; }
    TensorBoardScreen Chart { height: 2fr; min-height: 6; }
    TensorBoardScreen #tb-chart > .chart--line { color: $chart-line; }
    """

    def __init__(self, log_dir: Path | None, roots: list[LogRoot] | None = None) -> None:
        """`roots`: a run's places (`run_log_roots`), the first of them `log_dir`; else `log_dir` alone."""
        super().__init__()
        self.log_dir = log_dir
        self.roots = roots
        self.reader: Any = None
        self.series: dict[tuple[str, str], Series] = {}
        self.shown: tuple[str, str] | None = None
        self._lock = threading.Lock()  # the reader thread adds to the reader's scalars and the series

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(
            value=str(self.log_dir or ""),
            placeholder="a TensorBoard log directory; Enter to open",
            id="tb-path",
            classes="hidden" if self.log_dir else "",
        )
        yield Static("", id="tb-status", markup=False)
        yield DataTable(id="tb-series", cursor_type="row", zebra_stripes=True)
        yield Chart(id="tb-chart")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*SUMMARY_HEADERS)
        if self.log_dir is None:
            self.query_one("#tb-path", Input).focus()
            self.query_one("#tb-status", Static).update("type a log directory")
        else:
            table.focus()
            self.open(self.log_dir, self.roots)
        self.set_interval(1.0, self.poll)

    def open(self, log_dir: Path, roots: list[LogRoot] | None = None) -> None:
        from ...monitors.tensorboard import LogDirReader, WalkLimits

        with self._lock:
            self.log_dir = log_dir
            self.roots = roots
            # A run's places are searched within limits: a script's output directory may be huge.
            self.reader = LogDirReader(roots, limits=WalkLimits()) if roots else LogDirReader(log_dir)
            self.series = {}
            self.shown = None
        self.query_one(DataTable).clear()
        self.poll()

    @work(thread=True, exclusive=True, group="tb-read")
    def poll(self) -> None:
        with self._lock:
            reader = self.reader
            if reader is None:
                return
            new = reader.poll()
            for key in reader.purged:  # points already charted were dropped: chart what is left
                kept = reader.scalars[key]
                series = self.series[key] = Series()
                series.extend(kept.steps, kept.values)
            for key, batch in new.items():
                if key in reader.purged:
                    continue
                series = self.series.get(key)
                if series is None:
                    series = self.series[key] = Series()
                series.extend(batch.steps, batch.values)
            changed = bool(new or reader.purged)
        if changed or not self.query_one(DataTable).row_count:
            self.app.call_from_thread(self.draw)

    def draw(self) -> None:
        from ...monitors.tensorboard import summary_cells, summary_rows

        with self._lock:
            if self.reader is None:
                return
            rows = summary_rows(self.reader.scalars)
            problems = [*map(str, self.reader.problems), *self.reader.walk_notes]
        table = self.query_one(DataTable)
        also = "".join(f" + {root.label}" for root in (self.roots or [])[1:])
        status = f"{self.log_dir}{also}: {len(rows)} series"
        if problems:
            status += f", {len(problems)} problem(s): {problems[-1]}"
        if not rows:
            status += " (no event files with scalars yet; watching)"
        self.query_one("#tb-status", Static).update(status)
        keys = set()
        for r in rows:
            key = f"{r['run']}\0{r['tag']}"
            keys.add(key)
            cells = summary_cells(r)
            if key in table.rows:
                for column, cell in zip(table.columns, cells, strict=True):
                    table.update_cell(key, column, cell)
            else:
                table.add_row(*cells, key=key)
        for key in [k.value for k in table.rows if k.value not in keys]:
            table.remove_row(key)  # a series a restart purged of every point
        self.show_highlighted()

    def show_highlighted(self) -> None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value or ""
        run, _, tag = key.partition("\0")
        self.shown = (run, tag)
        title = tag if run == "." else f"{run}  {tag}"
        with self._lock:
            series = self.series.get(self.shown)
            shown = series.copy() if series is not None else None
        self.query_one(Chart).update_series(shown, title)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_highlighted()

    def action_open_path(self) -> None:
        box = self.query_one("#tb-path", Input)
        box.remove_class("hidden")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        path = Path(event.value.strip()).expanduser()
        if not path.exists():
            self.notify(f"{path}: no such directory", severity="error")
            return
        event.input.add_class("hidden")
        self.query_one(DataTable).focus()
        self.open(path, None)

    def action_back(self) -> None:
        self.app.pop_screen()
