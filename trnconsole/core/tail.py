"""Follow a growing text file by byte offset: complete lines only, resumable from a saved offset."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MAX_BYTES = 16 * 1024 * 1024


class FileTail:
    """Reads the complete lines appended to `path` since `offset`.

    The file is opened per call, so nothing is held open between reads (a rotated or deleted file is not
    pinned). A file that does not exist yet reads as empty; one that shrank below `offset` (truncated or
    replaced) is read again from the start. Save `offset` to resume later where this one stopped.
    """

    def __init__(self, path: str | os.PathLike[str], offset: int = 0) -> None:
        self.path = Path(path)
        self.offset = offset
        self.open = False  # whether the last line the last call returned is unfinished (see `frames`)

    def read_lines(self, max_bytes: int = DEFAULT_MAX_BYTES, frames: bool = False) -> list[str]:
        """The next complete lines (without their newline), reading at most `max_bytes`.

        A last line without its newline yet is left for a later call. A single line longer than
        `max_bytes` is returned in pieces, so a huge line cannot stall the tail. With `frames`, a line that
        a progress bar is still redrawing (`\r` frames, no newline yet) is returned up to its last `\r`,
        as the last line, and `open` is set: the next call goes on with that same line.
        """
        self.open = False
        try:
            f = open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed below, after one fstat and read
        except (FileNotFoundError, NotADirectoryError):
            return []
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < self.offset:
                self.offset = 0
            if size == self.offset:
                return []
            f.seek(self.offset)
            data = f.read(min(max(max_bytes, 1), size - self.offset))
        if not data:
            return []
        end = data.rfind(b"\n") + 1
        if frames:
            # A \r as the last byte may be the start of a \r\n: cut there only once what follows is read.
            frame_end = data.rfind(b"\r", end, len(data) - 1) + 1
            if frame_end > end:
                end = frame_end
                self.open = True
        if end == 0:
            if len(data) < max_bytes:
                return []
            end = _utf8_boundary(data)
        self.offset += end
        lines = data[:end].decode("utf-8", errors="replace").split("\n")
        if lines[-1] == "":
            lines.pop()
        return lines


def _utf8_boundary(data: bytes) -> int:
    """The largest cut at or before len(data) that does not split a UTF-8 character."""
    end = len(data)
    for back in range(1, min(4, end) + 1):
        lead = data[end - back]
        if lead & 0xC0 == 0x80:
            continue  # a continuation byte: the character started earlier
        if lead < 0x80:
            return end
        need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        return end if back >= need or back == end else end - back
    return end
