"""Monitoring overhead: the CPU time the console spends sampling per 1 Hz tick while one run's process tree
of 33 processes is alive (a root and 32 workers, as torchrun with 32 ranks): the process tree, the host's CPU
and memory, and the NVIDIA GPUs. The process tree is sampled twice side by side, as the console does it
(rescanned every 5 s, the cached processes read on the other ticks) and rescanned on every tick.

Goal: <= 3% of one core at 1 Hz.

    python benchmarks/monitor_overhead.py [--processes 33] [--ticks 200]

The ticks run back to back against a clock that advances 1 s per tick, so rescans fall where they would at
1 Hz; the CPU time is this process's (user + system, which includes reading /proc), summed per sampler.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from trnconsole.monitors.host import HostSampler
from trnconsole.monitors.nvidia import NvidiaSampler
from trnconsole.monitors.proctree import ProcessTreeSampler

GOAL_FRACTION = 0.03  # of one core, at 1 Hz
TICK_S = 1.0


def start_tree(processes: int) -> subprocess.Popen:
    """A shell with processes - 1 sleeping children, returned once they all exist."""
    workers = processes - 1
    root = subprocess.Popen(["sh", "-c", "sleep 3600 & " * workers + "wait"])
    deadline = time.monotonic() + 30
    while len(psutil.Process(root.pid).children()) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the tree of {processes} processes did not start within 30 s")
        time.sleep(0.05)
    return root


def stop_tree(root: subprocess.Popen) -> None:
    workers = psutil.Process(root.pid).children(recursive=True)
    for process in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    root.wait(timeout=30)  # the shell's `wait` returns once its children are gone


class TickClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def measure(ticks: int, samplers: dict[str, Callable[[], object]], clock: TickClock) -> dict[str, float]:
    """CPU seconds per tick of each sampler, the samplers taking turns within each tick."""
    cpu = dict.fromkeys(samplers, 0.0)
    for _ in range(ticks):
        clock.now += TICK_S
        for name, sample in samplers.items():
            start = time.process_time()
            sample()
            cpu[name] += time.process_time() - start
    return {name: seconds / ticks for name, seconds in cpu.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--processes", type=int, default=33, help="processes in the run's tree, root included"
    )
    parser.add_argument("--ticks", type=int, default=200, help="1 Hz ticks to measure")
    args = parser.parse_args()
    if args.processes < 1 or args.ticks < 1:
        parser.error("--processes and --ticks must be at least 1")

    root = start_tree(args.processes)
    try:
        clock = TickClock()
        roots = {"run": root.pid}
        cached = ProcessTreeSampler(rediscover_s=5.0, clock=clock)
        rescan = ProcessTreeSampler(rediscover_s=0.0, clock=clock)
        reads_only = ProcessTreeSampler(rediscover_s=float("inf"), clock=clock)
        host = HostSampler()
        start = time.process_time()
        nvidia = NvidiaSampler()
        nvidia_start_ms = (time.process_time() - start) * 1e3
        seen: set[int] = set()

        def sample_cached() -> None:
            seen.add(cached.sample(roots)["run"].n_processes)

        samplers = {
            "cached": sample_cached,
            "rescan": lambda: rescan.sample(roots),
            "reads": lambda: reads_only.sample(roots),
            "host": host.sample,
            "nvidia": nvidia.sample,
        }
        for sample in samplers.values():  # the first discovery, and the first reading to compare with
            sample()
        per_tick = measure(args.ticks, samplers, clock)
        host_processes = len(psutil.pids())
        nvidia_status = nvidia.status
        nvidia.close()
    finally:
        stop_tree(root)
    assert seen == {args.processes}, f"the sampled tree had {sorted(seen)} processes, not {args.processes}"

    def row(name: str, seconds: float, goal: str = "") -> None:
        fraction = seconds / TICK_S
        print(f"{name:<52}{seconds * 1e3:>10.3f}{fraction:>16.3%}   {goal}".rstrip())

    others = per_tick["host"] + per_tick["nvidia"]
    total = per_tick["cached"] + others
    total_rescan = per_tick["rescan"] + others
    verdict = "ok" if total / TICK_S <= GOAL_FRACTION else "MISSED"
    print(
        f"python {sys.version.split()[0]}, psutil {psutil.__version__}, {psutil.cpu_count()} cores; "
        f"a {args.processes}-process run tree, {host_processes} processes on this host; "
        f"{args.ticks} ticks at 1 Hz\n"
    )
    print(f"{'sampler, per 1 Hz tick':<52}{'CPU ms':>10}{'% of one core':>16}   goal")
    row("process tree, rescanned every 5 s (the console)", per_tick["cached"])
    row("process tree, rescanned every tick", per_tick["rescan"])
    row("process tree, cached processes read only", per_tick["reads"])
    row("host CPU and memory (HostSampler)", per_tick["host"])
    row("NVIDIA GPUs (NvidiaSampler)", per_tick["nvidia"])
    row("console total, tree rescanned every 5 s", total, f"<= {GOAL_FRACTION:.0%} {verdict}")
    row("console total, tree rescanned every tick", total_rescan)

    rescan_cost = per_tick["rescan"] - per_tick["reads"]
    print(
        f"\nprocess tree: rescanning on every tick costs {per_tick['rescan'] / per_tick['cached']:.1f}x the "
        f"console's way. A rescan alone costs {rescan_cost * 1e3:.3f} ms, "
        f"{rescan_cost / host_processes * 1e6:.0f} µs per process on the host (psutil reads the parent of "
        f"each, then builds the tree's processes anew); reading one cached process costs "
        f"{per_tick['reads'] / args.processes * 1e6:.0f} µs."
    )
    print(f"NVIDIA: {nvidia_status} (starting NVML took {nvidia_start_ms:.2f} ms of CPU)")


if __name__ == "__main__":
    main()
