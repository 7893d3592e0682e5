"""The output directory that every rank of a run shares: its write check, its one-run lock, atomic writes.

Each rank of a run starts the same script on the same --output-dir at the same moment, so nothing here may
make one rank's file operation depend on another's: the write check uses a nameless file of its own per
process, files are written under a name of their own and renamed into place, and only global rank 0 takes
the lock that keeps a second run out of the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .errors import UsageError

LOCK_NAME = ".trn-run.lock"

_held: list[int] = []  # the lock's file descriptor, open for the life of the process


def check_writable(output: Path) -> None:
    """Create the directory (any rank may win that race) and prove this process can write in it."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=output).close()
    except OSError as exc:
        raise UsageError(
            f"--output-dir {output}: not writable ({exc.strerror}); choose another directory"
        ) from None


def claim(output: Path) -> None:
    """Hold the directory for this run until the process exits; refuse if another run holds it.

    The lock is flock(2) on a file in the directory: the kernel drops it when the holder exits, however it
    ends, so a killed run never leaves the directory locked.
    """
    path = output / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 512).decode("utf-8", errors="replace").strip() or "another process"
        os.close(fd)
        raise UsageError(
            f"--output-dir {output}: in use by another run ({holder}); "
            "wait for it to end, stop it, or choose another directory"
        ) from None
    os.ftruncate(fd, 0)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode())
    _held.append(fd)


def temp_path(path: Path) -> Path:
    """A hidden name beside path that no other process uses."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Call write(tmp_path) on a name of this process's own, then rename it over path in one step, so a
    reader sees the old file or the new one, never half of one, and two writers never share a temp file."""
    tmp = temp_path(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
