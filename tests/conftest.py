"""Shared helpers: run a bundled runner as a real process and read what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUNNERS = REPO / "runners"
sys.path.insert(0, str(RUNNERS))  # in-process tests import trn_harness the way the runner scripts do


def runner_env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "WORLD_SIZE")
    }
    env.update(PJRT_DEVICE="CPU", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
    env.update(extra)
    return env


def run_runner(runner: str, *args: str, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RUNNERS / f"{runner}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=runner_env(**env),
    )


def run_torchrun(runner: str, nproc: int, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(nproc),
            str(RUNNERS / f"{runner}.py"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=runner_env(OMP_NUM_THREADS="1"),
    )


def read_events(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def read_result(output_dir: Path) -> dict:
    return json.loads((output_dir / "result.json").read_text())


def check_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    )


@pytest.fixture
def runner():
    return run_runner
