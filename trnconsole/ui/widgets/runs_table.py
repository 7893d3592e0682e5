"""The run list: a DataTable keyed by run id, updated cell by cell, never rebuilt on a tick."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from textual.widgets import DataTable

from ... import textfmt as fmt
from ..format import STATUS_ICONS, step_text

if TYPE_CHECKING:
    from ...live import RunView


COLUMNS = ("mark", "id", "name", "status", "runner", "backend", "elapsed", "step", "samples/s")
LABELS = ("", "ID", "NAME", "STATUS", "RUNNER", "BACKEND", "ELAPSED", "STEP", "SAMPLES/S")
# Columns whose text changes while a run goes on get a fixed width, so the table does not jitter;
# the others size to their content.
LIVE_WIDTHS = {"status": 12, "elapsed": 7, "step": 11, "samples/s": 9}


class RunsTable(DataTable):
    DEFAULT_CSS = """
    RunsTable { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: dict[str, tuple[str, ...]] = {}
        self._order: list[str] = []
        for key, label in zip(COLUMNS, LABELS, strict=True):
            self.add_column(label, key=key, width=LIVE_WIDTHS.get(key))

    @property
    def selected_id(self) -> str | None:
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    def show(self, views: Sequence[RunView], marked: set[str], now: float) -> None:
        order = [v.record.id for v in views]
        rows = {v.record.id: _cells(v, v.record.id in marked, now) for v in views}
        if order != self._order:
            selected = self.selected_id
            self.clear()
            for run_id in order:
                self.add_row(*rows[run_id], key=run_id)
            self._order = order
            self._shown = rows
            if selected in order:
                self.move_cursor(row=order.index(selected))
            return
        for run_id, cells in rows.items():
            old = self._shown.get(run_id)
            if old == cells:
                continue
            for column, value, before in zip(COLUMNS, cells, old or (None,) * len(cells), strict=True):
                if value != before:
                    self.update_cell(run_id, column, value)
            self._shown[run_id] = cells


def _cells(view: RunView, marked: bool, now: float) -> tuple[str, ...]:
    record = view.record
    return (
        "*" if marked else " ",
        record.id,
        (record.name or "-")[:16],
        f"{STATUS_ICONS.get(record.status, ' ')} {record.status}",
        record.runner[:16],
        record.backend,
        fmt.duration(record.elapsed(now)),
        step_text(view),
        fmt.number(view.samples_per_s),
    )
