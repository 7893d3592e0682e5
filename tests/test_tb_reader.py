"""Reading TensorBoard event files: every scalar written by the real writers, exactly once, whatever the
file looks like when it is read (growing, cut short, corrupted, resumed), less the points a restarted
job orphaned, dropped as TensorBoard's EventAccumulator drops them."""

from __future__ import annotations

import math
import random
import struct
import subprocess
import sys
import tempfile
from itertools import pairwise
from pathlib import Path

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.plugins.histogram.summary_v2 import histogram_pb
from tensorboard.plugins.scalar.summary_v2 import scalar_pb
from tensorboard.plugins.text.summary_v2 import text_pb

from trnconsole.monitors.tensorboard import (
    EventFileReader,
    LogDirReader,
    ScalarBatch,
    frame_record,
    pure_crc32c,
    scalar_event,
    summary_rows,
    version_event,
)

Point = tuple[int, float, float]  # step, value, wall time


def f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def points(batches: dict) -> dict:
    return {
        key: list(zip(batch.steps, batch.values, batch.wall_times, strict=True))
        for key, batch in batches.items()
    }


def scalar_records(n: int, tags: tuple[str, ...] = ("loss", "lr"), start: int = 0) -> list[bytes]:
    return [
        frame_record(scalar_event(tags[step % len(tags)], step, 1.0 / (step + 1), 1e9 + step))
        for step in range(start, start + n)
    ]


def expected(records: list[bytes], tags: tuple[str, ...] = ("loss", "lr"), start: int = 0) -> dict:
    out: dict = {}
    for step in range(start, start + len(records)):
        out.setdefault(tags[step % len(tags)], []).append((step, f32(1.0 / (step + 1)), 1e9 + step))
    return out


def joined(*parts: dict) -> dict:
    out: dict = {}
    for part in parts:
        for key, pts in part.items():
            out.setdefault(key, []).extend(pts)
    return out


def proto_record(wall_time: float, step: int, *values: summary_pb2.Summary.Value) -> bytes:
    event = event_pb2.Event(wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=values))
    return frame_record(event.SerializeToString())


def mixed_file() -> bytes:
    """Scalars of every style beside image, histogram and text values, as tensorboard's protos
    serialize them."""
    double_content = tensor_pb2.TensorProto(
        dtype=2, tensor_shape=tensor_shape_pb2.TensorShapeProto(), tensor_content=struct.pack("<d", 2.5)
    )
    records = [frame_record(version_event(1.0))]
    for step in range(12):
        records.append(
            proto_record(
                10.0 + step,
                step,
                summary_pb2.Summary.Value(tag="simple", simple_value=step / 4),
                *scalar_pb(f"v2/{step % 2}", step * 1.5).value,
                *histogram_pb("hist", np.arange(step + 1.0)).value,
                *text_pb("note", f"step {step}").value,
                summary_pb2.Summary.Value(tag="double", tensor=double_content),
                summary_pb2.Summary.Value(tag="image", image=summary_pb2.Summary.Image(height=1, width=1)),
            )
        )
    return b"".join(records)


MIXED = mixed_file()
MIXED_POINTS = {
    "simple": [(s, s / 4, 10.0 + s) for s in range(12)],
    "v2/0": [(s, s * 1.5, 10.0 + s) for s in range(0, 12, 2)],
    "v2/1": [(s, s * 1.5, 10.0 + s) for s in range(1, 12, 2)],
    "double": [(s, 2.5, 10.0 + s) for s in range(12)],
}

RECORD_BOUNDS = [0]  # where each record of MIXED starts, and its end
while RECORD_BOUNDS[-1] < len(MIXED):
    RECORD_BOUNDS.append(RECORD_BOUNDS[-1] + 16 + struct.unpack_from("<Q", MIXED, RECORD_BOUNDS[-1])[0])


def without_step(step: int) -> dict:
    """MIXED_POINTS less the values of one record (all of a step's values are in one event)."""
    return {tag: kept for tag, pts in MIXED_POINTS.items() if (kept := [p for p in pts if p[0] != step])}


def write(path: Path, data: bytes, mode: str = "wb") -> Path:
    with path.open(mode) as f:
        f.write(data)
    return path


