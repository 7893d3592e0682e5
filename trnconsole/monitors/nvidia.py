"""NVIDIA GPUs through NVML (nvidia-ml-py): utilization, memory, power and temperature per GPU, and the GPU
memory of each process; a host without the package or the driver gets a status line instead of samples."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

NO_PACKAGE = "NVML not available: pip install nvidia-ml-py (or trnconsole[nvidia])"
NO_LIBRARY = "NVIDIA driver library libnvidia-ml.so not found: no NVIDIA GPU or driver on this host"
NO_DRIVER = (
    "NVIDIA driver not loaded: libnvidia-ml.so is here but the kernel module is not (reboot or reinstall)"
)
NO_PERMISSION = "NVML: insufficient permissions to open the NVIDIA devices (check /dev/nvidia* access)"
CLOSED = "NVML closed"


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory: int | None  # bytes; None where the driver cannot tell (Windows WDDM, some MIG set-ups)


@dataclass(frozen=True)
class GpuSample:
    """One GPU; a field this GPU or driver does not report is None."""

    index: int
    name: str | None
    uuid: str | None
    utilization_gpu: float | None  # %, over the driver's last sample period
    utilization_memory: float | None  # %, time the memory controller was busy
    memory_used: int | None  # bytes
    memory_total: int | None
    power_w: float | None
    power_limit_w: float | None
    temperature_c: float | None
    processes: tuple[GpuProcess, ...] | None  # compute and graphics, one entry per pid


@dataclass(frozen=True)
class NvidiaSample:
    t: float
    gpus: tuple[GpuSample, ...]
    driver_version: str | None = None


class NvidiaSampler:
    """Starts NVML once and keeps a handle per GPU; `status` says what is missing when it could not."""

    def __init__(self, nvml: Any = None) -> None:
        """`nvml` is the pynvml module, imported here when not given, or anything with the same names."""
        self._nvml: Any = None
        self._handles: list[Any] = []
        self.driver_version: str | None = None
        self.status = self._start(nvml)

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def _start(self, nvml: Any) -> str:
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                return NO_PACKAGE
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            return _init_failure(nvml, error)
        try:
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except nvml.NVMLError as error:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
            return f"NVML could not list the GPUs: {error}"
        self._nvml = nvml
        self.driver_version = _text(_field(nvml, nvml.nvmlSystemGetDriverVersion))
        driver = f", driver {self.driver_version}" if self.driver_version else ""
        if not self._handles:
            return f"NVML: no NVIDIA GPU found{driver}"
        return f"NVML: {len(self._handles)} GPU{'s' if len(self._handles) != 1 else ''}{driver}"

    def sample(self) -> NvidiaSample | None:
        if self._nvml is None:
            return None
        gpus = tuple(self._sample_gpu(index, handle) for index, handle in enumerate(self._handles))
        return NvidiaSample(t=time.time(), gpus=gpus, driver_version=self.driver_version)

    def _sample_gpu(self, index: int, handle: Any) -> GpuSample:
        nvml = self._nvml
        utilization = _field(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = _field(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        power_mw = _field(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
        limit_mw = _field(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        temperature = _field(nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        return GpuSample(
            index=index,
            name=_text(_field(nvml, nvml.nvmlDeviceGetName, handle)),
            uuid=_text(_field(nvml, nvml.nvmlDeviceGetUUID, handle)),
            utilization_gpu=float(utilization.gpu) if utilization is not None else None,
            utilization_memory=float(utilization.memory) if utilization is not None else None,
            memory_used=int(memory.used) if memory is not None else None,
            memory_total=int(memory.total) if memory is not None else None,
            power_w=power_mw / 1000 if power_mw is not None else None,
            power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
            temperature_c=float(temperature) if temperature is not None else None,
            processes=self._processes(handle),
        )

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...] | None:
        nvml = self._nvml
        lists = [
            _process_list(nvml, handle, "nvmlDeviceGetComputeRunningProcesses"),
            _process_list(nvml, handle, "nvmlDeviceGetGraphicsRunningProcesses"),
        ]
        if all(entries is None for entries in lists):
            return None
        by_pid: dict[int, int | None] = {}
        for entries in lists:
            for entry in entries or ():
                used = entry.usedGpuMemory
                # A process that both computes and draws is listed twice, with the same memory.
                if by_pid.get(entry.pid) is None:
                    by_pid[entry.pid] = int(used) if used is not None else None
        return tuple(GpuProcess(pid=pid, used_memory=used) for pid, used in by_pid.items())

    def close(self) -> None:
        if self._nvml is not None:
            nvml, self._nvml, self._handles = self._nvml, None, []
            self.status = CLOSED
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    def __enter__(self) -> NvidiaSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _init_failure(nvml: Any, error: Exception) -> str:
    for name, status in (
        ("NVMLError_LibraryNotFound", NO_LIBRARY),
        ("NVMLError_DriverNotLoaded", NO_DRIVER),
        ("NVMLError_NoPermission", NO_PERMISSION),
    ):
        kind = getattr(nvml, name, None)
        if kind is not None and isinstance(error, kind):
            return status
    return f"NVML failed to start: {error}"


def _field(nvml: Any, read: Callable[..., T], *args: Any) -> T | None:
    """One reading; a GPU or driver that cannot give it (not supported, no permission, lost) leaves it None
    rather than failing the whole sample."""
    try:
        return read(*args)
    except nvml.NVMLError:
        return None


def _process_list(nvml: Any, handle: Any, name: str) -> list[Any] | None:
    try:
        return getattr(nvml, name)(handle)
    except nvml.NVMLError:
        return None
    except getattr(nvml, "NVMLLibraryMismatchError", ()):
        # nvidia-ml-py newer than the driver: its default (_v3) call is missing there, _v2 may not be.
        older = getattr(nvml, f"{name}_v2", None)
        return _field(nvml, older, handle) if older is not None else None


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def main() -> int:
    """Print one sample (or the reason there is none) as JSON: `python -m trnconsole.monitors.nvidia`."""
    import dataclasses
    import json

    with NvidiaSampler() as sampler:
        sample = sampler.sample()
        print(
            json.dumps(
                {"status": sampler.status, "sample": dataclasses.asdict(sample) if sample else None},
                indent=2,
            )
        )
    return 0 if sample is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
