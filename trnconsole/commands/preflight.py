"""`trnconsole preflight`: device and collective checks before a long run, and `run_preflight` for
`launch --preflight`.

The workers run under torchrun in the runner's Python (trnconsole/preflight_worker.py, started by path); the
Neuron facts come from /dev, neuron-ls and a probe of that Python; core.preflight judges them all.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.preflight import (
    DEFAULT_MIN_FREE_GB,
    DEVICES,
    SKIP,
    Check,
    CoreUse,
    NeuronLs,
    PreflightReport,
    WorkerOutput,
    compile_cache_location,
    default_nproc,
    disk_applies,
    disk_check,
    merge_worker_checks,
    neuron_checks,
    neuron_device_nodes,
    torchrun_failure,
)

WORKER_SCRIPT = Path(__file__).resolve().parents[1] / "preflight_worker.py"
DEFAULT_CHECK_TIMEOUT_S = 120.0  # one check, first Neuron compile of its small graph included
DEFAULT_TIMEOUT_S = 900.0  # the whole torchrun, start-up and every check: the backstop behind the watchdogs
PROBE_TIMEOUT_S = 60.0
STOP_GRACE_S = 5.0
# torchrun's banner lines, which say nothing about why it ended.
_NOISE = (
    "*****",
    "=====",
    "-----",
    "Setting OMP_NUM_THREADS",
    "[Gloo] Rank",
    "WARNING:root:Defaulting to PJRT",
)


def run_preflight(
    nproc: int | None,
    device: str = "auto",
    python: str | None = None,
    cache_dir: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
    min_free_gb: float = DEFAULT_MIN_FREE_GB,
    env: Mapping[str, str] | None = None,
    dev_dir: Path = Path("/dev"),
    neuron_ls_executable: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> PreflightReport:
    """Run every check and return the report; never raises for a failed check (UsageError for bad input).

    nproc None picks every NeuronCore on a Neuron host, else 2. env is added to this process's environment
    for the workers and the compile-cache lookup (a run's --env). progress, when given, hears one line as
    the workers start.
    """
    from ..backends.local import runner_python

    _validate(nproc, device, timeout_s, check_timeout_s, min_free_gb)
    started = time.monotonic()
    python = runner_python(python)
    job_env = {**os.environ, **(env or {})}
    installed = probe_python(python, job_env)
    nodes = neuron_device_nodes(dev_dir)
    inventory = read_neuron_ls(neuron_ls_executable)
    torch_neuronx = installed.get("torch_neuronx")
    nproc = nproc or default_nproc(device, inventory, torch_neuronx, nodes)
    checks = neuron_checks(device, nproc, nodes, inventory, torch_neuronx, python)

    if installed.get("torch") is None:
        output, why = WorkerOutput(), ""
        rows = merge_worker_checks(output, nproc, why, skip_reason=f"torch is not installed in {python}")
    else:
        if progress is not None:
            progress(f"starting {nproc} worker(s) with torchrun, --device {device}, in {python}")
        output, why = run_workers(python, nproc, device, check_timeout_s, timeout_s, job_env)
        rows = merge_worker_checks(output, nproc, why)

    platform = next((r.platform for r in output.results.values() if r.platform), None)
    location, source = compile_cache_location(job_env, cache_dir)
    explicit = cache_dir is not None or source != "the Neuron default"
    if disk_applies(explicit, platform, bool(nodes)):
        disk = disk_check(location, source, min_free_gb)
    else:
        disk = Check(
            "compile_cache_disk",
            SKIP,
            f"the Neuron compile cache is not used on {platform or 'this host'} "
            "(name one with --cache-dir to check its disk anyway)",
        )
    return PreflightReport(
        checks=(*checks, disk, *rows),
        device=device,
        nproc=nproc,
        python=python,
        ranks=tuple(output.results[r] for r in sorted(output.results)),
        elapsed_s=round(time.monotonic() - started, 3),
    )


def _validate(
    nproc: int | None, device: str, timeout_s: float, check_timeout_s: float, min_free_gb: float
) -> None:
    if nproc is not None and nproc < 1:
        raise UsageError(f"--nproc: {nproc} is not a process count; give 1 or more")
    if device not in DEVICES:
        raise UsageError(f"--device: {device!r} is not one of {', '.join(DEVICES)}")
    if check_timeout_s <= 0:
        raise UsageError(f"--check-timeout: {check_timeout_s:g} s; give a positive number of seconds")
    if timeout_s <= 0:
        raise UsageError(f"--timeout: {timeout_s:g} s; give a positive number of seconds")
    if min_free_gb < 0:
        raise UsageError(f"--min-free-gb: {min_free_gb:g}; give 0 or more GiB")


def probe_python(python: str, env: Mapping[str, str]) -> dict[str, Any]:
    """What the runner's Python has installed (torch, torch-xla, torch-neuronx), without importing them."""
    try:
        done = subprocess.run(
            [python, str(WORKER_SCRIPT), "--probe"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            check=False,
        )
    except FileNotFoundError:
        raise UsageError(f"--python: {python} does not exist; give the runner environment's python") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"--python: {python} could not be run ({exc}); give a working interpreter") from None
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (IndexError, ValueError):
        found = None
    if not isinstance(found, dict):
        said = _last_words(done.stderr.splitlines()) or f"exit code {done.returncode}"
        raise UsageError(f"--python: {python} could not run the preflight probe: {said}")
    return found


def read_neuron_ls(executable: str | os.PathLike[str] | None = None) -> NeuronLs:
    """neuron-ls -j (on PATH or in /opt/aws/neuron/bin), reduced to what preflight judges."""
    from ..monitors.neuron import find_tool, neuron_ls

    path = find_tool("neuron-ls", executable)
    inventory = neuron_ls(executable)
    if path is None:
        return NeuronLs(path=None, problem=inventory.problem)
    busy = tuple(CoreUse(h.pid, h.command, h.core_ids) for _, h in sorted(inventory.holders().items()))
    return NeuronLs(
        path=path,
        devices=len(inventory.devices),
        cores=inventory.core_count,
        busy=busy,
        problem=inventory.problem,
    )


def torchrun_command(python: str, nproc: int, device: str, check_timeout_s: float) -> list[str]:
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        str(WORKER_SCRIPT),
        "--device",
        device,
        "--check-timeout",
        f"{check_timeout_s:g}",
    ]