@pytest.fixture(scope="module")
def torch_logdir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A log dir written by torch.utils.tensorboard.SummaryWriter, and the scalars written to it."""
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path_factory.mktemp("torch_tb")
    written: dict = {}
    writer = SummaryWriter(log_dir=str(root))
    for step, value in [(0, 1.5), (1, -2.25), (7, 1e30), (2**40, 3.0), (-5, 0.1)]:
        writer.add_scalar("train/loss", value, step, walltime=100.0 + step % 1000)
        written.setdefault("train/loss", []).append((step, f32(value), 100.0 + step % 1000))
        writer.add_histogram("weights", np.random.default_rng(step % 7).normal(size=50), step)
        writer.add_text("notes", f"at {step}", step)
    for step in range(3):
        writer.add_scalar("new_style", step * 0.5, step, walltime=200.0 + step, new_style=True)
        writer.add_scalar("double", step / 3, step, walltime=300.0, new_style=True, double_precision=True)
        written.setdefault("new_style", []).append((step, step * 0.5, 200.0 + step))
        written.setdefault("double", []).append((step, step / 3, 300.0))
    writer.close()
    return root, written


def only_file(root: Path) -> Path:
    (path,) = root.rglob("*tfevents*")
    return path


# ---- CRC ----


def test_the_pure_python_crc32c_matches_the_package_on_random_data() -> None:
    rng = random.Random(7)
    assert pure_crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    for size in [*range(0, 40), 255, 1000, 4097]:
        data = rng.randbytes(size)
        assert pure_crc32c(data) == crc32c.crc32c(data)
        assert pure_crc32c(data[size // 2 :], pure_crc32c(data[: size // 2])) == crc32c.crc32c(data)


def test_the_module_imports_and_reads_without_the_crc32c_package(tmp_path: Path) -> None:
    path = write(tmp_path / "events.out.tfevents.1", b"".join(scalar_records(20)))
    code = (
        "import sys; sys.modules['crc32c'] = None\n"
        "from trnconsole.monitors import tensorboard as tb\n"
        "assert tb._crc32c is tb.pure_crc32c\n"
        f"r = tb.EventFileReader({str(path)!r}); out = r.read()\n"
        "print(sorted((tag, len(b)) for tag, b in out.items()), r.offset, r.problems)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == f"[('loss', 10), ('lr', 10)] {path.stat().st_size} []"


# ---- what the real writers write ----


def test_torch_summary_writer_scalars_are_read_as_written_and_other_values_skipped(torch_logdir) -> None:
    root, written = torch_logdir
    reader = EventFileReader(only_file(root))
    assert points(reader.read()) == written
    assert reader.corrupt == 0 and reader.problems == []
    assert reader.offset == only_file(root).stat().st_size


def test_the_reader_agrees_with_tensorboards_event_accumulator(torch_logdir) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, _ = torch_logdir
    accumulator = EventAccumulator(str(root), size_guidance={"scalars": 0})
    accumulator.Reload()
    ours = points(EventFileReader(only_file(root)).read())
    for tag in accumulator.Tags()["scalars"]:
        assert ours[tag] == [(e.step, e.value, e.wall_time) for e in accumulator.Scalars(tag)]


def test_tensorboard_writer_v2_tensor_scalars_are_read(tmp_path: Path) -> None:
    from tensorboard.summary import Writer

    writer = Writer(str(tmp_path))
    for step in range(5):
        writer.add_scalar("v2/loss", 2.0 - step * 0.25, step, wall_time=50.0 + step)
        writer.add_scalar("v2/big_step", 7.0, 2**35 + step, wall_time=60.0)
    writer.close()
    got = points(EventFileReader(only_file(tmp_path)).read())
    assert got == {
        "v2/loss": [(s, 2.0 - s * 0.25, 50.0 + s) for s in range(5)],
        "v2/big_step": [(2**35 + s, 7.0, 60.0) for s in range(5)],
    }


def test_tensorboard_event_file_writer_with_every_scalar_style(tmp_path: Path) -> None:
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path))
    for start, end in pairwise(RECORD_BOUNDS):
        writer.add_event(event_pb2.Event.FromString(MIXED[start + 12 : end - 4]))
    writer.close()
    reader = EventFileReader(only_file(tmp_path))
    assert points(reader.read()) == MIXED_POINTS
    assert reader.problems == []


def test_tensors_of_other_plugins_are_skipped_even_after_their_metadata_is_dropped(tmp_path: Path) -> None:
    # TF2's writer keeps a tag's metadata in its first event only; later events carry a bare tensor.
    pr_like = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="pr")
    )
    scalar_tensor = tensor_pb2.TensorProto(
        dtype=1, tensor_shape=tensor_shape_pb2.TensorShapeProto(), float_val=[4]
    )
    path = write(
        tmp_path / "events.out.tfevents.1",
        proto_record(1.0, 1, summary_pb2.Summary.Value(tag="pr", tensor=scalar_tensor, metadata=pr_like))
        + proto_record(2.0, 2, summary_pb2.Summary.Value(tag="pr", tensor=scalar_tensor))
        + proto_record(3.0, 3, *scalar_pb("acc", 0.5).value)
        + proto_record(4.0, 4, summary_pb2.Summary.Value(tag="acc", tensor=scalar_tensor)),
    )
    assert points(EventFileReader(path).read()) == {"acc": [(3, 0.5, 3.0), (4, 4.0, 4.0)]}


def shape(*dims: int) -> tensor_shape_pb2.TensorShapeProto:
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims]
    )


@pytest.mark.parametrize(
    ("tensor", "value"),
    [
        (tensor_pb2.TensorProto(dtype=1, tensor_shape=shape(), float_val=[0.25]), 0.25),
        (tensor_pb2.TensorProto(dtype=2, double_val=[1 / 3]), 1 / 3),
        (tensor_pb2.TensorProto(dtype=3, int_val=[-7]), -7.0),
        (tensor_pb2.TensorProto(dtype=9, int64_val=[-(2**40)]), float(-(2**40))),
        (tensor_pb2.TensorProto(dtype=10, bool_val=[True]), 1.0),
        (tensor_pb2.TensorProto(dtype=19, half_val=[np.float16(-1.5).view(np.uint16)]), -1.5),
        (tensor_pb2.TensorProto(dtype=14, half_val=[0x3FC0]), 1.5),  # bfloat16
        (tensor_pb2.TensorProto(dtype=23, uint64_val=[2**63 + 2**11]), float(2**63 + 2**11)),
        (tensor_pb2.TensorProto(dtype=9, tensor_content=np.int64(-3).tobytes()), -3.0),
        (tensor_pb2.TensorProto(dtype=19, tensor_content=np.float16(0.5).tobytes()), 0.5),
        (tensor_pb2.TensorProto(dtype=7, string_val=[b"text"]), None),
        (tensor_pb2.TensorProto(dtype=1, tensor_shape=shape(1), float_val=[1.0]), None),
        (tensor_pb2.TensorProto(dtype=1, tensor_shape=shape(2), float_val=[1.0, 2.0]), None),
        (tensor_pb2.TensorProto(dtype=8, scomplex_val=[1.0, 2.0]), None),
    ],
    ids=lambda x: "" if isinstance(x, (float, type(None))) else str(x.dtype),
)
def test_rank_0_numeric_tensors_of_every_dtype_are_scalars_and_others_are_not(
    tmp_path: Path, tensor: tensor_pb2.TensorProto, value: float | None
) -> None:
    path = write(
        tmp_path / "events.out.tfevents.1",
        proto_record(1.0, 3, summary_pb2.Summary.Value(tag="x", tensor=tensor)),
    )
    reader = EventFileReader(path)
    assert points(reader.read()) == ({} if value is None else {"x": [(3, value, 1.0)]})
    assert reader.problems == []


def test_our_encoder_is_read_identically_by_event_accumulator(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = ("a", "b/c", "é" * 70)  # a tag long enough for two-byte lengths
    records = [frame_record(version_event(5.0))]
    records += [
        frame_record(scalar_event(tags[i % 3], step, value, 1.7e9 + i / 8))
        for i, (step, value) in enumerate(
            [(0, 0.0), (1, -1.5), (127, 1e-40), (128, 3.4e38), (2**31, float("inf")), (2**62, 2.0), (-3, 1)]
        )
    ]
    write(tmp_path / "events.out.tfevents.1", b"".join(records))
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    accumulator.Reload()
    ours = points(EventFileReader(tmp_path / "events.out.tfevents.1").read())
    assert sorted(accumulator.Tags()["scalars"]) == sorted(ours)
    for tag in ours:
        assert ours[tag] == [(e.step, e.value, e.wall_time) for e in accumulator.Scalars(tag)]
    for tag, (step, value) in zip(tags, [(0, 0.0), (1, -1.5), (127, f32(1e-40))], strict=True):
        assert ours[tag][0][:2] == (step, value)


# ---- growing, cut short, resumed ----


@pytest.mark.parametrize("cut", [1, 11, 12, 20, -5, -4, -1], ids=lambda c: f"cut{c}")
def test_a_record_cut_short_waits_and_is_read_once_complete(tmp_path: Path, cut: int) -> None:
    records = scalar_records(6)
    whole = b"".join(records)
    last_start = len(whole) - len(records[-1])
    path = write(tmp_path / "events.out.tfevents.1", whole[: last_start + cut % len(records[-1])])
    reader = EventFileReader(path)
    first = reader.read()
    assert points(first) == expected(records[:-1])
    assert reader.offset == last_start
    assert reader.read() == {}
    assert reader.offset == last_start and reader.problems == []
    write(path, whole[path.stat().st_size :], "ab")
    assert joined(points(first), points(reader.read())) == expected(records)
    assert reader.offset == len(whole) and reader.problems == []


def test_points_appended_while_reading_are_each_seen_exactly_once(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path))
    reader = LogDirReader(tmp_path)
    seen: list[Point] = []
    for round_ in range(6):
        batch = [(round_ * 10 + i, float(round_ * 10 + i), 1000.0 + round_ * 10 + i) for i in range(7)]
        for step, value, wall in batch:
            writer.add_scalar("loss", value, step, walltime=wall)
        writer.flush()
        new = points(reader.poll())
        assert new == {(".", "loss"): batch}
        seen += new[(".", "loss")]
        assert reader.poll() == {}
    writer.close()
    assert points(reader.scalars) == {(".", "loss"): seen}
    assert len(seen) == 42 == len({step for step, _, _ in seen})


def test_a_saved_offset_resumes_with_only_the_later_points(tmp_path: Path) -> None:
    records = scalar_records(10)
    path = write(tmp_path / "events.out.tfevents.1", b"".join(records[:4]))
    first = EventFileReader(path)
    assert points(first.read()) == expected(records[:4])
    write(path, b"".join(records[4:]), "ab")
    resumed = EventFileReader(path, offset=first.offset)
    assert points(resumed.read()) == expected(records[4:], start=4)


def test_a_file_that_shrank_is_read_again_from_the_start_and_reported(tmp_path: Path) -> None:
    records = scalar_records(6)
    path = write(tmp_path / "events.out.tfevents.1", b"".join(records))
    reader = EventFileReader(path)
    reader.read()
    write(path, b"".join(records[:2]))
    assert points(reader.read()) == expected(records[:2])
    assert len(reader.problems) == 1 and "shrank" in reader.problems[0].reason
    assert reader.corrupt == 0


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, len(MIXED)), min_size=1, max_size=3))
def test_reading_a_file_in_pieces_gives_the_same_points_as_reading_it_whole(cuts: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "events.out.tfevents.1")
        path.write_bytes(b"")
        reader = EventFileReader(path)
        reads = []
        for start, end in zip([0, *sorted(cuts)], [*sorted(cuts), len(MIXED)], strict=True):
            write(path, MIXED[start:end], "ab")
            reads.append(reader.read())
        assert joined(*map(points, reads)) == MIXED_POINTS
        assert reader.offset == len(MIXED) and reader.problems == []


def test_records_across_read_chunks_are_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trnconsole.monitors import tensorboard

    monkeypatch.setattr(tensorboard, "_CHUNK", 100)  # records, and a garbage scan, straddle many chunks
    garbage = random.Random(5).randbytes(700)
    path = write(tmp_path / "events.out.tfevents.1", MIXED[:1000] + garbage + MIXED[1000:])
    reader = EventFileReader(path)
    cut_record = next(i for i, end in enumerate(RECORD_BOUNDS[1:]) if end > 1000)
    assert points(reader.read()) == without_step(cut_record - 1)
    assert reader.corrupt == 1 and reader.offset == path.stat().st_size


# ---- corruption ----


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "where", {"length": 2, "length CRC": 9, "payload": 30, "data CRC": -2}.items(), ids=lambda w: w[0]
)
def test_a_flipped_byte_is_reported_and_only_its_record_is_lost(tmp_path: Path, where) -> None:
    name, at = where
    records = scalar_records(9)
    bad = 4
    bad_start = sum(map(len, records[:bad]))
    path = write(tmp_path / "events.out.tfevents.1", b"".join(records))
    flip(path, bad_start + at % len(records[bad]))
    reader = EventFileReader(path)
    got = points(reader.read())
    assert got == joined(expected(records[:bad]), expected(records[bad + 1 :], start=bad + 1))
    assert reader.corrupt == 1
    assert [(p.path, p.offset) for p in reader.problems] == [(str(path), bad_start)]
    expected_reason = "length CRC" if name.startswith("length") else "data CRC"
    assert expected_reason in reader.problems[0].reason
    assert reader.offset == path.stat().st_size


@settings(max_examples=80, deadline=None)
@given(at=st.integers(0, len(MIXED) - 1), mask=st.integers(1, 255))
def test_any_corrupted_byte_loses_only_the_record_that_holds_it(at: int, mask: int) -> None:
    data = bytearray(MIXED)
    data[at] ^= mask
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp, "events.out.tfevents.1"), bytes(data))
        reader = EventFileReader(path)
        got = points(reader.read())
    record = next(i for i, end in enumerate(RECORD_BOUNDS[1:]) if at < end)
    assert got == without_step(record - 1)  # record 0 holds the file version, record s + 1 step s
    assert reader.corrupt == 1 and reader.problems[0].offset == RECORD_BOUNDS[record]


@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=2000))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        reader = EventFileReader(write(Path(tmp, "events.out.tfevents.1"), data))
        reader.read()
        assert 0 <= reader.offset <= len(data)


def test_garbage_between_records_is_one_problem_and_every_record_is_kept(tmp_path: Path) -> None:
    records = scalar_records(8)
    garbage = random.Random(3).randbytes(5000) + bytes(64)  # zeros look like the top of a length
    path = write(tmp_path / "events.out.tfevents.1", b"".join(records[:3]) + garbage + b"".join(records[3:]))
    reader = EventFileReader(path)
    assert points(reader.read()) == expected(records)
    assert reader.corrupt == 1 and reader.problems[0].offset == sum(map(len, records[:3]))


def test_garbage_at_the_end_is_scanned_once_and_records_after_it_are_found(tmp_path: Path) -> None:
    records = scalar_records(6)
    path = write(tmp_path / "events.out.tfevents.1", b"".join(records[:3]) + b"\x07" * 300)
    reader = EventFileReader(path)
    assert points(reader.read()) == expected(records[:3])
    assert reader.corrupt == 1
    assert reader.offset > sum(map(len, records[:3]))  # the garbage is not scanned again
    write(path, b"".join(records[3:]), "ab")
    assert points(reader.read()) == expected(records[3:], start=3)
    assert reader.corrupt == 1 and reader.offset == path.stat().st_size


def test_a_torn_record_followed_by_new_records_is_reported_once_they_show_it(tmp_path: Path) -> None:
    # A writer died mid-record and a new one appended to the same file.
    records = scalar_records(7)
    torn = records[3][:25]
    path = write(tmp_path / "events.out.tfevents.1", b"".join(records[:3]) + torn)
    reader = EventFileReader(path)
    assert points(reader.read()) == expected(records[:3])
    assert reader.problems == []  # so far it could still be a record being written
    write(path, b"".join(records[4:]), "ab")
    assert points(reader.read()) == expected(records[4:], start=4)
    assert reader.corrupt == 1 and reader.problems[0].offset == sum(map(len, records[:3]))


def test_an_event_that_is_not_valid_protobuf_is_reported_and_skipped(tmp_path: Path) -> None:
    records = scalar_records(4)
    path = write(
        tmp_path / "events.out.tfevents.1",
        b"".join(records[:2])
        + frame_record(b"\x09\x00\x01")
        + frame_record(b"\x2a\x05\x0a\x09")
        + records[2]
        + records[3],
    )
    reader = EventFileReader(path)
    assert points(reader.read()) == expected(records)
    assert reader.corrupt == 2 and all("malformed" in p.reason for p in reader.problems)


# ---- log dirs ----


def test_a_log_dir_with_two_runs_and_a_file_that_appears_later(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "c").mkdir(parents=True)
    write(tmp_path / "a" / "events.out.tfevents.1", b"".join(scalar_records(4)))
    write(tmp_path / "b" / "c" / "events.out.tfevents.1", b"".join(scalar_records(2, ("acc",))))
    write(tmp_path / "a" / "notes.txt", b"not an event file")
    reader = LogDirReader(tmp_path)
    assert points(reader.poll()) == {
        ("a", "loss"): expected(scalar_records(4))["loss"],
        ("a", "lr"): expected(scalar_records(4))["lr"],
        ("b/c", "acc"): expected(scalar_records(2, ("acc",)), ("acc",))["acc"],
    }
    assert reader.poll() == {}

    write(tmp_path / "events.out.tfevents.2", b"".join(scalar_records(3, ("root",))))
    write(tmp_path / "a" / "events.out.tfevents.2", b"".join(scalar_records(2, start=4)))
    new = points(reader.poll())
    assert new == {
        (".", "root"): expected(scalar_records(3, ("root",)), ("root",))["root"],
        ("a", "loss"): [(4, f32(1 / 5), 1e9 + 4)],
        ("a", "lr"): [(5, f32(1 / 6), 1e9 + 5)],
    }
    assert [s for s, _, _ in points(reader.scalars)[("a", "loss")]] == [0, 2, 4]

    offsets = reader.offsets()
    assert offsets == {
        rel: (tmp_path / rel).stat().st_size
        for rel in [
            "a/events.out.tfevents.1",
            "a/events.out.tfevents.2",
            "b/c/events.out.tfevents.1",
            "events.out.tfevents.2",
        ]
    }
    write(
        tmp_path / "b" / "c" / "events.out.tfevents.1", b"".join(scalar_records(1, ("acc",), start=9)), "ab"
    )
    resumed = LogDirReader(tmp_path, offsets)
    assert points(resumed.poll()) == {("b/c", "acc"): [(9, f32(1 / 10), 1e9 + 9)]}


def test_a_log_dir_reader_accepts_a_single_event_file(tmp_path: Path) -> None:
    path = write(tmp_path / "events.out.tfevents.1", b"".join(scalar_records(2)))
    reader = LogDirReader(path)
    assert set(reader.poll()) == {(".", "loss"), (".", "lr")}
    assert reader.offsets() == {"events.out.tfevents.1": path.stat().st_size}


def test_log_dir_problems_name_the_file_and_offset(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    path = write(tmp_path / "run" / "events.out.tfevents.1", b"".join(scalar_records(3)))
    flip(path, 60)
    reader = LogDirReader(tmp_path)
    reader.poll()
    assert reader.corrupt == 1
    assert str(reader.problems[0]).startswith(f"{path}: byte ")


# ---- restarts: orphaned points purged as TensorBoard purges them ----


def accumulator_points(log_dir: Path) -> dict[str, list[Point]]:
    """What tensorboard's own EventAccumulator keeps of a directory, series with points left only."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={SCALARS: 0}, purge_orphaned_data=True)
    accumulator.Reload()
    series = {
        tag: [(e.step, e.value, e.wall_time) for e in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }
    return {tag: pts for tag, pts in series.items() if pts}


def run_points(scalars: dict, run: str = ".") -> dict[str, list[Point]]:
    return {tag: pts for (r, tag), pts in points(scalars).items() if r == run and pts}


def torch_session(
    log_dir: Path, rows: list[tuple[str, int]], purge_step: int | None = None, seq: int = 0
) -> None:
    """One life of a training job: a SummaryWriter (resumed with purge_step, or not) writing `rows`, then
    closed; its file renamed so that the files sort in the order they were written, as their time-stamped
    names do outside a test, where the writers' counters can go from 9 to 10 within a second."""
    from torch.utils.tensorboard import SummaryWriter

    before = set(log_dir.glob("*tfevents*"))
    writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)
    for i, (tag, step) in enumerate(rows):
        writer.add_scalar(tag, seq * 1000 + i + 0.5, step, walltime=1e9 + seq * 1000 + i)
    writer.close()
    (made,) = set(log_dir.glob("*tfevents*")) - before
    made.rename(log_dir / f"events.out.tfevents.{seq:04d}.test")


