"""Checkpoints: written atomically by rank 0, loadable with plain torch.load on any device.

On XLA the state is saved with xm.save, which moves every tensor to the CPU first, so a checkpoint
written on Trainium loads on a GPU or CPU and the other way round.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from . import rundir
from .config import UsageError
from .device import Runtime

FORMAT_VERSION = 1
NAME = re.compile(r"step_(\d+)\.pt$")


def directory(output_dir: Path) -> Path:
    return output_dir / "checkpoints"


def path_for(output_dir: Path, step: int) -> Path:
    return directory(output_dir) / f"step_{step:08d}.pt"


def newest(output_dir: Path) -> Path | None:
    found = sorted(p for p in directory(output_dir).glob("step_*.pt") if NAME.search(p.name))
    return found[-1] if found else None


def save(runtime: Runtime, path: Path, state: dict[str, Any], keep: int) -> None:
    tmp = rundir.temp_path(path)
    if runtime.is_main:
        path.parent.mkdir(parents=True, exist_ok=True)
    if runtime.is_xla:
        import torch_xla.core.xla_model as xm

        xm.save(state, str(tmp), master_only=True, global_master=True)
    elif runtime.is_main:
        import torch

        torch.save(state, tmp)
    if runtime.is_main:
        os.replace(tmp, path)
        for old in sorted(path.parent.glob("step_*.pt"))[:-keep]:
            old.unlink(missing_ok=True)


def load(path: Path) -> dict[str, Any]:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file: the user picks another
        raise UsageError(
            f"--resume {path}: not a readable checkpoint ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise UsageError(f"--resume {path}: not a checkpoint written by these runners")
    return state
