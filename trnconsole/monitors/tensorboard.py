"""Scalars from TensorBoard event files, read incrementally: TFRecord framing with both CRC32Cs checked, a
partial last record waited for, corrupt records reported and skipped, resumable from saved byte offsets.

    reader = LogDirReader("runs/abc/tb")     # every *tfevents* file below, found again on each poll
    new = reader.poll()                      # {(run, tag): ScalarBatch}: the points added since the last poll
    reader.purged                            # the series that poll cut (see below): take them from .scalars
    rows = summary_rows(reader.scalars)      # count, first/last step, last value, min, max per series
    saved = reader.offsets()                 # LogDirReader(root, saved) goes on from there

`EventFileReader(path, offset)` does the same for one file: `read()` gives {tag: ScalarBatch}, `offset` is
where the next read starts. The Event protobuf is decoded here, without tensorboard, protobuf or torch:
scalars written as `simple_value` (torch's SummaryWriter, TF1 writers) and as rank-0 numeric tensors
(tensorboard.summary v2, plugin "scalars") are read; images, histograms, text and the rest are stepped
over undecoded. Bad data never raises: each corrupt record or stretch of garbage adds one to `corrupt` and
one `Problem` (file, byte offset, reason) to `problems`, and reading goes on at the next valid record.

Points orphaned by a restart are purged as tensorboard's `EventAccumulator(purge_orphaned_data=True)`
purges them, per run (one directory's event files, read in name order):
- Once the run's latest `file_version` ("brain.Event:N", as every current writer starts a file with) is a
  number >= 2, an event carrying `SessionLog.START` at step s drops every point of every tag of the run
  with step >= s. torch's `SummaryWriter(purge_step=s)` writes such an event (beside a second file
  version) before its first point, so a resumed job's points replace the ones it wrote past its checkpoint.
- Before that (no file version, or an older or unreadable one), an event with a summary whose step is below
  the step of the last event that did not purge drops, for each tag of that summary, the points with step
  >= its own; any other event makes its step the new mark.
Scalars from tensors are purged like the others, as TensorBoard's server does for them. That server
(`plugin_event_accumulator`, 2.x) differs in two points: it ignores a run's first START (so there the
first resume of a job whose first writer wrote none, as torch's does without purge_step, purges
nothing), and without a version >= 2 only events with a summary move its mark.
"""

from __future__ import annotations

import os
import struct
import time
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.paths import tensorboard_dir
from ..core.spec import OUTPUT_DIR_FLAGS, flag_values

if TYPE_CHECKING:
    from ..core.spec import RunSpec

_CHUNK = 8 * 1024 * 1024  # bytes read at a time: bounds memory however large the file
_MAX_RECORD = 1 << 30  # a length above this is taken as corruption, even with a valid length CRC
_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")
_F32 = struct.Struct("<f")


def _make_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _make_table()


def pure_crc32c(data: bytes, value: int = 0) -> int:
    """CRC32C (Castagnoli) in Python, for when the `crc32c` package is missing: correct, about 100x slower."""
    crc = value ^ 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:
    from crc32c import crc32c as _crc32c
except ImportError:
    _crc32c = pure_crc32c


def masked_crc32c(data: bytes) -> int:
    """The CRC as TFRecord stores it: rotated and offset, so that a CRC of CRCs does not look valid."""
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One TFRecord: length, masked CRC of the length, data, masked CRC of the data."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, _U32.pack(masked_crc32c(length)), data, _U32.pack(masked_crc32c(data))))


