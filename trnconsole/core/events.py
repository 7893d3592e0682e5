"""The metric event: what every parser produces and every series, store and screen consumes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Canonical metric names. Parsers translate the names of other formats to these.
STEP_METRICS = ("loss", "lr", "samples_per_s", "step_time_s", "tokens_per_s", "mfu", "grad_norm")


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a run reported.

    kind: "step", "eval", "compile", "checkpoint", "status", "summary" (a script's own end-of-training
        figures), or "progress" (a progress bar's total and time left).
    step: the optimizer step it refers to, when known.
    values: its numeric fields under canonical names (NaN and inf kept as floats).
    info: its other fields (a status's state, an error text, a compile phase, a checkpoint path).
    """

    kind: str
    step: int | None
    values: dict[str, float] = field(default_factory=dict)
    t: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
