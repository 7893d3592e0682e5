"""The comparison of runs: one row of figures per run and each run's ratio to a baseline run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# (column, summary key, what a higher value means) — the figures `compare` shows, in order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("steps", "step"),
    ("final_loss", "final_loss"),
    ("eval_metric", "eval_metric"),
    ("eval_value", "eval_value"),
    ("avg_samples_per_s", "avg_samples_per_s"),
    ("peak_samples_per_s", "peak_samples_per_s"),
    ("mfu", "mfu"),
    ("compile_count", "compile_count"),
    ("wall_time_s", "wall_time_s"),
    ("instance_type", "instance_type"),
    ("instances", "instances"),
    ("usd_per_hour", "usd_per_hour"),
    ("billed_seconds", "billed_seconds"),
    ("cost_usd", "cost_usd"),
    ("usd_per_1k_samples", "usd_per_1k_samples"),
)
# The figures whose ratio to the baseline is worth a column.
RATIOS = ("avg_samples_per_s", "final_loss", "eval_value", "wall_time_s", "cost_usd", "usd_per_1k_samples")


def compare_rows(
    runs: Sequence[tuple[str, str | None, Mapping[str, Any]]], baseline: int = 0
) -> list[dict[str, Any]]:
    """runs: (id, name, summary) each. Rows carry the figures and `<figure>_ratio` against runs[baseline]."""
    if not runs:
        return []
    base = runs[baseline][2]
    rows = []
    for run_id, name, summary in runs:
        row: dict[str, Any] = {"id": run_id, "name": name, "status": summary.get("status")}
        for column, key in COLUMNS:
            row[column] = summary.get(key)
        for key in RATIOS:
            row[f"{key}_ratio"] = ratio(summary.get(key), base.get(key))
        rows.append(row)
    return rows


def ratio(value: Any, base: Any) -> float | None:
    if not isinstance(value, (int, float)) or not isinstance(base, (int, float)) or base == 0:
        return None
    return value / base
