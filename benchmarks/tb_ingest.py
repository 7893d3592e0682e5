"""TensorBoard scalars: trnconsole's event-file reader beside tensorboard's EventAccumulator on the same
file, in one run: points/s and peak RSS of each (each in a fresh process, CRCs checked by both), then the
time to read 1,000 newly appended points.

Goals: >= 5x EventAccumulator's points/s; <= 0.5x its peak RSS; <= 20 ms for 1,000 appended points.

    python benchmarks/tb_ingest.py [--points 1000000] [--tags 5] [--rounds 15]

The file is written with trnconsole's own encoder (tests/test_tb_reader.py checks that EventAccumulator
reads its output exactly as written): torch's SummaryWriter takes minutes for a million points.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trnconsole.monitors.tensorboard import LogDirReader, frame_record, scalar_event, version_event

GOAL_SPEEDUP = 5.0
GOAL_RSS_RATIO = 0.5
GOAL_APPEND_MS = 20.0
APPEND_POINTS = 1000
TAGS = ("train/loss", "train/learning_rate", "train/grad_norm", "train/throughput", "eval/loss")
CHUNK = 10_000
FILE_NAME = "events.out.tfevents.1763797364.trn1.4242.0"


def tag_names(n: int) -> list[str]:
    return [TAGS[i] if i < len(TAGS) else f"extra/metric_{i}" for i in range(n)]


def records(start: int, count: int, tags: list[str]) -> bytes:
    """`count` scalar records, round-robin over tags; the point index gives step, value and time."""
    out = []
    for i in range(start, start + count):
        step = i // len(tags)
        value = 2.0 / (1 + step * 1e-4) + 0.01 * math.sin(i)
        out.append(frame_record(scalar_event(tags[i % len(tags)], step, value, 1_763_797_364.0 + i * 0.05)))
    return b"".join(out)


def write_event_file(path: Path, points: int, tags: list[str]) -> None:
    with path.open("wb") as f:
        f.write(frame_record(version_event(1_763_797_364.0)))
        for start in range(0, points, CHUNK):
            f.write(records(start, min(CHUNK, points - start), tags))


def peak_and_current_kib() -> tuple[int, int]:
    """(VmHWM, VmRSS) of this process: the high-water mark of its own memory since exec, unlike
    ru_maxrss, which Linux carries over from the parent at fork."""
    try:
        fields = dict(
            line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
        )
        return int(fields["VmHWM"].split()[0]), int(fields["VmRSS"].split()[0])
    except (OSError, KeyError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak, peak


def child(which: str, logdir: str) -> None:
    """Runs in a fresh interpreter: read every scalar of logdir once, print time, memory and a checksum."""
    if which == "ours":
        reader = LogDirReader(logdir)
        start_kib = peak_and_current_kib()[1]
        start = time.perf_counter()
        reader.poll()
        seconds = time.perf_counter() - start
        peak_kib = peak_and_current_kib()[0]
        series = {tag: (list(b.steps), list(b.values)) for (_, tag), b in reader.scalars.items()}
        problems = len(reader.problems)
    else:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        accumulator = EventAccumulator(logdir, size_guidance={"scalars": 0})
        start_kib = peak_and_current_kib()[1]
        start = time.perf_counter()
        accumulator.Reload()
        seconds = time.perf_counter() - start
        peak_kib = peak_and_current_kib()[0]
        series = {
            tag: ([e.step for e in accumulator.Scalars(tag)], [e.value for e in accumulator.Scalars(tag)])
            for tag in accumulator.Tags()["scalars"]
        }
        problems = 0
    checksum = {tag: [len(steps), steps[-1], math.fsum(values)] for tag, (steps, values) in series.items()}
    print(
        json.dumps(
            {
                "seconds": seconds,
                "points": sum(n for n, _, _ in checksum.values()),
                "start_kib": start_kib,
                "peak_kib": peak_kib,
                "checksum": checksum,
                "problems": problems,
            }
        )
    )


def run_child(which: str, logdir: Path) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--child", which, str(logdir)], capture_output=True, text=True
    )
    if result.returncode != 0:
        sys.exit(f"{which} child failed:\n{result.stderr}")
    return json.loads(result.stdout)


def append_latency(logdir: Path, tags: list[str], points: int, rounds: int) -> list[float]:
    """Seconds for LogDirReader.poll() to return APPEND_POINTS points just appended, per round; the reader
    resumes at the end of the big file, as a console restarted on a long run would."""
    path = logdir / FILE_NAME
    reader = LogDirReader(logdir, {FILE_NAME: path.stat().st_size})
    times = []
    for r in range(rounds):
        with path.open("ab") as f:
            f.write(records(points + r * APPEND_POINTS, APPEND_POINTS, tags))
        start = time.perf_counter()
        new = reader.poll()
        times.append(time.perf_counter() - start)
        assert sum(map(len, new.values())) == APPEND_POINTS and not reader.problems, reader.problems
    return times


def accumulator_append_latency(tmp: Path, tags: list[str], rounds: int) -> list[float]:
    """The same for EventAccumulator.Reload(), which also goes on from where its last Reload stopped."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tmp / "accumulator"
    logdir.mkdir()
    path = logdir / FILE_NAME
    path.write_bytes(frame_record(version_event(0.0)))
    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    times = []
    for r in range(rounds):
        with path.open("ab") as f:
            f.write(records(r * APPEND_POINTS, APPEND_POINTS, tags))
        start = time.perf_counter()
        accumulator.Reload()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000, help="scalars in the event file")
    parser.add_argument("--tags", type=int, default=5, help="series they are spread over")
    parser.add_argument("--rounds", type=int, default=15, help="appends of 1,000 points timed")
    parser.add_argument("--child", nargs=2, metavar=("WHICH", "LOGDIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    tags = tag_names(args.tags)
    with tempfile.TemporaryDirectory(prefix="tb_ingest_") as tmp:
        logdir = Path(tmp, "logdir")
        logdir.mkdir()
        start = time.perf_counter()
        write_event_file(logdir / FILE_NAME, args.points, tags)
        size_mb = (logdir / FILE_NAME).stat().st_size / 1e6
        print(
            f"python {sys.version.split()[0]}, {args.points:,} scalars over {len(tags)} tags, "
            f"{size_mb:.1f} MB event file (written in {time.perf_counter() - start:.1f} s)\n"
        )
        # The children first, while this process is small.
        ours = run_child("ours", logdir)
        theirs = run_child("accumulator", logdir)
        ours_times = append_latency(logdir, tags, args.points, args.rounds)
        theirs_times = accumulator_append_latency(Path(tmp), tags, args.rounds)

    for name, result in (("ours", ours), ("EventAccumulator", theirs)):
        assert result["points"] == args.points, (name, result["points"])
    assert ours["checksum"] == theirs["checksum"], "the two readers disagree"
    assert ours["problems"] == 0

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    def row(name: str, mine: str, other: str, ratio: float | None = None, goal: str = "") -> None:
        shown = f"{ratio:.2f}x" if ratio is not None else ""
        print(f"{name:<40}{mine:>12}{other:>18}{shown:>9}   {goal}".rstrip())

    ours_rate, theirs_rate = (r["points"] / r["seconds"] for r in (ours, theirs))
    ours_mb, theirs_mb = ours["peak_kib"] / 1024, theirs["peak_kib"] / 1024
    ours_ms, theirs_ms = (statistics.median(t) * 1e3 for t in (ours_times, theirs_times))
    speedup, rss_ratio = ours_rate / theirs_rate, ours_mb / theirs_mb
    row("", "trnconsole", "EventAccumulator", None, "")
    row(
        "points/s, whole file (CRCs checked)",
        f"{ours_rate:,.0f}",
        f"{theirs_rate:,.0f}",
        speedup,
        f">= {GOAL_SPEEDUP:.0f}x {verdict(speedup >= GOAL_SPEEDUP)}",
    )
    row("  seconds", f"{ours['seconds']:.2f}", f"{theirs['seconds']:.2f}")
    row(
        "peak RSS, MB (fresh process)",
        f"{ours_mb:.1f}",
        f"{theirs_mb:.1f}",
        rss_ratio,
        f"<= {GOAL_RSS_RATIO}x {verdict(rss_ratio <= GOAL_RSS_RATIO)}",
    )
    row("  RSS before reading, MB", f"{ours['start_kib'] / 1024:.1f}", f"{theirs['start_kib'] / 1024:.1f}")
    row(
        f"{APPEND_POINTS:,} appended points, median ms",
        f"{ours_ms:.2f}",
        f"{theirs_ms:.2f}",
        ours_ms / theirs_ms,
        f"<= {GOAL_APPEND_MS:.0f} ms {verdict(ours_ms <= GOAL_APPEND_MS)}",
    )
    row(
        f"  min / max ms of {args.rounds}",
        f"{min(ours_times) * 1e3:.1f} / {max(ours_times) * 1e3:.1f}",
        f"{min(theirs_times) * 1e3:.1f} / {max(theirs_times) * 1e3:.1f}",
    )


if __name__ == "__main__":
    main()
