"""`trnconsole precompile`: neuron_parallel_compile on a short trial run of a runner, so that the real run
finds its graphs compiled in the Neuron compile cache; live progress, a summary, the tool's output in a log.

`run_precompile` is the reusable part (`launch --precompile` calls it before starting the run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from .. import textfmt as fmt
from ..core.errors import UsageError
from ..core.precompile import CacheLocation, PrecompileLog, PrecompileSummary, cache_location
from ..core.spec import RunSpec
from ..core.store import RunRecord

TOOL = "neuron_parallel_compile"
NEURON_BIN_DIRS = (Path("/opt/aws/neuron/bin"),)
DEFAULT_STEPS = 10  # the Neuron docs' advice: a trial of 10-15 steps meets every graph of the loop
# Flags that bound a training script's steps (the bundled runners' --steps, Hugging Face's --max_steps, the
# Neuron samples' --steps_this_run / --max_train_steps, Megatron's --train_iters).
STEP_FLAGS = ("steps", "max_steps", "max_train_steps", "steps_this_run", "train_iters", "num_train_steps")
LOG_FILE = "precompile.log"
SUMMARY_FILE = "summary.json"
PLAIN_EVERY_S = 1.0  # plain progress lines at most this often
BAR_EVERY_S = 0.2
MAX_PARTIAL_LINE = 1 << 20  # a newline-free stream is read as a line once this long
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class PrecompileResult:
    """One neuron_parallel_compile run: what was run, how it ended and what its output said."""

    id: str
    directory: Path
    argv: tuple[str, ...]
    cwd: str
    steps: int | None  # the trial's step limit (None: the script's own, no known step flag)
    returncode: int | None  # the tool's exit status (None when it could not be waited for)
    seconds: float
    cache: CacheLocation
    log: PrecompileSummary
    interrupted: bool = False

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_FILE

    @property
    def ok(self) -> bool:
        """Every graph the trial met is compiled in the cache (or was already)."""
        log = self.log
        return (
            not self.interrupted
            and self.returncode == 0
            and (not log.script_failed or log.script_error_ignored)
            and log.failed == 0
            and log.cached_failures == 0
        )

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 0 if self.ok else 1

    @property
    def cache_text(self) -> str:
        """The cache the tool reported using, else the one its environment selects."""
        url = self.log.cache_path or self.cache.resolved(self.cwd)
        return f"{url} ({self.cache.kind}, from {self.cache.source})"

    def to_json(self) -> dict[str, Any]:
        log = self.log.to_json()
        reported = log.pop("cache_path")
        return {
            "id": self.id,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "tool_exit_code": self.returncode,
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 3),
            "steps": self.steps,
            "directory": str(self.directory),
            "log": str(self.log_path),
            "argv": list(self.argv),
            "cache": {**self.cache.to_json(self.cwd), "reported": reported},
            **log,
        }


# ---- the command line of the trial ----


def find_tool(python: str) -> str:
    """neuron_parallel_compile beside the runner's Python (torch-neuronx installs it there), on PATH, or in
    /opt/aws/neuron/bin; UsageError saying how to get it otherwise."""
    candidates = [Path(python).parent / TOOL]
    on_path = shutil.which(TOOL)
    if on_path:
        candidates.append(Path(on_path))
    candidates += [directory / TOOL for directory in NEURON_BIN_DIRS]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise UsageError(
        f"{TOOL}: not found beside {python}, on PATH or in {NEURON_BIN_DIRS[0]}; it comes with torch-neuronx "
        "(pip install torch-neuronx neuronx-cc from the Neuron pip repository, with the aws-neuronx-tools "
        "package) on a trn1 host: activate that environment or set runner_python to its python"
    )


def trial_spec(spec: RunSpec, steps: int, steps_flag: str | None = None) -> tuple[RunSpec, int | None]:
    """The spec of the trial run: the same flags with the step count capped at `steps` (only the step limit
    may differ between precompilation and the real run, or the graphs differ); and the cap applied, None
    when the script has no step flag the console knows of."""
    flags = dict(spec.flags)
    if steps_flag:
        name = steps_flag.lstrip("-")
        if spec.bundled:
            name = name.replace("-", "_")
    elif spec.bundled:
        name = "steps"
    else:
        name = next((flag for flag in flags if flag.lstrip("-").replace("-", "_") in STEP_FLAGS), "")
        if not name:
            return spec, None
    given = flags.get(name)
    try:
        cap = min(steps, int(str(given))) if given not in (None, True, False) else steps
    except ValueError:
        raise UsageError(f"--set {name}={given}: not a whole number of steps") from None
    flags[name] = str(cap)
    return replace(spec, flags=flags), cap


def precompile_argv(
    tool: str, spec: RunSpec, torchrun: str, script: Path, output_dir: Path, num_parallel: int | None
) -> list[str]:
    """`neuron_parallel_compile [--num_parallel N] torchrun ... SCRIPT FLAGS`, the torchrun part built as
    the local backend builds it, with a bundled runner's outputs kept in the precompile directory (the
    trial's losses and checkpoints are not real)."""
    from ..backends.local import torchrun_command

    stand_in = RunRecord(
        id=output_dir.parent.name,
        name=spec.name,
        runner=spec.runner,
        backend="local",
        spec=spec,
        status="running",
        created_at=time.time(),
        run_dir=output_dir,
    )
    options = [f"--num_parallel={num_parallel}"] if num_parallel else []
    return [tool, *options, *torchrun_command(stand_in, torchrun, script)]


