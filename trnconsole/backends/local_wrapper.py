"""The small process that runs a local job and records how it ended, console or no console.

    python -m trnconsole.backends.local_wrapper RUN_DIR -- COMMAND...

It leads the job's session and process group, starts COMMAND, waits for it and writes
RUN_DIR/exit_status.json atomically. SIGTERM (a stop sends it to the whole group) is noted, not obeyed:
the wrapper stays to record the ending; SIGINT and SIGHUP are ignored, so a dropped SSH session or a
Ctrl-C in another terminal never ends a job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

EXIT_FILE = "exit_status.json"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m trnconsole.backends.local_wrapper RUN_DIR -- COMMAND...", file=sys.stderr)
        return 2
    run_dir, command = Path(argv[0]), argv[2:]
    stop_requested = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    started = time.time()
    try:
        child = subprocess.Popen(command, preexec_fn=_default_signals)
    except OSError as exc:
        print(f"trnconsole: cannot start {command[0]}: {exc}", flush=True)
        _record(run_dir, 127, None, started, stop_requested, error=str(exc))
        return 127
    _write_json(run_dir / "wrapper.json", {"wrapper_pid": os.getpid(), "child_pid": child.pid})
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries wait() itself
            continue
    sig = -code if code < 0 else None
    exit_code = 128 + sig if sig else code
    _record(run_dir, exit_code, sig, started, stop_requested)
    return exit_code


def _default_signals() -> None:
    # The job must see SIGINT/SIGHUP/SIGTERM as usual even though the wrapper ignores or catches them.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _record(
    run_dir: Path, exit_code: int, sig: int | None, started: float, stop_requested: bool, error: str = ""
) -> None:
    status = {
        "exit_code": exit_code,
        "signal": signal.Signals(sig).name if sig else None,
        "stop_requested": stop_requested,
        "started_at": started,
        "ended_at": time.time(),
    }
    if error:
        status["error"] = error
    _write_json(run_dir / EXIT_FILE, status)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
