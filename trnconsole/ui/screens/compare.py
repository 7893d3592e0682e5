"""Compare: the figures of the marked runs side by side with ratios to a chosen baseline, sortable."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from ... import textfmt as fmt
from ...core.compare import compare_rows

COLUMNS = (
    ("run", "RUN"),
    ("status", "STATUS"),
    ("steps", "STEPS"),
    ("final_loss", "LOSS"),
    ("eval_value", "EVAL"),
    ("avg_samples_per_s", "SAMPLES/S"),
    ("peak_samples_per_s", "PEAK"),
    ("mfu", "MFU"),
    ("compile_count", "COMPILES"),
    ("wall_time_s", "WALL"),
    ("instance_type", "INSTANCE"),
    ("usd_per_hour", "$/H"),
    ("billed_seconds", "BILLED S"),
    ("cost_usd", "COST $"),
    ("usd_per_1k_samples", "$/1K SAMPLES"),
    ("avg_samples_per_s_ratio", "x SAMPLES/S"),
    ("final_loss_ratio", "x LOSS"),
    ("eval_value_ratio", "x EVAL"),
    ("wall_time_s_ratio", "x WALL"),
    ("cost_usd_ratio", "x COST"),
)


class CompareScreen(Screen):
    BINDINGS = [
        Binding("escape,c", "app.pop_screen", "Back"),
        Binding("b", "baseline", "Set baseline"),
        Binding("s", "sort", "Sort by column"),
    ]
    DEFAULT_CSS = """
    CompareScreen #caption { height: auto; padding: 0 1; color: $text-muted; }
    CompareScreen DataTable { height: 1fr; }
    """

    def __init__(self, runs: list[tuple[str, str | None, dict[str, Any]]]) -> None:
        super().__init__()
        self.runs = runs  # (id, name, summary)
        self.baseline = 0
        self.sort_column: str | None = None
        self.sort_reverse = False
        self.rows: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="caption")
        yield DataTable(cursor_type="cell", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        self.fill()

    def fill(self) -> None:
        self.rows = compare_rows(self.runs, self.baseline)
        if self.sort_column:
            key = self.sort_column
            present = [r for r in self.rows if isinstance(r.get(key), (int, float))]
            missing = [r for r in self.rows if not isinstance(r.get(key), (int, float))]
            self.rows = sorted(present, key=lambda r: r[key], reverse=self.sort_reverse) + missing
        table = self.query_one(DataTable)
        table.clear()
        for row in self.rows:
            table.add_row(*[_cell(key, row) for key, _ in COLUMNS], key=row["id"])
        base_id = self.runs[self.baseline][0] if self.runs else "-"
        order = (
            f", sorted by {self.sort_column}{' (descending)' if self.sort_reverse else ''}"
            if self.sort_column
            else ""
        )
        self.query_one("#caption", Static).update(
            f"{len(self.rows)} runs, ratios against {base_id}{order}.  b: make the run under the cursor the "
            "baseline  s: sort by the column under the cursor (again: reverse)  Esc: back"
        )

    def action_baseline(self) -> None:
        table = self.query_one(DataTable)
        if not self.rows:
            return
        run_id = self.rows[table.cursor_row]["id"]
        self.baseline = next(i for i, r in enumerate(self.runs) if r[0] == run_id)
        self.fill()

    def action_sort(self) -> None:
        table = self.query_one(DataTable)
        key = COLUMNS[table.cursor_column][0]
        if key == "run":
            key = "id"
        self.sort_reverse = not self.sort_reverse if self.sort_column == key else True
        self.sort_column = key
        self.fill()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        table = self.query_one(DataTable)
        table.move_cursor(column=event.column_index)
        self.action_sort()


def _cell(key: str, row: dict[str, Any]) -> str:
    if key == "run":
        return row["id"] + (f" {row['name']}" if row.get("name") else "")
    value = row.get(key)
    if key.endswith("_ratio"):
        return "-" if value is None else f"{value:.2f}x"
    if key == "wall_time_s":
        return fmt.duration(value)
    if key == "eval_value" and value is not None:
        return f"{row.get('eval_metric')} {fmt.number(value)}"
    if key == "mfu" and value is not None:
        return f"{100 * value:.1f}%"
    if key == "cost_usd":
        return fmt.money(value)
    if key == "usd_per_1k_samples":
        return fmt.money(value, digits=4)
    if key == "instance_type" and value and (row.get("instances") or 1) > 1:
        return f"{row['instances']} x {value}"
    return fmt.number(value) if not isinstance(value, str) else value