def test_a_job_resumed_with_purge_step_replaces_its_points_from_that_step_as_tensorboard_does(
    tmp_path: Path,
) -> None:
    torch_session(tmp_path, [(tag, step) for step in range(100) for tag in ("loss", "lr")], seq=0)
    torch_session(tmp_path, [("loss", step) for step in range(50, 80)], purge_step=50, seq=1)
    reader = LogDirReader(tmp_path)
    reader.poll()
    ours = run_points(reader.scalars)
    assert ours == accumulator_points(tmp_path)
    loss = [step for step, _, _ in ours["loss"]]
    assert loss == list(range(80))  # no step twice: 50-79 are the resumed job's
    assert ours["loss"][50][1] == 1000.5 and ours["loss"][49][1] == 98.5
    assert [step for step, _, _ in ours["lr"]] == list(range(50))  # a restart purges every tag of the run


def test_restarts_across_several_event_files_purge_only_their_own_run(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    torch_session(a, [("loss", s) for s in range(60)], seq=0)
    torch_session(b, [("loss", s) for s in range(10)], seq=1)
    torch_session(a, [("loss", s) for s in range(40, 70)], purge_step=40, seq=2)
    torch_session(a, [("loss", s) for s in range(65, 75)], seq=3)  # restarted without purge_step: kept
    torch_session(a, [("loss", s) for s in range(20, 30)] + [("acc", 25)], purge_step=20, seq=4)
    reader = LogDirReader(tmp_path)
    reader.poll()
    assert run_points(reader.scalars, "a") == accumulator_points(a)
    assert run_points(reader.scalars, "b") == accumulator_points(b)
    assert [s for s, _, _ in run_points(reader.scalars, "a")["loss"]] == list(range(30))
    assert len(run_points(reader.scalars, "b")["loss"]) == 10


def test_a_purge_found_while_polling_cuts_the_series_already_handed_out(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    torch_session(tmp_path, [(tag, s) for s in range(100) for tag in ("loss", "lr")], seq=0)
    reader = LogDirReader(tmp_path)
    held = {key: list(pts) for key, pts in points(reader.poll()).items()}  # what a chart has drawn
    assert reader.purged == set()
    writer = SummaryWriter(log_dir=str(tmp_path), purge_step=50)
    purged_at = []
    for round_ in range(6):
        for step in range(50 + round_ * 5, 55 + round_ * 5):
            writer.add_scalar("loss", -step, step, walltime=2e9 + step)
        writer.flush()
        new = points(reader.poll())
        purged_at.append(set(reader.purged))
        for key in reader.purged:
            held[key] = points({key: reader.scalars[key]})[key]
        for key, pts in new.items():
            if key not in reader.purged:
                held[key] = held.get(key, []) + pts
    writer.close()
    reader.poll()
    assert purged_at == [{(".", "loss"), (".", "lr")}, set(), set(), set(), set(), set()]
    assert held == points(reader.scalars)
    assert run_points(reader.scalars) == accumulator_points(tmp_path)
    assert [s for s, _, _ in held[(".", "loss")]] == list(range(80))


SESSIONS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 12)),  # purge_step of the resumed writer
        st.lists(st.tuples(st.sampled_from(("loss", "lr")), st.integers(0, 12)), max_size=8),
        st.booleans(),  # the reader polls once this session has ended
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=40, deadline=None)
@given(sessions=SESSIONS)
def test_any_sequence_of_torch_writer_restarts_reads_as_event_accumulator_reads_it(sessions) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp)
        reader = LogDirReader(log_dir)
        for seq, (purge_step, rows, poll) in enumerate(sessions):
            torch_session(log_dir, rows, purge_step, seq)
            if poll:
                reader.poll()
        reader.poll()
        assert run_points(reader.scalars) == accumulator_points(log_dir)


