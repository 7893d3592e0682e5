"""One snapshot a tick from every monitoring source: host (psutil), each run's process tree, Neuron
(neuron-monitor, read continuously on its own thread) and NVIDIA (NVML). A source that is missing says so
in its status line and leaves its part of the snapshot empty; nothing here raises for a missing source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .host import HostSample, HostSampler
from .neuron import CoreTotals, NeuronMonitor, NeuronReport, RuntimeSample, core_totals, runtimes_for
from .nvidia import NvidiaSample, NvidiaSampler
from .proctree import ProcessTreeSampler, TreeSample


@dataclass(frozen=True)
class RunDevices:
    """What the monitors see of one run: its process tree, its Neuron runtimes and cores, its GPUs."""

    run_id: str
    tree: TreeSample | None = None
    runtimes: tuple[RuntimeSample, ...] = ()
    cores: dict[int, CoreTotals] = field(default_factory=dict)
    gpus: dict[int, int | None] = field(default_factory=dict)  # GPU index -> bytes its processes use there
    device_percent: float | None = None  # mean utilisation of its NeuronCores, else of its GPUs
    loaded_models: int | None = None  # NEFFs loaded over its runtimes

    @property
    def device_bytes(self) -> int | None:
        if self.runtimes:
            return sum(rt.device_bytes or 0 for rt in self.runtimes)
        used = [b for b in self.gpus.values() if b is not None]
        return sum(used) if used else None


@dataclass(frozen=True)
class MonitorSnapshot:
    t: float
    host: HostSample | None
    neuron: NeuronReport | None
    neuron_status: str
    nvidia: NvidiaSample | None
    nvidia_status: str
    runs: dict[str, RunDevices] = field(default_factory=dict)


def run_devices(
    run_id: str, tree: TreeSample | None, neuron: NeuronReport | None, nvidia: NvidiaSample | None
) -> RunDevices:
    pids = set(tree.pids) if tree else set()
    runtimes = tuple(runtimes_for(neuron, run_id, pids)) if neuron else ()
    cores = core_totals(runtimes) if runtimes else {}
    gpus: dict[int, int | None] = {}
    for gpu in nvidia.gpus if nvidia else ():
        mine = [p for p in gpu.processes or () if p.pid in pids]
        if mine:
            known = [p.used_memory for p in mine if p.used_memory is not None]
            gpus[gpu.index] = sum(known) if known else None
    device_percent = None
    if cores:
        device_percent = sum(c.utilization for c in cores.values()) / len(cores)
    elif gpus and nvidia:
        utils = [g.utilization_gpu for g in nvidia.gpus if g.index in gpus and g.utilization_gpu is not None]
        device_percent = sum(utils) / len(utils) if utils else None
    return RunDevices(
        run_id=run_id,
        tree=tree,
        runtimes=runtimes,
        cores=cores,
        gpus=gpus,
        device_percent=device_percent,
        loaded_models=sum(rt.model_count for rt in runtimes) if runtimes else None,
    )


class MonitorHub:
    """Owns the sources. start() once (neuron-monitor is started when it exists), sample() each tick from
    one thread at a time, close() at the end (stops neuron-monitor)."""

    def __init__(
        self,
        host: HostSampler | None = None,
        trees: ProcessTreeSampler | None = None,
        neuron: NeuronMonitor | None = None,
        nvidia: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._host = host
        self.trees = trees or ProcessTreeSampler()
        self.neuron = neuron or NeuronMonitor()
        self._nvidia: NvidiaSampler | None = nvidia
        self.clock = clock
        self._started = False

    def start(self) -> MonitorHub:
        if not self._started:
            self._started = True
            self.neuron.start()
            if self._host is None:
                self._host = HostSampler()
            if self._nvidia is None:
                self._nvidia = NvidiaSampler()
        return self

    @property
    def nvidia_status(self) -> str:
        return self._nvidia.status if self._nvidia is not None else "NVML: not started"

    def sample(self, roots: dict[str, int] | None = None) -> MonitorSnapshot:
        """`roots` maps the ids of runs being watched to their root process (the local job's wrapper)."""
        self.start()
        host = self._host.sample() if self._host is not None else None
        trees = self.trees.sample(roots or {})
        neuron = self.neuron.latest
        nvidia = self._nvidia.sample() if self._nvidia is not None else None
        runs = {run_id: run_devices(run_id, trees.get(run_id), neuron, nvidia) for run_id in roots or {}}
        return MonitorSnapshot(
            t=self.clock(),
            host=host,
            neuron=neuron,
            neuron_status=self.neuron.status,
            nvidia=nvidia,
            nvidia_status=self.nvidia_status,
            runs=runs,
        )

    def close(self) -> None:
        self.neuron.stop()
        if self._nvidia is not None:
            self._nvidia.close()

    def __enter__(self) -> MonitorHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
