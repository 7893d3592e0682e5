"""Mirror a remote job's log into its run directory, exactly once, whatever crashes in between.

The backend's cursor is saved together with the length stdout.log had once those lines were appended. Lines
appended after the last saved cursor (a crash between the append and the save) are cut off on the next pass
and fetched again from the saved cursor, so the file never holds a line twice nor misses one. Only one
process mirrors a run at a time (a lock file beside the log); another console simply skips that pass.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .backends.base import Backend
from .core.store import RunRecord, Store
from .core.watch import LOG_FILE

LOCK_FILE = ".mirror.lock"


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[bool]:
    """True while this process holds the run's mirror lock; False at once if another holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def mirror_logs(store: Store, backend: Backend, record: RunRecord, locked: bool = False) -> int:
    """Append the job's new remote log lines to RUN_DIR/stdout.log; the number of lines appended.
    `locked`: the caller holds the run's lock already (run_lock)."""
    if not locked:
        with run_lock(record.run_dir) as mine:
            return mirror_logs(store, backend, record, locked=True) if mine else 0
    record = store.get(record.id)  # the cursor another console may have advanced
    saved: dict[str, Any] = record.log_cursor or {}
    log = record.run_dir / LOG_FILE
    kept = int(saved.get("log_bytes", 0))
    size = log.stat().st_size if log.exists() else 0
    if size > kept:
        with log.open("r+b") as f:
            f.truncate(kept)  # appended after the last saved cursor: fetched again below
    elif size < kept:
        kept = size  # the file was cut or removed by hand: carry on from what is there
    lines, cursor = backend.logs(record, saved.get("remote"))
    if lines:
        data = ("\n".join(lines) + "\n").encode("utf-8", errors="replace")
        with log.open("ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        kept += len(data)
    if lines or cursor != saved.get("remote") or kept != saved.get("log_bytes"):
        store.update(record.id, log_cursor={"remote": cursor, "log_bytes": kept})
    return len(lines)