def version_record(version: str, step: int = 0) -> bytes:
    return frame_record(event_pb2.Event(wall_time=1.0, step=step, file_version=version).SerializeToString())


def session_record(step: int, status: int = event_pb2.SessionLog.START) -> bytes:
    event = event_pb2.Event(wall_time=1.0, step=step, session_log=event_pb2.SessionLog(status=status))
    return frame_record(event.SerializeToString())


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("values"), st.lists(st.sampled_from(("a", "b", "c")), min_size=1, max_size=3)),
        st.tuples(st.just("version"), st.sampled_from(("brain.Event:2", "brain.Event:1", "brain.Event:x"))),
        st.tuples(st.just("start")),
        st.tuples(st.just("checkpoint")),  # a session log that is not a START
        st.tuples(st.just("new file")),
        st.tuples(st.just("poll")),
    ).flatmap(lambda op: st.tuples(st.just(op), st.integers(-2, 9))),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_any_mix_of_file_versions_restarts_and_steps_going_back_purges_as_event_accumulator(ops) -> None:
    # Files without a version (or an old one) are purged by steps going back, tag by tag; with version 2,
    # by SessionLog.START only; the version can change from file to file.
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp)
        reader = LogDirReader(log_dir)
        files = 0
        path = log_dir / "events.out.tfevents.0000"
        for i, (op, step) in enumerate(ops):
            kind = op[0]
            if kind == "values":
                values = [
                    summary_pb2.Summary.Value(tag=tag, simple_value=i + k / 4) for k, tag in enumerate(op[1])
                ]
                write(path, proto_record(float(i), step, *values), "ab")
            elif kind == "version":
                write(path, version_record(op[1], step), "ab")
            elif kind == "start":
                write(path, session_record(step), "ab")
            elif kind == "checkpoint":
                write(path, session_record(step, event_pb2.SessionLog.CHECKPOINT), "ab")
            elif kind == "new file":
                files += 1
                path = log_dir / f"events.out.tfevents.{files:04d}"
            else:
                reader.poll()
        reader.poll()
        assert run_points(reader.scalars) == accumulator_points(log_dir)
        assert reader.problems == []


