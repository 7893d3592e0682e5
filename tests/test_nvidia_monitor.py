"""NVML sampling: a status line instead of an error on hosts without the package or the driver, and each GPU
field read on its own, against a stand-in for pynvml with the same names."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from trnconsole.monitors.nvidia import (
    NO_DRIVER,
    NO_LIBRARY,
    NO_PACKAGE,
    GpuProcess,
    NvidiaSampler,
)

GIB = 1024**3


def host_has_nvml() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# pynvml's own names, so the sampler finds them on the stand-in as it does on the module.
class NVMLError(Exception):
    def __init__(self, value: int = 999) -> None:
        self.value = value


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLLibraryMismatchError(Exception):
    pass


NOT_SUPPORTED = object()


def proc(pid: int, used: int | None) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, usedGpuMemory=used)


def gpu(**overrides: object) -> dict[str, object]:
    """One GPU as the fake reports it; a value of NOT_SUPPORTED makes that call raise NotSupported."""
    fields: dict[str, object] = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-0f2c",
        "utilization": SimpleNamespace(gpu=87, memory=41),
        "memory": SimpleNamespace(used=30 * GIB, total=80 * GIB, free=50 * GIB),
        "power_mw": 412_345,
        "limit_mw": 700_000,
        "temperature": 61,
        "compute": [proc(4242, 29 * GIB)],
        "graphics": [],
    }
    fields.update(overrides)
    return fields


class FakeNvml:
    """The part of pynvml the sampler calls, answering from a list of GPUs."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: list[dict[str, object]], init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.inits = self.shutdowns = 0

    def _get(self, handle: int, key: str) -> object:
        value = self.gpus[handle][key]
        if value is NOT_SUPPORTED:
            raise NVMLError_NotSupported(3)
        if isinstance(value, Exception):
            raise value
        return value

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> object:
        return self._get(handle, "name")

    def nvmlDeviceGetUUID(self, handle: int) -> object:
        return self._get(handle, "uuid")

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        return self._get(handle, "utilization")

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        return self._get(handle, "memory")

    def nvmlDeviceGetPowerUsage(self, handle: int) -> object:
        return self._get(handle, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> object:
        return self._get(handle, "limit_mw")

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> object:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._get(handle, "temperature")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> object:
        return self._get(handle, "compute")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: int) -> object:
        return self._get(handle, "compute_v2")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> object:
        return self._get(handle, "graphics")

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: int) -> object:
        return self._get(handle, "graphics_v2")


def test_the_fake_only_uses_names_that_pynvml_has() -> None:
    pynvml = pytest.importorskip("pynvml")
    names = [name for name in vars(FakeNvml) if name.startswith(("nvml", "NVML"))]
    assert len(names) > 15
    assert [name for name in names if not hasattr(pynvml, name)] == []


def test_without_the_driver_library_the_real_pynvml_gives_a_status_and_no_sample() -> None:
    pytest.importorskip("pynvml")
    if host_has_nvml():
        pytest.skip("this host has libnvidia-ml.so")
    sampler = NvidiaSampler()
    assert sampler.status == NO_LIBRARY
    assert "libnvidia-ml.so not found" in sampler.status
    assert not sampler.available
    assert sampler.sample() is None
    sampler.close()
    assert sampler.sample() is None


def test_without_pynvml_installed_the_status_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    sampler = NvidiaSampler()
    assert sampler.status == NO_PACKAGE
    assert "pip install nvidia-ml-py" in sampler.status
    assert sampler.sample() is None


def test_a_driver_that_is_not_loaded_gives_its_own_status() -> None:
    fake = FakeNvml([gpu()], init_error=NVMLError_DriverNotLoaded(9))
    sampler = NvidiaSampler(nvml=fake)
    assert sampler.status == NO_DRIVER
    assert sampler.sample() is None
    sampler.close()
    assert fake.shutdowns == 0  # never started, so nothing to shut down


def test_every_field_of_every_gpu_in_plain_units() -> None:
    fake = FakeNvml([gpu(), gpu(uuid="GPU-77aa", temperature=48, compute=[])])
    sampler = NvidiaSampler(nvml=fake)
    assert sampler.status == "NVML: 2 GPUs, driver 570.86.15"
    sample = sampler.sample()
    assert sample is not None and sample.driver_version == "570.86.15"
    first, second = sample.gpus
    assert (first.index, first.name, first.uuid) == (0, "NVIDIA H100 80GB HBM3", "GPU-0f2c")
    assert (first.utilization_gpu, first.utilization_memory) == (87.0, 41.0)
    assert (first.memory_used, first.memory_total) == (30 * GIB, 80 * GIB)
    assert first.power_w == pytest.approx(412.345)
    assert first.power_limit_w == pytest.approx(700.0)
    assert first.temperature_c == 61.0
    assert first.processes == (GpuProcess(pid=4242, used_memory=29 * GIB),)
    assert (second.index, second.uuid, second.temperature_c, second.processes) == (1, "GPU-77aa", 48.0, ())
    assert fake.inits == 1
    sampler.sample()
    assert fake.inits == 1  # NVML starts once, not per sample