def _varint_bytes(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64s as protobuf writes them: ten bytes, two's complement
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def scalar_event(tag: str, step: int, value: float, wall_time: float) -> bytes:
    """An Event holding one `simple_value` scalar, byte for byte as protobuf serializes it."""
    step_field = b"\x10" + _varint_bytes(step) if step else b""
    return b"\x09" + _F64.pack(wall_time) + step_field + _scalar_prefix(tag.encode()) + _F32.pack(value)


def _scalar_prefix(tag: bytes) -> bytes:
    """The bytes of a one-scalar event from its summary field up to the float."""
    value = b"\x0a" + _varint_bytes(len(tag)) + tag + b"\x15"
    summary = b"\x0a" + _varint_bytes(len(value) + 4) + value
    return b"\x2a" + _varint_bytes(len(summary) + 4) + summary


def version_event(wall_time: float) -> bytes:
    """The Event that starts every event file: file_version "brain.Event:2"."""
    return b"\x09" + _F64.pack(wall_time) + b"\x1a\x0dbrain.Event:2"


@dataclass(slots=True)
class ScalarBatch:
    """Points of one series as parallel typed arrays, 24 bytes a point. `np.frombuffer(batch.values)` views
    them without a copy; while such a view lives, the array cannot grow (nor lose points to a purge)."""

    steps: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("d"))
    wall_times: array = field(default_factory=lambda: array("d"))

    def __len__(self) -> int:
        return len(self.steps)

    def extend(self, other: ScalarBatch) -> None:
        self.steps.extend(other.steps)
        self.values.extend(other.values)
        self.wall_times.extend(other.wall_times)

    def drop_from(self, step: int) -> int:
        """Drops, in place, the points with a step >= `step`; how many there were."""
        steps = self.steps
        keep = [i for i, s in enumerate(steps) if s < step]
        dropped = len(steps) - len(keep)
        if dropped:
            columns = (steps, self.values, self.wall_times)
            if not keep or keep[-1] == len(keep) - 1:  # a restart's usual case: the points after a prefix
                for column in columns:
                    del column[len(keep) :]
            else:
                for column in columns:
                    column[:] = array(column.typecode, [column[i] for i in keep])
        return dropped


@dataclass(frozen=True, slots=True)
class Purge:
    """Points dropped because a restarted writer went back: those with step >= `step`, of `tags` (None:
    every tag of the run)."""

    step: int
    tags: tuple[str, ...] | None


class RunState:
    """What TensorBoard's accumulator remembers of a run between events to decide purges (its file version,
    and `mark`, the step of the last event that purged nothing); shared by the readers of one directory's
    files. `bounds` holds, while the run has no file version >= 2, an upper bound of each tag's steps, so
    that each late event of a restart scans only the tags that may have points to drop."""

    __slots__ = ("bounds", "bounds_exact", "file_version", "mark")

    def __init__(self) -> None:
        self.file_version: float | None = None
        self.mark = -1  # the accumulator's most_recent_step
        self.bounds: dict[bytes, int] = {}
        self.bounds_exact = True  # False: a tag missing from bounds may have points of any step

    @property
    def by_session(self) -> bool:
        """Restarts are told by SessionLog.START, not by steps going back."""
        version = self.file_version
        return bool(version and version >= 2)

    def set_file_version(self, raw: bytes) -> None:
        was = self.by_session
        text = raw.decode("utf-8", "replace")
        try:
            self.file_version = float(text.split("brain.Event:")[-1])
        except ValueError:
            self.file_version = -1.0  # unreadable: purged by steps, as tensorboard does
        if was and not self.by_session:
            self.bounds.clear()  # not kept while purging by session: unknown from here
            self.bounds_exact = False


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    offset: int  # of the first bad byte
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: byte {self.offset}: {self.reason}"


class _Malformed(Exception):
    pass


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise _Malformed("varint longer than 10 bytes")


def _skip(data: bytes, i: int) -> int:
    """Steps over the field whose key starts at `i`; the position after it."""
    key, i = _varint(data, i)
    wire = key & 7
    if wire == 0:
        return _varint(data, i)[1]
    if wire == 1:
        return i + 8
    if wire == 2:
        size, i = _varint(data, i)
        return i + size
    if wire == 5:
        return i + 4
    raise _Malformed(f"wire type {wire}")


def _plugin_name(data: bytes, i: int, end: int) -> bytes:
    """SummaryMetadata.plugin_data.plugin_name, b"" when absent."""
    name = b""
    while i < end:
        if data[i] == 0x0A:  # plugin_data
            size, i = _varint(data, i + 1)
            j, stop = i, i + size
            while j < stop:
                if data[j] == 0x0A:
                    length, j = _varint(data, j + 1)
                    name = data[j : j + length]
                    j += length
                else:
                    j = _skip(data, j)
            i = stop
        else:
            i = _skip(data, i)
    return name


# dtype -> struct format of one element in tensor_content (DT_BFLOAT16 is read as its raw 16 bits).
_CONTENT_FORMAT = {1: "<f", 2: "<d", 3: "<i", 4: "<B", 5: "<h", 6: "<b", 9: "<q", 10: "<?", 14: "<H"}
_CONTENT_FORMAT.update({17: "<H", 19: "<e", 22: "<I", 23: "<Q"})
# A rank-0 DT_FLOAT tensor's bytes before its one packed float_val, with and without an empty shape.
_FLOAT_TENSORS = frozenset((b"\x08\x01\x12\x00\x2a\x04", b"\x08\x01\x2a\x04"))
_SIGNED_VARINT_FIELDS = (7, 10)  # int_val, int64_val: negative values are 64-bit two's complement