def test_a_reader_resumed_at_a_saved_offset_still_knows_the_files_version(tmp_path: Path) -> None:
    path = write(
        tmp_path / "events.out.tfevents.1",
        version_record("brain.Event:2") + b"".join(scalar_records(10, ("loss",))),
    )
    saved = LogDirReader(tmp_path)
    saved.poll()
    write(
        path,
        b"".join(scalar_records(2, ("loss",), start=10)) + b"".join(scalar_records(1, ("loss",), start=3)),
        "ab",
    )
    resumed = LogDirReader(tmp_path, saved.offsets())
    # With version 2 a step going back is no restart (only a SessionLog START is): nothing is purged.
    assert [s for s, _, _ in points(resumed.poll())[(".", "loss")]] == [10, 11, 3]


@pytest.mark.slow
def test_a_resumed_bundled_runner_charts_each_step_once(tmp_path: Path) -> None:
    """The runners reopen TensorBoard with purge_step = the checkpoint's step + 1 when they resume."""
    from conftest import check_ok, run_runner

    flags = [
        "--synthetic",
        "--model-size",
        "tiny",
        "--device",
        "cpu",
        "--log-every",
        "2",
        "--eval-every",
        "0",
    ]
    flags += ["--save-every", "4", "--output-dir", str(tmp_path)]
    check_ok(run_runner("bert", *flags, "--steps", "10", OMP_NUM_THREADS="1"))
    # Checkpoints at 4 and 8; the job got to 10 before it ended. Resumed from 8, it redoes 9 and 10.
    check_ok(run_runner("bert", *flags, "--steps", "14", "--resume", "auto", OMP_NUM_THREADS="1"))
    reader = LogDirReader(tmp_path / "tb")
    reader.poll()
    ours = run_points(reader.scalars)
    assert ours == accumulator_points(tmp_path / "tb")
    assert [s for s, _, _ in ours["train/loss"]] == [2, 4, 6, 8, 10, 12, 14]
    for tag, pts in ours.items():
        steps = [s for s, _, _ in pts]
        assert len(steps) == len(set(steps)), tag


