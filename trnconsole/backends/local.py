"""Local jobs: torchrun started detached in its own session, outliving the console.

The job's stdout and stderr go to RUN_DIR/stdout.log; a small wrapper (local_wrapper.py) leads the process
group and records the exit status, so how a run ended is known even if no console was running then.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..core.cores import ENV_VAR as CORES_ENV
from ..core.errors import UsageError
from ..core.paths import load_config
from ..core.spec import RunSpec
from ..core.store import RunRecord
from ..core.tail import FileTail
from .base import RUN_DIR_ENV, Backend, RunStatus, Submission
from .local_wrapper import EXIT_FILE

LOG_FILE = "stdout.log"
CORE_VERSION_ENV = "TRNCONSOLE_NEURONCORE_VERSION"  # read by the bundled runners; any script may read it
PATH_FLAGS = ("data", "eval_data", "model_path", "resume")  # bundled-runner flags naming local paths
# Exit codes of a job that was asked to stop (SIGTERM, SIGINT); a SIGKILL nobody asked for (the kernel's
# OOM killer) is a failure.
STOP_CODES = (128 + signal.SIGTERM, 128 + signal.SIGINT)


def runner_python(spec_python: str | None) -> str:
    """The runner's interpreter: the spec's, $TRNCONSOLE_PYTHON, config `runner_python`, or ours."""
    return (
        spec_python
        or os.environ.get("TRNCONSOLE_PYTHON")
        or load_config().get("runner_python")
        or sys.executable
    )


def find_torchrun(python: str) -> str:
    """torchrun of the runner's environment (beside its python), else the one on PATH."""
    beside = Path(python).parent / "torchrun"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("torchrun")
    if found:
        return found
    raise UsageError(
        f"torchrun: not found beside {python} nor on PATH; install torch in the runner's environment "
        "or set runner_python in ~/.config/trnconsole/config.toml"
    )


def torchrun_command(record: RunRecord, torchrun: str, script: Path) -> list[str]:
    spec = record.spec
    cmd = [torchrun, "--nproc_per_node", str(spec.nproc)]
    if spec.nnodes == 1:
        cmd += ["--standalone", "--nnodes", "1"]
    else:
        cmd += [
            "--nnodes",
            str(spec.nnodes),
            "--node_rank",
            str(spec.node_rank),
            "--rdzv_backend",
            "c10d",
            "--rdzv_endpoint",
            str(spec.rdzv_endpoint),
            "--rdzv_id",
            spec.backend_options.get("rdzv_id") or spec.name or "trnconsole",
        ]
    # "--": torchrun's parser would take a script flag that abbreviates one of its own (--logs, --max) as its.
    cmd += ["--", str(script), *spec.runner_args()]
    if spec.bundled:
        cmd += ["--output-dir", str(record.run_dir)]
    return cmd


def script_path(runner: str) -> Path:
    from ..resources import BUNDLED_RUNNERS, runner_script

    if runner in BUNDLED_RUNNERS:
        return runner_script(runner)
    return Path(runner)


