"""What a run leaves behind: metrics.jsonl, TensorBoard scalars, the stdout LOG line and result.json.

Only rank 0 writes. metrics.jsonl is appended and flushed line by line, so a crash loses nothing
already written and a resumed run continues the same file.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from .rundir import atomic_write_text

# LOG-line names for the fields the official Neuron samples print, in their order; the rest follow.
LOG_NAMES = {"loss": "step_loss", "lr": "learning_rate", "samples_per_s": "throughput"}


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; "nan" keeps the line valid and the fact visible
    return value


class RunOutputs:
    def __init__(self, output_dir: Path, enabled: bool, purge_step: int | None = None) -> None:
        self.output_dir = output_dir
        self.enabled = enabled
        self._metrics = None
        self._tb = None
        if enabled:
            output_dir.mkdir(parents=True, exist_ok=True)
            self._metrics = (output_dir / "metrics.jsonl").open("a", buffering=1, encoding="utf-8")
            self._tb = _open_tensorboard(output_dir / "tb", purge_step)

    def event(self, kind: str, step: int, **fields: Any) -> None:
        if not self._metrics:
            return
        record = {"t": round(time.time(), 3), "kind": kind, "step": step}
        record.update({k: _clean(v) for k, v in fields.items() if v is not None})
        self._metrics.write(json.dumps(record) + "\n")

    def log_line(self, epoch: int, step: int, fields: dict[str, float | None]) -> None:
        """`LOG <time> - (<epoch>, <step>) step_loss : 0.51 learning_rate : 4.0e-04 throughput : ...`"""
        if not self.enabled:
            return
        parts = []
        for name, value in fields.items():
            if value is None:
                continue
            label = LOG_NAMES.get(name, name)
            text = f"{value:.2e}" if name == "lr" else f"{value:.6g}" if abs(value) < 1e-3 else f"{value:.4f}"
            parts.append(f"{label} : {text}")
        print(f"LOG {time.asctime()} - ({epoch}, {step}) " + " ".join(parts), flush=True)

    def scalars(self, step: int, prefix: str, values: dict[str, float | None]) -> None:
        if not self._tb:
            return
        for name, value in values.items():
            if value is not None:
                self._tb.add_scalar(f"{prefix}/{name}", value, step)

    def write_result(self, result: dict[str, Any]) -> None:
        if self.enabled:
            atomic_write_text(self.output_dir / "result.json", json.dumps(_jsonable(result), indent=1) + "\n")

    def close(self) -> None:
        if self._tb:
            self._tb.close()
        if self._metrics:
            self._metrics.close()


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return _clean(value)


def _open_tensorboard(log_dir: Path, purge_step: int | None):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print(
            "warning: tensorboard is not installed; no TensorBoard scalars (pip install tensorboard)",
            file=sys.stderr,
        )
        return None
    return SummaryWriter(log_dir=str(log_dir), purge_step=purge_step, flush_secs=5)
