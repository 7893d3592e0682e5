"""Host CPU and memory from psutil, sampled without blocking (CPU is the usage since the last sample)."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class HostSample:
    t: float
    cpu_percent: tuple[float, ...]  # per core, since the previous sample
    memory_used: int
    memory_total: int
    load_1m: float | None = None

    @property
    def cpu_mean(self) -> float:
        return sum(self.cpu_percent) / len(self.cpu_percent) if self.cpu_percent else 0.0


class HostSampler:
    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        psutil.cpu_percent(percpu=True)  # the first call only starts the interval

    def sample(self) -> HostSample:
        psutil = self._psutil
        memory = psutil.virtual_memory()
        try:
            load = psutil.getloadavg()[0]
        except (AttributeError, OSError):
            load = None
        return HostSample(
            t=time.time(),
            cpu_percent=tuple(psutil.cpu_percent(percpu=True)),
            memory_used=memory.total - memory.available,
            memory_total=memory.total,
            load_1m=load,
        )