class LocalBackend(Backend):
    name = "local"

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen] = {}  # reaped in status(), so no zombie stays "alive"

    def check(self, spec: RunSpec) -> None:
        python = runner_python(spec.python)
        if not Path(python).exists() and not shutil.which(python):
            raise UsageError(
                f"runner python {python}: not found; set runner_python to an existing interpreter"
            )
        find_torchrun(python)
        script = script_path(spec.runner)
        if not script.is_file():
            raise UsageError(
                f"RUNNER {spec.runner}: no such script; pass bert, gpt2, vit or a path to a Python "
                "training script"
            )
        cwd = Path(spec.cwd or ".")
        for name in PATH_FLAGS:
            value = spec.flags.get(name)
            if isinstance(value, str) and value != "auto" and not (cwd / value).expanduser().exists():
                raise UsageError(f"--set {name}={value}: no such file or directory (relative to {cwd})")

    def submit(self, record: RunRecord) -> Submission:
        spec = record.spec
        python = runner_python(spec.python)
        command = torchrun_command(record, find_torchrun(python), script_path(spec.runner))
        run_dir = record.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(spec.env)
        env.update(NEURON_PROCESS_TAG=record.id, TRNCONSOLE_RUN_ID=record.id, PYTHONUNBUFFERED="1")
        env[RUN_DIR_ENV] = str(run_dir)
        # Given at launch on a Neuron host, under the cores lock (service.place_on_cores).
        if spec.visible_cores:
            env[CORES_ENV] = spec.visible_cores
        if spec.core_version:  # the runner's hint for its MFU peak (runners/trn_harness/device.py)
            env[CORE_VERSION_ENV] = spec.core_version
        wrapper = [sys.executable, "-m", "trnconsole.backends.local_wrapper", str(run_dir), "--", *command]
        (run_dir / "command.json").write_text(json.dumps({"argv": command}, indent=1) + "\n")
        with open(run_dir / LOG_FILE, "ab") as log:
            proc = subprocess.Popen(
                wrapper,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=spec.cwd or None,
                env=env,
                start_new_session=True,  # its own session and process group: no SIGHUP from our terminal
                close_fds=True,
            )
        self._children[proc.pid] = proc
        handle = {"pid": proc.pid, "pgid": proc.pid, "create_time": _create_time(proc.pid)}
        return Submission(handle=handle, started_at=time.time(), pid=proc.pid, pgid=proc.pid)

    # ---- status ----

    def status(self, record: RunRecord) -> RunStatus:
        exit_status = read_exit_status(record.run_dir)
        if exit_status is not None:
            self._reap(record.pid)
            return _ended(record, exit_status)
        if self._wrapper_alive(record):
            return RunStatus("running")
        # The wrapper is gone without a record (killed with SIGKILL): the job may still be running.
        if record.pgid and group_members(record.pgid):
            return RunStatus("running", message="the wrapper is gone; the job still runs")
        exit_status = read_exit_status(record.run_dir)  # it may have just been written
        if exit_status is not None:
            return _ended(record, exit_status)
        return RunStatus("lost", ended_at=time.time(), message="the job ended without recording its exit")

    def _reap(self, pid: int | None) -> None:
        proc = self._children.pop(pid, None) if pid else None
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)

    def _wrapper_alive(self, record: RunRecord) -> bool:
        if not record.pid:
            return False
        proc = self._children.get(record.pid)
        if proc is not None and proc.poll() is not None:
            self._children.pop(record.pid, None)
            return False
        import psutil

        try:
            p = psutil.Process(record.pid)
            expected = (record.handle or {}).get("create_time")
            if expected is not None and abs(p.create_time() - expected) > 1.0:
                return False  # the pid was reused by an unrelated process
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    # ---- logs ----

    def logs(self, record: RunRecord, cursor: dict[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
        tail = FileTail(record.run_dir / LOG_FILE, int((cursor or {}).get("offset", 0)))
        lines = tail.read_lines()
        return lines, {"offset": tail.offset}

    # ---- stop ----

    def stop(self, record: RunRecord, grace_s: float = 15.0) -> RunStatus:
        """SIGTERM to the whole process group, SIGKILL after the grace period; no worker is left alive."""
        import psutil

        if not record.pgid:
            return self.status(record)
        members = _processes(record.pgid, record.pid)
        if not members:
            return self.status(record)
        _signal_all(members, signal.SIGTERM)
        workers = [p for p in members if p.pid != record.pid]
        _, alive = psutil.wait_procs(workers, timeout=grace_s)
        if alive:
            _signal_all(alive, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=5.0)
        # Give the wrapper a moment to write exit_status.json, then make sure nothing of the group is left.
        wrapper = [p for p in members if p.pid == record.pid]
        _, alive = psutil.wait_procs(wrapper, timeout=5.0)
        leftovers = alive + [p for p in _processes(record.pgid, None) if p not in alive]
        if leftovers:
            _signal_all(leftovers, signal.SIGKILL)
            psutil.wait_procs(leftovers, timeout=5.0)
        self._reap(record.pid)
        status = self.status(record)
        if status.state in ("lost", "running"):
            return RunStatus("stopped", exit_code=128 + signal.SIGKILL, ended_at=time.time())
        return status


def read_exit_status(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / EXIT_FILE).read_text())
    except (OSError, ValueError):
        return None


def _ended(record: RunRecord, exit_status: dict[str, Any]) -> RunStatus:
    code = int(exit_status.get("exit_code", 1))
    if code == 0:
        state = "completed"
    elif exit_status.get("stop_requested") or code in STOP_CODES or record.status == "stopping":
        state = "stopped"
    else:
        state = "failed"
    message = exit_status.get("error") or (
        f"killed by {exit_status['signal']}" if exit_status.get("signal") else None
    )
    return RunStatus(state, exit_code=code, ended_at=exit_status.get("ended_at"), message=message)


def group_members(pgid: int) -> list[int]:
    """Pids whose process group is pgid (the job's wrapper, torchrun and every worker)."""
    import psutil

    found = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(pid)
        except (OSError, psutil.Error):
            continue
    return found


def _processes(pgid: int, wrapper_pid: int | None) -> list[Any]:
    """The group's processes plus any descendant of the wrapper that left the group."""
    import psutil

    procs: dict[int, Any] = {}
    for pid in group_members(pgid):
        with contextlib.suppress(psutil.Error):
            procs[pid] = psutil.Process(pid)
    if wrapper_pid:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(wrapper_pid).children(recursive=True):
                procs.setdefault(child.pid, child)
    return list(procs.values())


def _signal_all(procs: list[Any], sig: int) -> None:
    import psutil

    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