def _tensor_scalar(data: bytes, i: int, end: int) -> float | None:
    """The value of a rank-0 numeric TensorProto, None for anything else (strings, arrays, complex)."""
    dtype = 0
    rank = 0
    content = None
    values: list[float] = []
    while i < end:
        field_start = i
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if number == 1 and wire == 0:
            dtype, i = _varint(data, i)
        elif number == 2 and wire == 2:  # tensor_shape: dim = 2, unknown_rank = 3
            size, i = _varint(data, i)
            j, i = i, i + size
            while j < i:
                if data[j] in (0x12, 0x18):  # a dim, or unknown_rank (never a scalar)
                    rank += 1
                j = _skip(data, j)
        elif number == 4 and wire == 2:
            size, i = _varint(data, i)
            content = data[i : i + size]
            i += size
        elif number in (5, 6):  # float_val, double_val: packed, or one element per field
            fmt = "f" if number == 5 else "d"
            if wire == 2:
                size, i = _varint(data, i)
                count = size // struct.calcsize(fmt)
                values.extend(struct.unpack_from(f"<{count}{fmt}", data, i))
                i += size
            elif (wire, fmt) in ((5, "f"), (1, "d")):
                values.append(struct.unpack_from("<" + fmt, data, i)[0])
                i += struct.calcsize(fmt)
            else:
                raise _Malformed(f"tensor field {number} with wire type {wire}")
        elif number in (7, 10, 11, 13, 16, 17):  # int, int64, bool, half, uint32, uint64: varints
            if wire == 2:
                size, i = _varint(data, i)
                stop = i + size
                while i < stop:
                    value, i = _varint(data, i)
                    values.append(value)
            else:
                value, i = _varint(data, i)
                values.append(value)
            if number in _SIGNED_VARINT_FIELDS:
                values = [v - (1 << 64) if v >= 1 << 63 else v for v in values]
        else:
            i = _skip(data, field_start)
    if i != end:
        raise _Malformed("tensor runs past its value")
    fmt = _CONTENT_FORMAT.get(dtype)
    if rank or fmt is None:
        return None
    if content:
        if len(content) != struct.calcsize(fmt):
            return None
        values = [struct.unpack(fmt, content)[0]]
    if len(values) != 1:
        return None
    value = values[0]
    if dtype == 19 and not content:  # half_val holds the 16 bits
        value = struct.unpack("<e", struct.pack("<H", int(value) & 0xFFFF))[0]
    elif dtype == 14:
        value = struct.unpack("<f", struct.pack("<I", (int(value) & 0xFFFF) << 16))[0]
    return float(value)


# Keys of the Event fields in its `what` oneof, all length-delimited: file_version = 3 (0x1A), graph_def,
# summary = 5 (0x2A), log_message, session_log = 7 (0x3A), tagged_run_metadata, meta_graph_def. Of several,
# protobuf keeps the last.
_WHAT = frozenset((0x1A, 0x22, 0x2A, 0x32, 0x3A, 0x42, 0x4A))
_SESSION_START = 1  # SessionLog.status


def _session_status(data: bytes, i: int, end: int) -> int:
    status = 0
    while i < end:
        if data[i] == 0x08:
            status, i = _varint(data, i + 1)
        else:
            i = _skip(data, i)
    if i != end:
        raise _Malformed("session log runs past its event")
    return status