def new_precompile_dir(home: Path, label: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", label)[:40] or "script"
    directory = home / "precompile" / f"{stamp}-{name}-{secrets.token_hex(2)}"
    directory.mkdir(parents=True)
    return directory


# ---- running it ----


def run_precompile(
    spec: RunSpec,
    console: Any,
    out: TextIO,
    *,
    steps: int = DEFAULT_STEPS,
    steps_flag: str | None = None,
    num_parallel: int | None = None,
) -> PrecompileResult:
    """Run neuron_parallel_compile on a capped trial of `spec` in the foreground: its output goes to
    PRECOMPILE_DIR/precompile.log, progress to `out` (a bar on a terminal, plain lines otherwise), then a
    summary. Ctrl-C stops the tool and everything it started, and returns an interrupted result."""
    from ..backends.local import find_torchrun, runner_python, script_path

    if spec.backend != "local":
        raise UsageError(
            f"--backend {spec.backend}: precompiling runs {TOOL} on this host; precompile on a trn1 host "
            "with the backend's image, or point NEURON_COMPILE_CACHE_URL at an s3:// cache both can reach"
        )
    if steps < 1:
        raise UsageError(f"--precompile-steps {steps}: must be a positive number of steps (default 10)")
    if num_parallel is not None and num_parallel < 1:
        raise UsageError(f"--num-parallel {num_parallel}: must be a positive number of compile workers")
    python = runner_python(spec.python)
    tool = find_tool(python)
    torchrun = find_torchrun(python)
    script = script_path(spec.runner)
    trial, cap = trial_spec(spec, steps, steps_flag)
    directory = new_precompile_dir(console.home, spec.runner_label)
    argv = precompile_argv(tool, trial, torchrun, script, directory / "output", num_parallel)
    precompile_id = directory.name
    env = {**os.environ, **spec.env}
    env.update(NEURON_PROCESS_TAG=f"precompile-{precompile_id}", PYTHONUNBUFFERED="1")
    cwd = spec.cwd or os.getcwd()
    cache = cache_location(env)
    (directory / "command.json").write_text(
        json.dumps({"argv": argv, "cwd": cwd, "env": spec.env, "spec": spec.to_json()}, indent=1) + "\n"
    )
    if cap is None:
        out.write(
            f"note: {spec.runner_label} has no step flag the console knows ({', '.join(STEP_FLAGS)}); the "
            "trial runs as configured. Give one with --steps-flag NAME to cap it.\n"
        )
    limit = f"{cap} steps" if cap is not None else "its own steps"
    out.write(
        f"precompile {precompile_id}: {spec.runner_label} x{spec.nproc}, {limit}, cache "
        f"{cache.resolved(cwd)} ({cache.kind}); log {directory / LOG_FILE}\n"
    )
    out.flush()

    parser = PrecompileLog()
    display = ProgressDisplay(out)
    started = time.monotonic()
    interrupted = False
    returncode: int | None = None
    with open(directory / LOG_FILE, "ab") as log_file:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,  # its own process group: the compile workers stop with it
        )
        try:
            pump(
                process, log_file, parser, lambda: display.show(parser.snapshot(), time.monotonic() - started)
            )
            returncode = process.wait()
        except KeyboardInterrupt:
            interrupted = True
            returncode = stop(process)
        finally:
            if process.poll() is None:
                returncode = stop(process)
    seconds = time.monotonic() - started
    display.show(parser.snapshot(), seconds, final=True)
    result = PrecompileResult(
        id=precompile_id,
        directory=directory,
        argv=tuple(argv),
        cwd=cwd,
        steps=cap,
        returncode=returncode,
        seconds=seconds,
        cache=cache,
        log=parser.snapshot(),
        interrupted=interrupted,
    )
    (directory / SUMMARY_FILE).write_text(fmt.json_text(result.to_json()) + "\n")
    out.write(summary_text(result) + "\n")
    out.flush()
    return result


