"""Ingestion speed and memory: metrics.jsonl and LOG lines through the core parsers and series, beside a
bare `json.loads` loop over the same lines, in one run; then the peak RSS of a fresh process fed 10x as many
events.

Goals: >= 300,000 events/s for both paths; peak RSS <= 150 MB after 10,000,000 events. A Trainer's stdout,
tqdm frames and log dicts: a day of a bar redrawn 10 times a second (tqdm's fastest) read in 30 s at most.

    python benchmarks/ingest.py [--lines 1000000] [--rss-events N] [--breakdown]

Both paths are also timed as an install without a C compiler runs them (no `_linescan` nor `_buckets`: step
lines read and series buckets folded in Python). --breakdown also times the parsers alone and their floors
(orjson.loads, str.split), in the same run, and prints where a line's time goes.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from itertools import zip_longest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trnconsole.core import parsers, series
from trnconsole.core.metrics import RunMetrics
from trnconsole.core.parsers import JsonlParser, LogLineParser

try:
    import orjson
except ImportError:  # the parsers fall back to the stdlib scanner; nothing to compare with then
    orjson = None

GOAL_EVENTS_PER_S = 300_000
GOAL_RSS_MB = 150
GOAL_DAY_OF_BAR_S = 30
CHUNK = 10_000  # lines generated, then timed, at a time: never all of them in memory


def jsonl_lines(n: int, seed: int = 0) -> Iterator[list[str]]:
    """Chunks of metrics.jsonl lines as runners/trn_harness/outputs.py writes them: a status line, step
    lines with full-precision floats, an eval every 500 steps and a checkpoint every 1000."""
    rng = random.Random(seed)
    t = 1_763_797_364.0
    chunk = [
        json.dumps(
            {"t": t, "kind": "status", "step": 0, "state": "started", "runner": "bert", "total_steps": n}
        )
    ]
    for step in range(1, n):
        t += 0.142
        loss = 2.0 / (1 + step * 1e-4) + rng.random() * 0.05
        sps = 56.3 + rng.random()
        # json.dumps's output for this record, spelled out because it is 3x quicker to generate.
        chunk.append(
            f'{{"t": {round(t, 3)!r}, "kind": "step", "step": {step}, "epoch": {step // 10_000}, '
            f'"loss": {loss!r}, "lr": {4e-4 * (1 - step / n)!r}, "samples_per_s": {sps!r}, '
            f'"step_time_s": {8 / sps!r}, "tokens_per_s": {sps * 128!r}, "mfu": {sps * 1.3e-4!r}, '
            f'"grad_norm": {1 + rng.random()!r}}}'
        )
        if step % 500 == 0:
            chunk.append(json.dumps({"t": round(t, 3), "kind": "eval", "step": step, "loss": loss}))
        if step % 1000 == 0:
            chunk.append(json.dumps({"t": round(t, 3), "kind": "checkpoint", "step": step, "path": "ck"}))
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def log_lines(n: int, seed: int = 0) -> Iterator[list[str]]:
    """Chunks of stdout LOG lines as outputs.py prints them (rank 0, every field as `name : value`)."""
    rng = random.Random(seed)
    stamp = time.asctime()
    chunk = []
    for step in range(1, n + 1):
        sps = 56.3 + rng.random()
        chunk.append(
            f"LOG {stamp} - ({step // 10_000}, {step}) step_loss : {2.0 / (1 + step * 1e-4):.4f} "
            f"learning_rate : {4e-4 * (1 - step / n):.2e} throughput : {sps:.4f} "
            f"step_time_s : {8 / sps:.4f} tokens_per_s : {sps * 128:.4f} mfu : {sps * 1.3e-4:.6g} "
            f"grad_norm : {1 + rng.random():.4f}"
        )
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


FRAMES_PER_STEP = 2  # a bar redrawn 10 times a second over a run of 5 steps a second
LOGGING_STEPS = 10


def trainer_lines(n: int, seed: int = 0) -> Iterator[list[str]]:
    """Chunks of a Hugging Face Trainer's stdout and stderr in one file, n bar frames in all: tqdm's `\r`
    frames (drawn by tqdm's own format_meter) and, every LOGGING_STEPS steps, the log dict transformers 5
    writes over them with its values as strings; a file line ends at each dict's newline."""
    from tqdm import tqdm

    rng = random.Random(seed)
    total = n // FRAMES_PER_STEP
    frames: list[str] = []
    chunk = []
    for frame in range(n):
        step = frame // FRAMES_PER_STEP + 1
        elapsed = frame / 10
        frames.append(tqdm.format_meter(step, total, elapsed, rate=5.0 + rng.random(), ncols=120))
        if frame % FRAMES_PER_STEP == FRAMES_PER_STEP - 1 and step % LOGGING_STEPS == 0:
            logs = {"loss": 2.0 / (1 + step * 1e-4), "grad_norm": 1 + rng.random(), "learning_rate": 4e-4}
            logs["epoch"] = step / 1000
            text = str({k: f"{v:.4g}" for k, v in logs.items()})
            chunk.append("\r".join(frames) + " " * 20 + text)
            frames = []
            if len(chunk) * LOGGING_STEPS * FRAMES_PER_STEP >= CHUNK:
                yield chunk
                chunk = []
    if frames:
        chunk.append("\r".join(frames))
    if chunk:
        yield chunk


def frames_in(chunk: list[str]) -> int:
    return sum(line.count("\r") + 1 for line in chunk)


def timed_side_by_side(n: int, paths: dict[str, tuple[str, Callable[[list[str]], object]]]) -> dict:
    """Seconds and lines per path, timing the paths chunk by chunk in turn, so that a busy machine slows
    them all alike instead of whichever ran during the busy spell."""
    streams = {"jsonl": jsonl_lines(n), "log": log_lines(n), "trainer": trainer_lines(n)}
    totals = {name: [0, 0.0] for name in paths}
    for chunks in zip_longest(*streams.values()):
        chunk_of = dict(zip(streams, chunks, strict=True))
        for name, (stream, consume) in paths.items():
            chunk = chunk_of[stream]
            if chunk is None:
                continue
            start = time.perf_counter()
            consume(chunk)
            totals[name][1] += time.perf_counter() - start
            totals[name][0] += frames_in(chunk) if stream == "trainer" else len(chunk)
    return totals


def bare_json_loads(chunk: list[str]) -> None:
    loads = json.loads
    for line in chunk:
        loads(line)


def bare_orjson_loads(chunk: list[str]) -> None:
    list(map(orjson.loads, chunk))


def bare_split(chunk: list[str]) -> None:
    " ".join(chunk).split()  # how LogLineParser cuts a batch of LOG lines into tokens


def without_extensions(consume: Callable[[list[str]], object]) -> Callable[[list[str]], None]:
    """`consume` as it runs where the project was installed without a C compiler."""

    def run(chunk: list[str]) -> None:
        reader, folding = parsers._linescan, series._buckets
        parsers._linescan = series._buckets = None
        try:
            consume(chunk)
        finally:
            parsers._linescan, series._buckets = reader, folding

    return run


def rss_child(n: int) -> None:
    """Runs in a fresh interpreter: feed n metrics.jsonl events through RunMetrics, print peak RSS in KiB."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    metrics = RunMetrics()
    for chunk in jsonl_lines(n, seed=1):
        metrics.feed_jsonl_lines(chunk)
    summary = metrics.summary()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"before_kib": before, "peak_kib": after, "step": summary["step"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines per throughput measurement")
    parser.add_argument("--rss-events", type=int, help="events for the memory measurement (10 x --lines)")
    parser.add_argument(
        "--breakdown", action="store_true", help="also time the parsers alone and their floors"
    )
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.rss_child)
        return
    n = args.lines
    rss_events = args.rss_events or 10 * n
    print(f"python {sys.version.split()[0]}, {n:,} lines each\n")
    # First, while this process is still small: Linux carries the parent's peak RSS at fork into the
    # child's ru_maxrss, so measuring after the throughput runs would report this process, not the child.
    rss = measure_rss(rss_events)

    for module, name in ((parsers._linescan, "_linescan"), (series._buckets, "_buckets")):
        print(f"compiled extension trnconsole.core.{name}: {'yes' if module is not None else 'NOT BUILT'}")
    jsonl_metrics, log_metrics, trainer_metrics = RunMetrics(), RunMetrics(), RunMetrics()
    python_metrics = {"jsonl python": RunMetrics(), "log python": RunMetrics()}
    paths = {
        "bare": ("jsonl", bare_json_loads),
        "jsonl": ("jsonl", jsonl_metrics.feed_jsonl_lines),
        "log": ("log", log_metrics.feed_log_lines),
        "jsonl python": ("jsonl", without_extensions(python_metrics["jsonl python"].feed_jsonl_lines)),
        "log python": ("log", without_extensions(python_metrics["log python"].feed_log_lines)),
        "trainer": ("trainer", trainer_metrics.feed_log_lines),
    }
    if orjson is not None:
        paths["orjson"] = ("jsonl", bare_orjson_loads)
    if args.breakdown:
        paths["jsonl parse"] = ("jsonl", JsonlParser().parse_batch)
        paths["split"] = ("log", bare_split)
        paths["log parse"] = ("log", LogLineParser().parse_batch)
    totals = timed_side_by_side(n, paths)
    assert jsonl_metrics.last_step == n - 1 and jsonl_metrics.malformed == 0, jsonl_metrics.summary()
    assert log_metrics.last_step == n and log_metrics.malformed == 0, log_metrics.summary()
    trainer_summary = trainer_metrics.summary()
    assert trainer_summary["step"] == trainer_summary["total_steps"] == n // FRAMES_PER_STEP, trainer_summary
    assert trainer_summary["step_source"] == "bar" and trainer_metrics.malformed == 0, trainer_summary
    for name, metrics in python_metrics.items():
        same = jsonl_metrics if name.startswith("jsonl") else log_metrics
        assert metrics.summary() == same.summary(), name
    rate = {name: lines / seconds for name, (lines, seconds) in totals.items()}
    bare_rate = rate["bare"]

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    print(f"{'path':<46}{'events/s':>12}{'vs json.loads':>15}   goal")
    print(f"{'bare json.loads loop (metrics.jsonl)':<46}{bare_rate:>12,.0f}{1.0:>14.2f}x")
    if "orjson" in rate:
        name = "bare orjson.loads loop (metrics.jsonl)"
        print(f"{name:<46}{rate['orjson']:>12,.0f}{rate['orjson'] / bare_rate:>14.2f}x")
    for name, path in (
        ("JsonlParser + series (feed_jsonl_lines)", "jsonl"),
        ("LogLineParser + series (feed_log_lines)", "log"),
    ):
        goal = f">= {GOAL_EVENTS_PER_S:,}/s {verdict(rate[path] >= GOAL_EVENTS_PER_S)}"
        print(f"{name:<46}{rate[path]:>12,.0f}{rate[path] / bare_rate:>14.2f}x   {goal}")
        python = rate[f"{path} python"]
        print(f"{'  the same, no compiled extensions':<46}{python:>12,.0f}{python / bare_rate:>14.2f}x")
    name = "Trainer stdout: tqdm frames + dicts (frames/s)"
    day = 86_400 * 10 / rate["trainer"]
    goal = f"a day's bar in {day:.1f} s (<= {GOAL_DAY_OF_BAR_S} s) {verdict(day <= GOAL_DAY_OF_BAR_S)}"
    print(f"{name:<46}{rate['trainer']:>12,.0f}{rate['trainer'] / bare_rate:>14.2f}x   {goal}")
    if args.breakdown:
        print_breakdown({name: 1e9 / r for name, r in rate.items()})

    peak_mb, start_mb, rss_seconds = rss
    print(
        f"\npeak RSS after {rss_events:,} events through RunMetrics (fresh process, {rss_seconds:.0f} s): "
        f"{peak_mb:.1f} MB (at its start: {start_mb:.1f} MB)   "
        f"goal <= {GOAL_RSS_MB} MB {verdict(peak_mb <= GOAL_RSS_MB)}"
    )


def print_breakdown(ns: dict[str, float]) -> None:
    """Where a line's time goes, in ns, from the paths timed side by side."""
    budget = 1e9 / GOAL_EVENTS_PER_S
    floor_jsonl = ns.get("orjson", ns["bare"])
    rows = [
        ("decoding alone: orjson.loads | str.split", floor_jsonl, ns["split"]),
        (
            "the rest of the parser (parse_batch - the above)",
            ns["jsonl parse"] - floor_jsonl,
            ns["log parse"] - ns["split"],
        ),
        (
            "series and run state (feed - parse_batch)",
            ns["jsonl"] - ns["jsonl parse"],
            ns["log"] - ns["log parse"],
        ),
        ("total (feed_*_lines)", ns["jsonl"], ns["log"]),
    ]
    print(f"\n{'ns per line (goal: ' + f'{budget:,.0f} in all)':<52}{'metrics.jsonl':>14}{'LOG':>10}")
    for name, jsonl, log in rows:
        print(f"{name:<52}{jsonl:>14,.0f}{log:>10,.0f}")


def measure_rss(events: int) -> tuple[float, float, float]:
    """(peak MB, MB at start, seconds) of a fresh interpreter fed `events` events."""
    start = time.perf_counter()
    child = subprocess.run(
        [sys.executable, __file__, "--rss-child", str(events)], capture_output=True, text=True, check=True
    )
    rss = json.loads(child.stdout)
    return rss["peak_kib"] / 1024, rss["before_kib"] / 1024, time.perf_counter() - start


if __name__ == "__main__":
    main()