class EventFileReader:
    """The scalars appended to one event file since the last `read()`.

    The file is opened per call and read in large chunks. `offset` is where the next read starts: just past
    the last complete record, or past bytes already ruled out while looking for a record after a corrupt
    one; save it to resume. A record cut short at the end of the file is left for a later read; if the bytes
    that come after it show it was torn (a writer died mid-record and another appended), it is reported
    once they cover its stated length, and the records after it are found. A file that shrank below
    `offset` was replaced: it is read again from the start, and that is reported.

    `state` is the run's (see the module's note on purges; a reader of its own by default). A purge drops
    points from what `read()` returns, and is also listed in `purges` (those of the last read, in order) for
    the points of earlier reads and of the run's other files, which the caller holds. A reader resuming at
    a saved offset takes the file version from the file's first record.
    """

    def __init__(self, path: str | os.PathLike[str], offset: int = 0, state: RunState | None = None) -> None:
        self.path = Path(path)
        self.offset = offset
        self.state = state if state is not None else RunState()
        self.purges: list[Purge] = []
        self.corrupt = 0
        self.problems: list[Problem] = []
        self._resync = False  # looking for the next valid record after a corrupt one
        self._plugins: dict[bytes, bytes] = {}  # tag -> plugin name, as the first value with metadata gave it
        self._plugin_names: dict[bytes, bytes] = {}  # SummaryMetadata bytes -> plugin name
        self._length_crcs: dict[int, int] = {}
        self._version_known = offset == 0  # else the first record, skipped by the offset, is read for it

    def read(self) -> dict[str, ScalarBatch]:
        """New scalars by tag, in file order."""
        self.purges = []
        try:
            f = open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed below, after fstat and reads
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return {}
        columns: dict[bytes, ScalarBatch] = {}
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < self.offset:
                self._problem(size, f"file shrank from {self.offset} to {size} bytes; read again from start")
                self.offset = 0
                self._resync = False
            if not self._version_known:
                self._read_version(f, size)
            pos, need = self.offset, 12
            while size - pos >= need:
                f.seek(pos)
                buf = f.read(min(max(_CHUNK, need), size - pos))
                if len(buf) < need:
                    break  # cut short underneath us
                used, need = self._parse(buf, pos, columns)
                pos += used
            self.offset = pos
        return {tag.decode("utf-8", "replace"): batch for tag, batch in columns.items() if batch}

    def _read_version(self, f: Any, size: int) -> None:
        """The file version from the first record, when it is a valid one that says it (and is small)."""
        head = f.read(min(size, 12 + 256 + 4))
        if len(head) < 12:
            return
        self._version_known = True
        length, length_crc = _HEADER.unpack_from(head)
        end = 12 + length
        if masked_crc32c(head[:8]) != length_crc or end + 4 > len(head):
            return
        data = head[12:end]
        if masked_crc32c(data) != _U32.unpack_from(head, end)[0]:
            return
        try:
            i = what = start = stop = 0
            while i < length:
                key = data[i]
                if key in _WHAT:
                    stop, start = _varint(data, i + 1)
                    stop += start
                    what, i = key, stop
                else:
                    i = _skip(data, i)
        except (_Malformed, IndexError):
            return
        if i == length and what == 0x1A:
            self.state.set_file_version(data[start:stop])

    def _problem(self, offset: int, reason: str) -> None:
        self.problems.append(Problem(str(self.path), offset, reason))

    def _corrupt(self, offset: int, reason: str) -> None:
        self.corrupt += 1
        self._problem(offset, reason)

    def _purge(self, step: int, tags: list[bytes] | None, columns: dict[bytes, ScalarBatch]) -> None:
        """Drops the points a restart orphaned from this read's columns, and lists the purge for the rest."""
        if tags is None:
            for batch in columns.values():
                batch.drop_from(step)
            self.purges.append(Purge(step, None))
            return
        state = self.state
        bounds = state.bounds
        hit: list[bytes] = []
        for tag in dict.fromkeys(tags):
            bound = bounds.get(tag)
            if (bound is None and state.bounds_exact) or (bound is not None and bound < step):
                continue  # no point of this tag reaches the step
            hit.append(tag)
            bounds[tag] = step - 1
            batch = columns.get(tag)
            if batch is not None:
                batch.drop_from(step)
        if hit:
            self.purges.append(Purge(step, tuple(tag.decode("utf-8", "replace") for tag in hit)))

    @staticmethod
    def _column(
        tag: bytes, columns: dict[bytes, ScalarBatch], appends: dict[bytes, tuple[Any, Any, Any]]
    ) -> tuple[Any, Any, Any]:
        batch = columns[tag] = ScalarBatch()
        put = appends[tag] = (batch.steps.append, batch.values.append, batch.wall_times.append)
        return put

    def _parse(self, buf: bytes, base: int, columns: dict[bytes, ScalarBatch]) -> tuple[int, int]:
        """Decodes the complete records in `buf` (which starts at file offset `base`) into `columns`.

        Returns (bytes settled, bytes needed from there to go on); the second is more than what is left
        of `buf`, so the caller reads on from the first.
        """
        n = len(buf)
        pos = 0
        crc = _crc32c
        header = _HEADER.unpack_from
        u32 = _U32.unpack_from
        f64 = _F64.unpack_from
        f32 = _F32.unpack_from
        plugins = self._plugins
        plugin_names = self._plugin_names
        length_crcs = self._length_crcs
        state = self.state
        by_session = state.by_session
        appends: dict[bytes, tuple[Any, Any, Any]] = {
            tag: (b.steps.append, b.values.append, b.wall_times.append) for tag, b in columns.items()
        }
        # The bytes between step and value of a one-scalar event, as protobuf writes them for each tag
        # seen: an event that has exactly those bytes there needs no further decoding. Only while restarts
        # are told by SessionLog events: before that, every event's step is checked.
        shortcuts: dict[bytes, tuple[Any, Any, Any]] = {}
        shortcut_tags: set[bytes] = set()
        while True:
            if self._resync:
                pos = self._scan(buf, pos)
                if self._resync:
                    return pos, 12
            if n - pos < 12:
                return pos, 12
            length, length_crc = header(buf, pos)
            if length_crcs.get(length) != length_crc:
                # The length CRC depends on the length alone, so each length is checked once.
                c = crc(buf[pos : pos + 8])
                if (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF != length_crc or length > _MAX_RECORD:
                    self._corrupt(base + pos, "bad length CRC; looking for the next record")
                    self._resync = True
                    pos += 1
                    continue
                length_crcs[length] = length_crc
            start = pos + 12
            end = start + length
            if end + 4 > n:
                return pos, end + 4 - pos
            data = buf[start:end]
            c = crc(data)
            if (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF != u32(buf, end)[0]:
                # The length is trusted, but the bytes may be a torn write followed by new records, so
                # the next record is looked for byte by byte rather than `length` bytes on.
                self._corrupt(base + pos, "bad data CRC; record skipped")
                self._resync = True
                pos += 1
                continue
            record = pos
            pos = end + 4
            try:
                # Event: wall_time = 1 (double), step = 2 (varint), summary = 5; the rest is stepped over.
                i = 0
                wall = 0.0
                step = 0
                if length > 14 and data[0] == 0x09 and data[9] == 0x10:
                    wall = f64(data, 1)[0]
                    step = data[10]
                    i = 11
                    if step >= 0x80:
                        step &= 0x7F
                        shift = 7
                        while True:
                            byte = data[i]
                            i += 1
                            step |= (byte & 0x7F) << shift
                            if byte < 0x80:
                                break
                            shift += 7
                        if step >= 1 << 63:
                            step -= 1 << 64
                    put = shortcuts.get(data[i:-4])
                    if put is not None:
                        put[0](step)
                        put[1](f32(data, length - 4)[0])
                        put[2](wall)
                        continue
                s0 = s1 = what = 0
                while i < length:
                    key = data[i]
                    i += 1
                    if key == 0x09:
                        wall = f64(data, i)[0]
                        i += 8
                    elif key == 0x10:
                        step, i = _varint(data, i)
                        if step >= 1 << 63:
                            step -= 1 << 64
                    elif key in _WHAT:
                        s1, s0 = _varint(data, i)
                        s1 += s0
                        i = s1
                        what = key
                    else:
                        i = _skip(data, i - 1)
                if i != length:
                    raise _Malformed("event runs past its record")
                # Until restarts are told by SessionLog events, an event's points wait for the purge its
                # step may cause, which needs the tags of all its values.
                defer = not by_session
                found: list[tuple[bytes, float]] = []
                tags: list[bytes] = []  # of every value, scalar or not
                j = s0 if what == 0x2A else s1  # summary
                while j < s1:
                    if data[j] != 0x0A:  # Summary.value = 1
                        j = _skip(data, j)
                        continue
                    k = j + 1
                    v1 = data[k]
                    k += 1
                    if v1 >= 0x80:
                        v1, k = _varint(data, k - 1)
                    v1 += k
                    j = v1
                    # Value: tag = 1, simple_value = 2, tensor = 8, metadata = 9.
                    t0 = t1 = m0 = m1 = x0 = x1 = 0
                    value = None
                    while k < v1:
                        key = data[k]
                        if key == 0x15:
                            value = f32(data, k + 1)[0]
                            k += 5
                            continue
                        if key in (0x0A, 0x42, 0x4A):
                            size = data[k + 1]
                            k += 2
                            if size >= 0x80:
                                size, k = _varint(data, k - 1)
                            if key == 0x0A:
                                t0, t1 = k, k + size
                            elif key == 0x42:
                                x0, x1 = k, k + size
                            else:
                                m0, m1 = k, k + size
                            k += size
                        else:
                            k = _skip(data, k)
                    if k != v1:
                        raise _Malformed("summary value runs past its event")
                    tag = data[t0:t1]
                    if defer:
                        tags.append(tag)
                    if m1:
                        metadata = data[m0:m1]
                        plugin = plugin_names.get(metadata)
                        if plugin is None:
                            plugin = plugin_names[metadata] = _plugin_name(metadata, 0, m1 - m0)
                        plugins[tag] = plugin
                    if value is None:
                        if not x1 or plugins.get(tag, b"") not in (b"", b"scalars"):
                            continue  # an image, histogram, text, ... or a tensor of another plugin
                        if data[x0 : x1 - 4] in _FLOAT_TENSORS:
                            value = f32(data, x1 - 4)[0]
                        else:
                            value = _tensor_scalar(data, x0, x1)
                            if value is None:
                                continue
                    if defer:
                        found.append((tag, value))
                        continue
                    put = appends.get(tag)
                    if put is None:
                        put = self._column(tag, columns, appends)
                    if not x1 and tag not in shortcut_tags:
                        shortcut_tags.add(tag)
                        shortcuts[_scalar_prefix(tag)] = put
                    put[0](step)
                    put[1](value)
                    put[2](wall)
                # What the accumulator does with the event besides its points: its file version, and the
                # purge it may cause (before its own points are added).
                if what == 0x2A:
                    if defer:
                        if step < state.mark:
                            self._purge(step, tags, columns)
                        else:
                            state.mark = step
                        bounds = state.bounds
                        for tag, value in found:
                            put = appends.get(tag)
                            if put is None:
                                put = self._column(tag, columns, appends)
                            bound = bounds.get(tag)
                            if (bound is None and state.bounds_exact) or (bound is not None and step > bound):
                                bounds[tag] = step
                            put[0](step)
                            put[1](value)
                            put[2](wall)
                elif what == 0x1A:  # file_version
                    state.set_file_version(data[s0:s1])
                    if by_session and not state.by_session:
                        shortcuts.clear()
                        shortcut_tags.clear()
                    by_session = state.by_session
                    if not by_session:
                        state.mark = step
                elif by_session:
                    if what == 0x3A and _session_status(data, s0, s1) == _SESSION_START:  # session_log
                        self._purge(step, None, columns)
                else:
                    state.mark = step
            except (_Malformed, IndexError, struct.error, OverflowError) as exc:
                self._corrupt(base + record, f"malformed event ({exc or type(exc).__name__}); skipped")

    def _scan(self, buf: bytes, pos: int) -> int:
        """The first position from `pos` that holds a record with both CRCs valid (or a valid header whose
        data is not all there yet), clearing `_resync`; else where to go on scanning once more bytes came."""
        n = len(buf)
        find = buf.find
        crc = _crc32c
        header = _HEADER.unpack_from
        u32 = _U32.unpack_from
        while True:
            # Any length below 4 GiB has four zero bytes on top: find() skips to those in C.
            q = find(b"\0\0\0\0", pos + 4)
            if q < 0 or q + 8 > n:
                return max(pos, n - 11)
            pos = q - 4
            length, length_crc = header(buf, pos)
            c = crc(buf[pos : pos + 8])
            if length <= _MAX_RECORD and (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF == length_crc:
                end = pos + 12 + length
                if end + 4 > n:
                    self._resync = False  # taken on trust until its data is complete
                    return pos
                c = crc(buf[pos + 12 : end])
                if (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF == u32(buf, end)[0]:
                    self._resync = False
                    return pos
            pos += 1


@dataclass(frozen=True, slots=True)
class LogRoot:
    """A directory to look for event files in. Each directory below it (or it) that holds one is a run,
    named `label` joined with its path relative to `path`."""

    path: Path
    label: str = "."
    since: float | None = None  # only directories holding an event file written at or after this time


@dataclass(frozen=True, slots=True)
class WalkLimits:
    """How far one poll looks for event files below each root: directory levels, directories listed, and
    seconds. Hidden directories are passed over."""

    depth: int = 4
    dirs: int = 2000
    seconds: float = 0.25


class LogDirReader:
    """The scalars of every event file under `root` (recursively; files that appear later included), by
    (run, tag), where run is the file's directory relative to root ("." for root itself).

    `root` may also be one event file, or several `LogRoot`s (a job's run directory, its script's output
    and logging directories); `limits` then bounds the search made on each poll, so that a huge directory
    costs a fraction of a second, and the roots where it stopped short are in `cut_short`. A directory
    reached from two roots is read once, under the first. `offsets` (from `offsets()`, keyed by run and
    file name, which for one root is the file's path relative to it) resumes each file where an earlier
    reader stopped. Every point read is also kept in `scalars` (its own copy: the batches `poll()` returns
    are the caller's). A purge (see the module's note) that drops points of earlier polls puts their
    (run, tag) in `purged` until the next poll: `scalars` holds what is left of those series.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | Sequence[LogRoot],
        offsets: Mapping[str, int] | None = None,
        limits: WalkLimits | None = None,
    ) -> None:
        if isinstance(root, (str, os.PathLike)):
            self.root = Path(root)
            self.roots = [LogRoot(self.root)]
        else:
            self.roots = list(root)
            self.root = self.roots[0].path if self.roots else Path(".")
        self.limits = limits
        self.scalars: dict[tuple[str, str], ScalarBatch] = {}
        self.purged: set[tuple[str, str]] = set()
        self.cut_short: list[LogRoot] = []
        self._saved = dict(offsets or {})
        self._readers: dict[str, tuple[str, EventFileReader]] = {}  # run/file name -> (run, reader)
        self._states: dict[str, RunState] = {}
        self._runs: dict[str, tuple[str, Path]] = {}  # real path of a run's directory -> its name, path

    def poll(self) -> dict[tuple[str, str], ScalarBatch]:
        """The points added since the last poll, by (run, tag); a run's files in name order."""
        self._discover()
        self.purged = set()
        new: dict[tuple[str, str], ScalarBatch] = {}
        for _, (run, reader) in sorted(self._readers.items()):
            batches = reader.read()
            for purge in reader.purges:
                self._purge(run, purge, new)
            for tag, batch in batches.items():
                key = (run, tag)
                if key in new:
                    new[key].extend(batch)
                else:
                    new[key] = batch
                kept = self.scalars.get(key)
                if kept is None:
                    kept = self.scalars[key] = ScalarBatch()
                kept.extend(batch)
        return {key: batch for key, batch in new.items() if batch}

    def offsets(self) -> dict[str, int]:
        """Byte offset per event file (path relative to root, with "/"), for `LogDirReader(root, offsets)`."""
        saved = dict(self._saved)
        saved.update((rel, reader.offset) for rel, (_, reader) in self._readers.items())
        return saved

    @property
    def problems(self) -> list[Problem]:
        return [problem for _, reader in self._readers.values() for problem in reader.problems]

    @property
    def corrupt(self) -> int:
        return sum(reader.corrupt for _, reader in self._readers.values())

    @property
    def walk_notes(self) -> list[str]:
        """One line per root the last poll stopped looking through early."""
        return [
            f"{root.path}: too many directories to look through each poll; some event files may be missed"
            for root in self.cut_short
        ]

    def run_dirs(self) -> list[tuple[str, Path]]:
        """(run, directory) of each run found so far, looking again first; by run name."""
        self._discover()
        return sorted(self._runs.values())

    def _purge(self, run: str, purge: Purge, new: dict[tuple[str, str], ScalarBatch]) -> None:
        """Applies a purge found in one of the run's files to the run's points read before it."""
        if purge.tags is None:
            keys = [key for key in self.scalars if key[0] == run]
        else:
            keys = [(run, tag) for tag in purge.tags]
        for key in keys:
            kept = self.scalars.get(key)
            if kept is not None and kept.drop_from(purge.step):
                self.purged.add(key)
            fresh = new.get(key)
            if fresh is not None:
                fresh.drop_from(purge.step)

    def _discover(self) -> None:
        if self.limits is None and len(self.roots) == 1 and self.root.is_file():
            self._add(self.root.name, ".", self.root)
            return
        limits = self.limits
        self.cut_short = []
        for root in self.roots:
            deadline = time.monotonic() + limits.seconds if limits else None
            top = os.fspath(root.path)
            for listed, (dirpath, dirnames, filenames) in enumerate(os.walk(top), 1):
                if limits:
                    if listed > limits.dirs or time.monotonic() > deadline:  # type: ignore[operator]
                        self.cut_short.append(root)
                        break
                    depth = 0 if dirpath == top else dirpath[len(top) :].strip(os.sep).count(os.sep) + 1
                    dirnames[:] = [] if depth >= limits.depth else [d for d in dirnames if d[0] != "."]
                dirnames.sort()
                names = [name for name in filenames if "tfevents" in name]
                if names:
                    run = self._run(root, dirpath, names)
                    if run is not None:
                        for name in names:
                            self._add(name if run == "." else f"{run}/{name}", run, Path(dirpath, name))

    def _run(self, root: LogRoot, dirpath: str, names: list[str]) -> str | None:
        """The run name of a directory with event files; None while it is not one of the root's runs."""
        real = os.path.realpath(dirpath)
        known = self._runs.get(real)
        if known is not None:
            return known[0]
        if root.since is not None and not any(_modified(Path(dirpath, n)) >= root.since for n in names):
            return None  # written before the job started: another job's
        rel = Path(os.path.relpath(dirpath, root.path)).as_posix()
        run = Path(root.label, rel).as_posix()
        self._runs[real] = (run, Path(dirpath))
        return run

    def _add(self, rel: str, run: str, path: Path) -> None:
        if rel not in self._readers:
            state = self._states.get(run)
            if state is None:
                state = self._states[run] = RunState()
            self._readers[rel] = (run, EventFileReader(path, self._saved.get(rel, 0), state))


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


# Where a launched script is told to write: a Hugging Face Trainer script's TrainingArguments flags, in
# both spellings HfArgumentParser accepts. Its TensorBoardCallback writes to logging_dir (transformers
# 4.x's argument), else to <output_dir>/runs/<%b%d_%H-%M-%S>_<hostname> (and a trial's name below that
# in a hyperparameter search); transformers 5.x dropped logging_dir for this environment variable.
SCRIPT_DIR_FLAGS = (*OUTPUT_DIR_FLAGS, "logging_dir", "logging-dir")
LOGGING_DIR_ENV = "TENSORBOARD_LOGGING_DIR"


def run_log_roots(spec: RunSpec, run_dir: Path, since: float | None = None) -> list[LogRoot]:
    """Where a run's TensorBoard event files may be: its run directory (`tb/` of a bundled runner), and for
    a local run the directory `--tb` named and a script's output and logging directories (relative to the
    job's working directory). The last ones are often shared between runs: only their directories with an
    event file written since `since` (the run's creation) count. A remote job's other directories are in
    its container: only what reaches the run directory is read."""
    primary = run_dir / "tb" if spec.bundled else tensorboard_dir(run_dir)
    roots = [LogRoot(primary)]
    if spec.backend != "local":
        return roots
    named = [spec.tb_dir] if spec.tb_dir else []
    if not spec.bundled:
        named += flag_values(spec.runner_args(), SCRIPT_DIR_FLAGS)
        if spec.env.get(LOGGING_DIR_ENV):
            named.append(spec.env[LOGGING_DIR_ENV])
    cwd = Path(spec.cwd or ".")
    seen = {os.path.realpath(primary)}
    for text in named:
        path = cwd / Path(text).expanduser()
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            roots.append(LogRoot(path, text, since))
    return roots


SUMMARY_HEADERS = ("RUN", "TAG", "POINTS", "STEPS", "LAST", "MIN", "MAX")


def summary_cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    """One summary row as the text of SUMMARY_HEADERS' columns, for `trnconsole tb` and the console."""
    from ..textfmt import number

    return (
        row["run"],
        row["tag"],
        str(row["count"]),
        f"{row['first_step']}-{row['last_step']}",
        number(row["last_value"]),
        number(row["min"]),
        number(row["max"]),
    )


def summary_rows(scalars: Mapping[tuple[str, str], ScalarBatch]) -> list[dict[str, Any]]:
    """One row per (run, tag), sorted: run, tag, count, first_step, last_step, last_value, min, max.

    min and max are over the finite values (None when there is none); last_value may be NaN or inf.
    """
    import numpy as np

    rows = []
    for (run, tag), batch in sorted(scalars.items()):
        if not batch:
            continue
        values = np.array(batch.values, dtype=np.float64)  # a copy: a view would stop the array growing
        finite = values[np.isfinite(values)]
        rows.append(
            {
                "run": run,
                "tag": tag,
                "count": len(batch),
                "first_step": batch.steps[0],
                "last_step": batch.steps[-1],
                "last_value": batch.values[-1],
                "min": float(finite.min()) if finite.size else None,
                "max": float(finite.max()) if finite.size else None,
            }
        )
    return rows