def pump(process: subprocess.Popen[bytes], log_file: Any, parser: PrecompileLog, tick: Any) -> None:
    """Copy the tool's output into the log file as it comes and feed it to the parser line by line
    (`\\r` ends a line too: progress bars redraw with it); `tick()` after each read and twice a second."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    partial = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            tick()
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        log_file.write(chunk)
        log_file.flush()
        *lines, partial = re.split(rb"\r\n|\r|\n", partial + chunk)
        if len(partial) > MAX_PARTIAL_LINE:
            lines.append(partial)
            partial = b""
        for line in lines:
            parser.feed(line.decode("utf-8", errors="replace"))
        tick()
    if partial:  # the last line had no newline
        parser.feed(partial.decode("utf-8", errors="replace"))
    process.stdout.close()


def stop(process: subprocess.Popen[bytes]) -> int | None:
    """SIGINT to the tool's whole process group (as Ctrl-C in its own terminal), SIGTERM and then SIGKILL
    if it lingers; its exit status."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            return process.wait(timeout=STOP_GRACE_S if sig != signal.SIGKILL else None)
        except subprocess.TimeoutExpired:
            continue
    return process.returncode


# ---- what the user sees ----


def progress_text(snap: PrecompileSummary, elapsed: float) -> str:
    """One line of where the precompile stands, without the bar."""
    clock = fmt.duration(elapsed)
    cached = f"{snap.cache_hits} from cache"
    if snap.phase == "starting":
        return f"starting {TOOL}  {clock}"
    if snap.phase == "extracting":
        return f"trial run: {snap.extracted} graph(s) to compile, {cached}  {clock}"
    progress = snap.progress
    if progress is None:
        return f"{snap.phase}: {snap.compiler_calls} graph(s) handed to the compiler, {cached}  {clock}"
    return (
        f"{snap.phase}: {progress.done}/{progress.total} compiled, {progress.locked} compiling, "
        f"{progress.failed} failed, {cached}  {clock}"
    )


def progress_bar(snap: PrecompileSummary, cells: int = 24) -> str:
    fraction = snap.progress.fraction if snap.progress else (1.0 if snap.phase == "done" else 0.0)
    filled = min(cells, int(cells * fraction))
    return "[" + "#" * filled + "." * (cells - filled) + f"] {int(100 * fraction):3d}%  "


class ProgressDisplay:
    """A redrawn bar on a terminal; elsewhere a plain line when something changed, at most once a second
    (and always when the phase changes)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._last_at = 0.0
        self._last_text = ""
        self._last_phase = ""
        self._drawn = False

    def show(self, snap: PrecompileSummary, elapsed: float, final: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            if final or now - self._last_at >= BAR_EVERY_S:
                width = shutil.get_terminal_size((100, 24)).columns
                line = (progress_bar(snap) + progress_text(snap, elapsed))[: width - 1]
                self.out.write("\r" + line.ljust(width - 1) + ("\n" if final else ""))
                self.out.flush()
                self._last_at = now
            return
        text = progress_text(snap, elapsed)
        steady = text.rsplit("  ", 1)[0]  # the line without its clock: print changes, not seconds
        phase_changed = snap.phase != self._last_phase
        due = now - self._last_at >= PLAIN_EVERY_S
        if steady != self._last_text and (phase_changed or due or final):
            self.out.write(f"precompile: {text}\n")
            self.out.flush()
            self._last_at, self._last_text, self._last_phase = now, steady, snap.phase


def summary_text(result: PrecompileResult) -> str:
    log = result.log
    if result.interrupted:
        verdict = "interrupted (Ctrl-C); the graphs compiled so far are in the cache"
    elif result.ok:
        verdict = "ok: the real run will find its graphs compiled"
    elif log.script_failed and not log.script_error_ignored:
        verdict = "failed: the trial run of the training command failed"
    elif log.failed or log.cached_failures:
        verdict = "failed: some graphs did not compile"
    else:
        verdict = f"failed: {TOOL} exited with code {result.returncode}"
    graphs = f"{log.compiled} compiled, {log.failed} failed, {log.cache_hits} already in the cache"
    if log.cached_failures:
        graphs += f", {log.cached_failures} cached as failed"
    rows = [
        ("precompile", f"{result.id}: {verdict}"),
        ("graphs", graphs),
        ("cache", result.cache_text),
        ("seconds", f"{result.seconds:.1f}"),
        ("log", str(result.log_path)),
    ]
    if log.skipped_lines:
        rows.append(("skipped", f"{log.skipped_lines} garbled or cut-off tool line(s)"))
    for message in log.errors[:5]:
        rows.append(("error", message))
    if log.error_count > len(log.errors[:5]):
        rows.append(("", f"... {log.error_count} error line(s) in all, see the log"))
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def cmd_precompile(args: argparse.Namespace, console_factory: Any) -> int:
    from ..backends.local import runner_python

    # On a host without Neuron this one line is the whole answer: say it before reading the runner's flags.
    find_tool(runner_python(args.python))
    console = console_factory()
    spec = console.build_spec(args.runner, args.set, args.env, nproc=args.nproc, python=args.python)
    out = sys.stderr if args.json else sys.stdout
    result = run_precompile(
        spec,
        console,
        out,
        steps=args.precompile_steps,
        steps_flag=args.steps_flag,
        num_parallel=args.num_parallel,
    )
    if args.json:
        print(fmt.json_text(result.to_json()))
    return result.exit_code