def run_workers(
    python: str,
    nproc: int,
    device: str,
    check_timeout_s: float,
    timeout_s: float,
    env: Mapping[str, str],
) -> tuple[WorkerOutput, str]:
    """Start the workers under torchrun and collect their lines until it ends or timeout_s passes (then its
    whole process group is stopped). Returns what the workers said, and how torchrun ended."""
    output = WorkerOutput()
    lock = threading.Lock()
    other: deque[str] = deque(maxlen=60)  # enough for torchrun's failure summary
    proc = subprocess.Popen(
        torchrun_command(python, nproc, device, check_timeout_s),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,  # one group holds torchrun and its workers, so all can be stopped at once
        env={**env, "PYTHONUNBUFFERED": "1"},
    )

    def read(stream: Any) -> None:
        for line in stream:
            line = line.rstrip("\n")
            with lock:
                if not output.feed(line) and line.strip():
                    other.append(line)

    readers = [threading.Thread(target=read, args=(s,), daemon=True) for s in (proc.stdout, proc.stderr)]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        _stop_group(proc)
        for reader in readers:
            reader.join(timeout=STOP_GRACE_S)
    if timed_out:
        why = f"preflight stopped torchrun after {timeout_s:g} s (--timeout)"
    elif proc.returncode == 0:
        why = "torchrun exited with code 0"
    else:
        said = torchrun_failure(list(other)) or _last_words(list(other))
        why = f"torchrun exited with code {proc.returncode}" + (f": {said}" if said else "")
    return output, why


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to torchrun's group, SIGKILL after a grace; also reaps workers torchrun left behind."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(proc.pid):
            break
        time.sleep(0.2)
    proc.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _last_words(lines: list[str]) -> str:
    """The last line that says something (not torchrun's banner), clipped."""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith(_NOISE):
            return text if len(text) <= 300 else text[:297] + "..."
    return ""


# ---- the command ----


def cmd_preflight(args: argparse.Namespace, console_factory: Any) -> int:
    from ..textfmt import json_text

    progress = None
    if not args.json and sys.stderr.isatty():

        def progress(text: str) -> None:
            print(f"preflight: {text} ...", file=sys.stderr, flush=True)

    try:
        report = run_preflight(
            args.nproc,
            args.device,
            python=args.python,
            cache_dir=args.cache_dir,
            timeout_s=args.timeout,
            check_timeout_s=args.check_timeout,
            min_free_gb=args.min_free_gb,
            progress=progress,
        )
    except KeyboardInterrupt:  # the workers' process group is already stopped
        print("preflight: interrupted", file=sys.stderr)
        return 130
    print(json_text(report.to_json()) if args.json else report_text(report), flush=True)
    return report.exit_code


def report_text(report: PreflightReport) -> str:
    """The CHECK / RESULT / DETAIL table and a one-line verdict, in plain text."""
    from ..textfmt import table

    rows = [
        (c.name, c.result, c.detail + ("" if c.ms is None else f" [{_ms_text(c.ms)}]")) for c in report.checks
    ]
    counts = report.counts()
    verdict = "passed" if report.ok else "FAILED"
    where = f" on {report.ran_on}" if report.ran_on else ""
    took = "" if report.elapsed_s is None else f" in {report.elapsed_s:.1f} s"
    summary = (
        f"preflight {verdict}: {counts['PASS']} pass, {counts['FAIL']} fail, {counts['SKIP']} skip; "
        f"{report.nproc} process(es), --device {report.device}{where}{took}"
    )
    return table(("CHECK", "RESULT", "DETAIL"), rows) + "\n" + summary


def _ms_text(ms: float) -> str:
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:,.0f} ms"