def test_a_field_the_gpu_does_not_support_is_none_and_the_others_are_still_read() -> None:
    fake = FakeNvml(
        [
            gpu(
                power_mw=NOT_SUPPORTED,
                limit_mw=NOT_SUPPORTED,
                utilization=NOT_SUPPORTED,
                graphics=NOT_SUPPORTED,
            )
        ]
    )
    sample = NvidiaSampler(nvml=fake).sample()
    assert sample is not None
    (only,) = sample.gpus
    assert only.power_w is None and only.power_limit_w is None
    assert only.utilization_gpu is None and only.utilization_memory is None
    assert only.memory_used == 30 * GIB and only.temperature_c == 61.0
    assert only.processes == (GpuProcess(pid=4242, used_memory=29 * GIB),)


def test_any_nvml_error_on_a_field_leaves_that_field_none() -> None:
    fake = FakeNvml([gpu(temperature=NVMLError_NoPermission(4), name=NVMLError(15))])
    (only,) = NvidiaSampler(nvml=fake).sample().gpus
    assert only.temperature_c is None and only.name is None
    assert only.uuid == "GPU-0f2c"


def test_process_memory_from_compute_and_graphics_one_entry_per_pid() -> None:
    compute = [proc(100, 2 * GIB), proc(101, None), proc(102, 5 * GIB)]
    graphics = [proc(100, 2 * GIB), proc(101, 1 * GIB), proc(300, 64 * 1024**2)]
    (only,) = NvidiaSampler(nvml=FakeNvml([gpu(compute=compute, graphics=graphics)])).sample().gpus
    assert only.processes == (
        GpuProcess(100, 2 * GIB),
        GpuProcess(101, 1 * GIB),  # unknown in one list, known in the other
        GpuProcess(102, 5 * GIB),
        GpuProcess(300, 64 * 1024**2),
    )


def test_memory_the_driver_cannot_attribute_is_none_and_no_process_list_at_all_is_none() -> None:
    fake = FakeNvml([gpu(compute=[proc(7, None)]), gpu(compute=NOT_SUPPORTED, graphics=NOT_SUPPORTED)])
    first, second = NvidiaSampler(nvml=fake).sample().gpus
    assert first.processes == (GpuProcess(7, None),)
    assert second.processes is None  # unknown, which is not the same as "no processes"


def test_a_driver_older_than_pynvml_falls_back_to_the_v2_process_calls() -> None:
    mismatch = NVMLLibraryMismatchError("use a versioned function such as ..._v2")
    fake = FakeNvml([gpu(compute=mismatch, compute_v2=[proc(9, GIB)], graphics=[])])
    (only,) = NvidiaSampler(nvml=fake).sample().gpus
    assert only.processes == (GpuProcess(9, GIB),)


def test_a_host_with_the_driver_but_no_gpu_says_so() -> None:
    sampler = NvidiaSampler(nvml=FakeNvml([]))
    assert sampler.status == "NVML: no NVIDIA GPU found, driver 570.86.15"
    assert sampler.available
    assert sampler.sample().gpus == ()


def test_close_shuts_nvml_down_once_and_then_samples_are_none() -> None:
    fake = FakeNvml([gpu()])
    with NvidiaSampler(nvml=fake) as sampler:
        assert sampler.sample() is not None
    assert fake.shutdowns == 1
    assert sampler.sample() is None
    sampler.close()
    assert fake.shutdowns == 1


def test_the_module_entry_prints_one_sample_or_the_status_as_json() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trnconsole.monitors.nvidia"], capture_output=True, text=True, timeout=30
    )
    report = json.loads(done.stdout)
    if report["sample"] is None:
        assert done.returncode == 1
        assert report["status"] in (NO_PACKAGE, NO_LIBRARY, NO_DRIVER) or report["status"].startswith("NVML")
    else:
        assert done.returncode == 0
        assert {"index", "name", "memory_used", "processes"} <= report["sample"]["gpus"][0].keys()
