"""Shared helpers: run a bundled runner as a real process and read what it wrote."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUNNERS = REPO / "runners"
sys.path.insert(0, str(RUNNERS))  # in-process tests import trn_harness the way the runner scripts do

from aws_helpers import aws_env, moto_url  # noqa: E402, F401  (fixtures for every module)

# Tests press Ctrl-C by sending SIGINT to the processes they start. A suite started as a background job of a
# non-interactive shell (`bash scripts/test.sh &`) has SIGINT ignored, which those processes would inherit:
# handled here, it is back to the default in every process started from now on.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The compiled ingest extensions (trnconsole/core/_linescan.c, _buckets.c) are built at install with the C
# compiler Python was built with; where there is none, the install goes on without them.
HAVE_C_COMPILER = shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is not None
needs_c_compiler = pytest.mark.skipif(
    not HAVE_C_COMPILER, reason="no C compiler here, so no compiled extensions were built"
)


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


RECORDED_RUN = Path(__file__).parent / "data" / "recorded_run"
FIXED_NOW = 1_763_800_000.0


def make_recorded_home(home: Path, copies: int = 1) -> list[str]:
    """A console home holding finished copies of a recorded tiny BERT run (fixed times, real files)."""
    import shutil

    from trnconsole.core.spec import RunSpec
    from trnconsole.core.store import Store

    spec = RunSpec(
        runner="bert",
        flags={"synthetic": True, "steps": "80", "log_every": "1", "eval_every": "40", "device": "cpu"},
        name="recorded",
        cwd="/",
    )
    ids = []
    with Store(home / "runs.db") as store:
        for i in range(copies):
            record = store.create(spec, lambda run_id: home / "runs" / run_id, run_id=f"{0xA1B2C3D4 + i:08x}")
            shutil.copytree(RECORDED_RUN, record.run_dir)
            store.update(
                record.id,
                status="completed",
                exit_code=0,
                started_at=FIXED_NOW - 600 + i,
                ended_at=FIXED_NOW - 564 + i,
                pid=None,
            )
            ids.append(record.id)
    return ids


@pytest.fixture
def recorded_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("TRNCONSOLE_HOME", str(home))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "config.toml"))
    ids = make_recorded_home(home)
    return home, ids