# ---- the summary ----


def test_summary_rows_give_count_steps_last_value_and_finite_min_max() -> None:
    def batch(rows: list[Point]) -> ScalarBatch:
        out = ScalarBatch()
        for step, value, wall in rows:
            out.steps.append(step)
            out.values.append(value)
            out.wall_times.append(wall)
        return out

    rows = summary_rows(
        {
            ("run", "loss"): batch([(1, 3.0, 0.0), (2, float("nan"), 0.0), (5, -1.0, 0.0), (9, 2.0, 0.0)]),
            (".", "lr"): batch([(0, float("inf"), 0.0)]),
            ("run", "empty"): ScalarBatch(),
        }
    )
    assert rows == [
        {
            "run": ".",
            "tag": "lr",
            "count": 1,
            "first_step": 0,
            "last_step": 0,
            "last_value": math.inf,
            "min": None,
            "max": None,
        },
        {
            "run": "run",
            "tag": "loss",
            "count": 4,
            "first_step": 1,
            "last_step": 9,
            "last_value": 2.0,
            "min": -1.0,
            "max": 3.0,
        },
    ]


def test_points_are_kept_in_typed_arrays_not_python_objects(tmp_path: Path) -> None:
    path = write(tmp_path / "events.out.tfevents.1", b"".join(scalar_records(20_000)))
    batches = EventFileReader(path).read()
    assert sum(map(len, batches.values())) == 20_000
    for batch in batches.values():
        assert (batch.steps.typecode, batch.values.typecode, batch.wall_times.typecode) == ("q", "d", "d")
