"""`trnconsole tb` (scalars from event files) and `trnconsole tensorboard` (the real server)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError
from ..core.paths import tensorboard_dir

if TYPE_CHECKING:
    from ..monitors.tensorboard import LogRoot

DEFAULT_PORT = 6006
# A one-off listing may look longer than the console's poll does.
CLI_WALK_SECONDS = 5.0


def log_dir_for(target: str, console_factory: Any) -> Path:
    """A directory as it is, else a run id (or prefix): the run's `tb/` (bundled runners), else its run
    directory (a user's script writing event files anywhere beneath it)."""
    path = Path(target).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        return path.parent  # an event file: its directory
    return tensorboard_dir(_run(target, console_factory).run_dir)


def log_roots_for(target: str, console_factory: Any) -> list[LogRoot]:
    """A path as it is, else every place a run's TensorBoard files may be (`run_log_roots`)."""
    from ..monitors.tensorboard import LogRoot, run_log_roots

    path = Path(target).expanduser()
    if path.exists():
        return [LogRoot(path)]
    record = _run(target, console_factory)
    return run_log_roots(record.spec, record.run_dir, record.created_at)


def _run(target: str, console_factory: Any) -> Any:
    console = console_factory()
    try:
        return console.store.resolve(target)
    except UsageError as exc:
        raise UsageError(f"{target}: neither a directory nor a run ({exc})") from None


def event_dirs(roots: list[LogRoot]) -> list[tuple[str, Path]]:
    """(run name, directory) of each directory holding event files below the roots, as the console finds
    them (bounded, and only those written since the run began in a script's shared directories)."""
    from ..monitors.tensorboard import LogDirReader, WalkLimits

    reader = LogDirReader(roots, limits=WalkLimits(seconds=CLI_WALK_SECONDS))
    return reader.run_dirs()


def logdir_args(roots: list[LogRoot]) -> list[str]:
    """TensorBoard's --logdir for one root; for a run whose files are in several places, --logdir_spec with
    its run directory (whose new subdirectories TensorBoard finds itself) and each directory found in the
    others, named as the console names them."""
    if len(roots) == 1:
        return ["--logdir", str(roots[0].path)]
    primary = roots[0].path
    groups = [("run", primary)]
    for run, directory in event_dirs(roots):
        if not directory.resolve().is_relative_to(primary.resolve()):
            groups.append((run, directory))
    if len(groups) == 1:
        return ["--logdir", str(primary)]
    specs = []
    for name, directory in groups:
        if "," in str(directory):
            print(
                f"warning: {directory}: a comma in the path; TensorBoard cannot be given it", file=sys.stderr
            )
            continue
        # A group name may hold neither the spec's separators nor a leading "/" (taken as a path).
        specs.append(f"{name.replace(',', '_').replace(':', '_').lstrip('/') or 'run'}:{directory}")
    return ["--logdir_spec", ",".join(specs)]


def tensorboard_command(python_candidates: list[str]) -> list[str]:
    """How to start TensorBoard: this interpreter's, a `tensorboard` on PATH, or the runner environment's."""
    if importlib.util.find_spec("tensorboard") is not None:
        return [sys.executable, "-m", "tensorboard.main"]
    on_path = shutil.which("tensorboard")
    if on_path:
        return [on_path]
    for python in python_candidates:
        if python and python != sys.executable and _has_tensorboard(python):
            return [python, "-m", "tensorboard.main"]
    raise UsageError("tensorboard: not installed here nor in the runner's Python; pip install tensorboard")


def _has_tensorboard(python: str) -> bool:
    try:
        probe = subprocess.run(
            [python, "-c", "import tensorboard"], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def free_port(preferred: int) -> int:
    """`preferred` when nothing listens there on 127.0.0.1, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise UsageError("--port: no free port on 127.0.0.1")


def wait_until_serving(url: str, process: subprocess.Popen[bytes], stderr: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stderr.seek(0)
            said = [s.strip() for s in stderr.read().decode(errors="replace").splitlines() if s.strip()]
            last = f": {said[-1]}" if said else ""
            raise UsageError(f"tensorboard exited with code {process.returncode} before serving {url}{last}")
        try:
            with urllib.request.urlopen(url + "data/environment", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise UsageError(f"tensorboard did not answer at {url} within {timeout_s:.0f} s")


def start_server(
    log_dir: Path | list[str], port: int | None, python_candidates: list[str], timeout_s: float = 120.0
) -> tuple[subprocess.Popen[bytes], str]:
    """Start TensorBoard on 127.0.0.1 for `log_dir` (or those `logdir_args` gave); return the process once
    it serves, and its URL."""
    chosen = port if port is not None else free_port(DEFAULT_PORT)
    where = log_dir if isinstance(log_dir, list) else ["--logdir", str(log_dir)]
    command = [
        *tensorboard_command(python_candidates),
        *where,
        "--host",
        "127.0.0.1",
        "--port",
        str(chosen),
        "--reload_interval",
        "5",
    ]
    # The server's stderr, read only if it fails to start (a pipe nobody reads could block it); the file
    # lives as long as the server.
    stderr = tempfile.TemporaryFile()  # noqa: SIM115
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    url = f"http://127.0.0.1:{chosen}/"
    try:
        wait_until_serving(url, process, stderr, timeout_s)
    except BaseException:
        stop_server(process)
        raise
    return process, url


def stop_server(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def cmd_tensorboard(args: argparse.Namespace, console_factory: Any) -> int:
    from ..backends.local import runner_python

    target = Path(args.target).expanduser()
    if target.exists():
        log_dir: Path | list[str] = log_dir_for(args.target, console_factory)
        shown = str(log_dir)
    else:
        roots = log_roots_for(args.target, console_factory)
        log_dir = logdir_args(roots)
        shown = str(roots[0].path) + "".join(f" + {root.label}" for root in roots[1:])
    process, url = start_server(log_dir, args.port, [runner_python(None)])
    print(f"TensorBoard for {shown} at {url}  (Ctrl-C stops it)", flush=True)
    try:
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(process)
    return 0 if process.returncode in (0, -signal.SIGTERM, None) else 1


def cmd_tb(args: argparse.Namespace, console_factory: Any) -> int:
    from .. import textfmt as fmt
    from ..monitors.tensorboard import SUMMARY_HEADERS, LogDirReader, WalkLimits, summary_cells, summary_rows

    target = Path(args.target).expanduser()
    if target.exists():
        reader = LogDirReader(target)
    else:
        roots = log_roots_for(args.target, console_factory)
        reader = LogDirReader(roots, limits=WalkLimits(seconds=CLI_WALK_SECONDS))
    reader.poll()
    rows = summary_rows(reader.scalars)
    problems = [str(p) for p in reader.problems]
    problems += reader.walk_notes
    if args.json:
        roots_json = [{"run": r.label, "path": str(r.path)} for r in reader.roots]
        print(
            fmt.json_text(
                {"path": str(reader.root), "roots": roots_json, "scalars": rows, "problems": problems}
            )
        )
    elif not rows:
        where = " and ".join(str(r.path) for r in reader.roots)
        print(f"no scalars in TensorBoard event files under {where}")
    else:
        print(fmt.table(SUMMARY_HEADERS, [summary_cells(r) for r in rows]))
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    return 0
