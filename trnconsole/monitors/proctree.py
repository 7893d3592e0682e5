"""CPU and RSS of each run's process tree from psutil: the tree is rediscovered every few seconds and only
its cached processes are read on each tick, because a rescan walks every process on the host."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProcessSample:
    pid: int
    name: str
    cpu_percent: float  # % of one core since this process's previous reading
    rss_bytes: int


@dataclass(frozen=True)
class TreeSample:
    run_id: str
    root_pid: int
    t: float
    pids: tuple[int, ...]  # the root first
    cpu_percent: float  # summed over the tree, in % of one core; a process counts from its second reading
    rss_bytes: int  # summed; shared pages count once per process, as in top
    n_processes: int
    top: tuple[ProcessSample, ...]  # the busiest few, by CPU then RSS


@dataclass
class _Tree:
    root: Any  # psutil.Process
    processes: dict[int, Any]  # pid -> psutil.Process, the root included
    names: dict[int, str]
    found_at: float
    readings: dict[int, tuple[float, float]] = field(default_factory=dict)  # pid -> (CPU seconds, clock)
    stale: bool = False


class ProcessTreeSampler:
    def __init__(
        self, rediscover_s: float = 5.0, clock: Callable[[], float] = time.monotonic, top: int = 5
    ) -> None:
        import psutil

        self._psutil = psutil
        self.rediscover_s = rediscover_s
        self._clock = clock
        self._top = top
        self._trees: dict[str, _Tree] = {}
        # On Linux cpu_times and memory_info read different files (stat, statm): oneshot() would share
        # nothing and only add its own cost, a fifth of each reading (benchmarks/monitor_overhead.py).
        # Elsewhere one system call answers both.
        self._oneshot = not psutil.LINUX

    def sample(self, roots: dict[str, int]) -> dict[str, TreeSample]:
        """One reading per run whose root process is alive; `roots` maps run ids to their root pids."""
        for run_id in self._trees.keys() - roots.keys():
            del self._trees[run_id]
        now = self._clock()
        samples = {}
        for run_id, root_pid in roots.items():
            tree = self._trees.get(run_id)
            if (
                tree is None
                or tree.root.pid != root_pid
                or tree.stale
                or now - tree.found_at >= self.rediscover_s
            ):
                tree = self._discover(root_pid, now, tree)
            sample = self._read(run_id, tree, now) if tree is not None else None
            if sample is None:
                self._trees.pop(run_id, None)
            else:
                self._trees[run_id] = tree
                samples[run_id] = sample
        return samples

    def _discover(self, root_pid: int, now: float, previous: _Tree | None) -> _Tree | None:
        psutil = self._psutil
        try:
            if previous is not None and previous.root.pid == root_pid:
                root = previous.root
                if not root.is_running():  # gone, or its pid reused by another process
                    return None
            else:
                previous = None
                root = psutil.Process(root_pid)
            children = root.children(recursive=True)
            names = {root_pid: previous.names[root_pid] if previous else root.name()}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        processes = {root_pid: root}
        for child in children:
            known = previous.processes.get(child.pid) if previous else None
            # Keep the object already read from, so that its CPU reading carries over; equality is pid
            # and start time, so a reused pid is a new process.
            if known is not None and known == child:
                processes[child.pid], names[child.pid] = known, previous.names[child.pid]
                continue
            try:
                names[child.pid] = child.name()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            processes[child.pid] = child
        readings = {}
        if previous is not None:
            readings = {
                pid: reading
                for pid, reading in previous.readings.items()
                if pid in processes and processes[pid] is previous.processes.get(pid)
            }
        return _Tree(root=root, processes=processes, names=names, found_at=now, readings=readings)

    def _read(self, run_id: str, tree: _Tree, now: float) -> TreeSample | None:
        psutil = self._psutil
        per_process = []
        for pid, process in list(tree.processes.items()):
            try:
                with process.oneshot() if self._oneshot else nullcontext():
                    times = process.cpu_times()
                    memory = process.memory_info()
                if memory.vms == 0:  # a zombie on Linux: exited, not yet reaped, its address space gone
                    raise psutil.ZombieProcess(pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied) as error:
                if pid == tree.root.pid:
                    return None
                del tree.processes[pid]
                tree.readings.pop(pid, None)
                # A process that died may have been replaced (a restarted worker): look again next tick.
                # One we may not read stays out until the next rediscovery, without forcing one.
                tree.stale = tree.stale or not isinstance(error, psutil.AccessDenied)
                continue
            cpu_s = times.user + times.system
            previous = tree.readings.get(pid)
            percent = 0.0
            if previous is not None and now > previous[1]:
                percent = max(0.0, (cpu_s - previous[0]) / (now - previous[1]) * 100)
            tree.readings[pid] = (cpu_s, now)
            per_process.append(ProcessSample(pid, tree.names[pid], percent, memory.rss))
        top = sorted(per_process, key=lambda p: (p.cpu_percent, p.rss_bytes), reverse=True)[: self._top]
        return TreeSample(
            run_id=run_id,
            root_pid=tree.root.pid,
            t=time.time(),
            pids=tuple(p.pid for p in per_process),
            cpu_percent=sum(p.cpu_percent for p in per_process),
            rss_bytes=sum(p.rss_bytes for p in per_process),
            n_processes=len(per_process),
            top=tuple(top),
        )
