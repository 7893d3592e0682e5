"""The Hugging Face Trainer's own record of a run, `trainer_state.json`: the steps its log dicts leave out.

The Trainer writes it into each checkpoint (`<output_dir>/checkpoint-<step>/`) and, on `save_state()`, into
the output directory: the global step, max_steps, and `log_history`, every dict it printed with its step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"
_MAX_CHECKPOINTS = 64  # checkpoint-* directories looked into per output directory, newest names first


@dataclass(frozen=True)
class TrainerState:
    global_step: int
    max_steps: int | None
    steps_per_epoch: float | None  # optimizer steps per epoch, from the log history's steps and epochs


def read_trainer_state(path: Path) -> TrainerState | None:
    """The state in `path`, or None when it is missing, torn or not a Trainer's."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("global_step"), int):
        return None
    history = tuple(h for h in data.get("log_history") or () if isinstance(h, dict))
    max_steps = data.get("max_steps")
    return TrainerState(
        global_step=data["global_step"],
        max_steps=max_steps if isinstance(max_steps, int) and max_steps > 0 else None,
        steps_per_epoch=_steps_per_epoch(history, data),
    )


def _steps_per_epoch(history: tuple[dict[str, Any], ...], data: dict[str, Any]) -> float | None:
    for entry in (*reversed(history), data):
        step, epoch = entry.get("step", entry.get("global_step")), entry.get("epoch")
        if isinstance(step, int) and isinstance(epoch, (int, float)) and epoch > 0 and step > 0:
            return step / epoch
    return None


def newest_trainer_state(output_dirs: Iterable[Path], since: float | None = None) -> TrainerState | None:
    """The newest trainer_state.json in these output directories or their checkpoint-* directories,
    written at or after `since` (a run's start, as a timestamp) so an earlier run's is not taken."""
    found: list[tuple[float, Path]] = []
    for directory in output_dirs:
        candidates = [directory / STATE_FILE]
        try:
            checkpoints = sorted(directory.glob("checkpoint-*"), key=_checkpoint_step, reverse=True)
        except OSError:
            checkpoints = []
        candidates += [c / STATE_FILE for c in checkpoints[:_MAX_CHECKPOINTS]]
        for path in candidates:
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            if since is None or mtime >= since:
                found.append((mtime, path))
    for _, path in sorted(found, reverse=True):
        state = read_trainer_state(path)
        if state is not None:
            return state
    return None


def _checkpoint_step(path: Path) -> int:
    tail = path.name.rpartition("-")[2]
    return int(tail) if tail.isdigit() else -1


def steps_per_epoch_from_summary(reported: Mapping[str, float]) -> float | None:
    """Steps per epoch from the Trainer's closing dict: `train_runtime` x `train_steps_per_second` steps run
    over its `epoch` (runtime_s, steps_per_s and epoch in `RunMetrics.reported_summary`); None when it lacks
    one."""
    runtime, rate, epoch = reported.get("runtime_s"), reported.get("steps_per_s"), reported.get("epoch")
    if not runtime or not rate or not epoch or not all(map(math.isfinite, (runtime, rate, epoch))):
        return None
    steps = round(runtime * rate)
    return steps / epoch if steps > 0 and epoch > 0 else None
