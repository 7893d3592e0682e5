"""NeuronCores: neuron-monitor's reports (parsed, matched to runs, kept as a short history) and neuron-ls.

neuron-monitor writes one complete JSON report per line on stdout; every field is read as optional, since
reports differ between Neuron SDK releases and a container may see no driver at all.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil

try:
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a base dependency
    _loads = json.loads

NEURON_BIN_DIR = Path("/opt/aws/neuron/bin")
# The NeuronCore version of each instance family (aws-neuron-sdk about-neuron/arch/neuron-hardware: Trainium
# and Inferentia2 chips carry NeuronCore-v2, Trainium2 chips NeuronCore-v3). On Trainium2 the runtime groups
# NEURON_LOGICAL_NC_CONFIG physical cores into one logical core (default 2), which neuron-monitor names "v3d"
# (logical-neuroncore-config.rst; neuron-monitor-user-guide.rst's trn2 example).
CORE_VERSION_BY_FAMILY = {
    "trn1": "v2",
    "trn1n": "v2",
    "inf2": "v2",
    "trn2": "v3",
    "trn2n": "v3",
    "trn2u": "v3",
}
# Physical NeuronCores per device, by neuron-monitor's neuron_device_type (same pages).
PHYSICAL_CORES_BY_DEVICE_TYPE = {"trainium": 2, "inferentia2": 2, "trainium2": 8}
NO_DRIVER = (
    "the Neuron driver is not visible in this container: run it with --privileged or pass the "
    "/dev/neuron* devices (--device=/dev/neuron0 ...)"
)
RUNTIME_GROUPS = ("neuroncore_counters", "memory_used", "execution_stats", "neuron_runtime_vcpu_usage")
SYSTEM_GROUPS = ("vcpu_usage", "memory_info", "neuron_hw_counters")
PERCENTILES = ("p0", "p1", "p25", "p50", "p75", "p99", "p100")

RuntimeKey = tuple[int | None, str]  # (pid, tag): a pid alone may be reused, a tag is shared by workers


def missing_text(name: str, executable: str | os.PathLike[str] | None = None) -> str:
    """What to tell the user when a Neuron tool cannot be found."""
    what = f"{name} not found" if executable is None else f"{name} not found at {executable}"
    return f"{what}: install aws-neuronx-tools (it lives in {NEURON_BIN_DIR})"


def find_tool(name: str, executable: str | os.PathLike[str] | None = None) -> str | None:
    """The given executable (a path or a name on PATH), else `name` on PATH or in /opt/aws/neuron/bin."""
    if executable is not None:
        text = os.fspath(executable)
        if os.sep in text:
            return text if os.path.isfile(text) and os.access(text, os.X_OK) else None
        return shutil.which(text)
    found = shutil.which(name)
    if found:
        return found
    beside = NEURON_BIN_DIR / name
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


# ---- the report ----


@dataclass(frozen=True, slots=True)
class CoreSample:
    index: int
    utilization: float | None  # percent
    flops: float | None  # FLOP/s; absent from older SDKs

    @property
    def tflops(self) -> float | None:
        return None if self.flops is None else self.flops / 1e12


@dataclass(frozen=True, slots=True)
class CoreMemory:
    """Device memory held on one NeuronCore, in bytes."""

    constants: int = 0
    model_code: int = 0
    model_shared_scratchpad: int = 0
    runtime_memory: int = 0
    tensors: int = 0

    @property
    def total(self) -> int:
        return (
            self.constants
            + self.model_code
            + self.model_shared_scratchpad
            + self.runtime_memory
            + self.tensors
        )

    def plus(self, other: CoreMemory) -> CoreMemory:
        return CoreMemory(
            self.constants + other.constants,
            self.model_code + other.model_code,
            self.model_shared_scratchpad + other.model_shared_scratchpad,
            self.runtime_memory + other.runtime_memory,
            self.tensors + other.tensors,
        )


@dataclass(frozen=True, slots=True)
class HostMemory:
    """Host memory a Neuron runtime holds, in bytes."""

    application_memory: int = 0
    constants: int = 0
    dma_buffers: int = 0
    tensors: int = 0

    @property
    def total(self) -> int:
        return self.application_memory + self.constants + self.dma_buffers + self.tensors


@dataclass(frozen=True, slots=True)
class LoadedModel:
    name: str  # for training, the NEFF's path in the compile cache
    uuid: str
    model_id: int | None = None
    is_running: bool | None = None

    @property
    def key(self) -> str:
        return self.uuid or self.name or str(self.model_id)


@dataclass(frozen=True, slots=True)
class Latency:
    """Execution latency percentiles over one period, in seconds."""

    p0: float | None = None
    p1: float | None = None
    p25: float | None = None
    p50: float | None = None
    p75: float | None = None
    p99: float | None = None
    p100: float | None = None


@dataclass(frozen=True)
class RuntimeSample:
    """One Neuron runtime (one process; with torchrun, one per worker) in one report.

    execution and errors are counts over the report's period, not totals since the start.
    group_errors maps a metric group (or "runtime") to the error text neuron-monitor gave for it.
    """

    pid: int | None
    tag: str
    error: str = ""
    cores: dict[int, CoreSample] = field(default_factory=dict)
    core_memory: dict[int, CoreMemory] = field(default_factory=dict)
    host_memory: HostMemory | None = None
    host_bytes: int | None = None
    device_bytes: int | None = None
    loaded_models: tuple[LoadedModel, ...] = ()
    execution: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    total_latency: Latency | None = None
    device_latency: Latency | None = None
    vcpu_user: float | None = None
    vcpu_system: float | None = None
    group_errors: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> RuntimeKey:
        return (self.pid, self.tag)

    @property
    def tag_is_default(self) -> bool:
        """Whether the tag is the pid, which neuron-monitor uses when NEURON_PROCESS_TAG is not set."""
        return self.pid is not None and self.tag == str(self.pid)

    @property
    def model_count(self) -> int:
        return len(self.loaded_models)

    @property
    def label(self) -> str:
        if self.pid is None:
            return f"runtime tag {self.tag}"
        return f"runtime pid {self.pid}" if self.tag_is_default else f"runtime pid {self.pid} tag {self.tag}"


@dataclass(frozen=True, slots=True)
class EccCounters:
    device: int
    mem_corrected: int = 0
    mem_uncorrected: int = 0
    sram_corrected: int = 0
    sram_uncorrected: int = 0

    @property
    def uncorrected(self) -> int:
        return self.mem_uncorrected + self.sram_uncorrected

    @property
    def corrected(self) -> int:
        return self.mem_corrected + self.sram_corrected


@dataclass(frozen=True)
class SystemSample:
    """The host as neuron-monitor sees it. ecc is None when the report carries no device list."""

    vcpu_average: dict[str, float] = field(default_factory=dict)  # user, nice, system, idle, io_wait, ...
    vcpu_count: int | None = None
    context_switches: int | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    swap_total: int | None = None
    swap_used: int | None = None
    ecc: tuple[EccCounters, ...] | None = None


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    instance_type: str | None = None
    instance_id: str | None = None
    instance_name: str | None = None
    availability_zone: str | None = None
    availability_zone_id: str | None = None
    region: str | None = None
    ami_id: str | None = None
    subnet_id: str | None = None


@dataclass(frozen=True, slots=True)
class HardwareInfo:
    device_count: int | None = None
    cores_per_device: int | None = None
    device_memory_size: int | None = None  # bytes per device
    device_type: str | None = None
    device_version: str | None = None
    core_version: str | None = None
    logical_neuroncore_config: int | None = None


@dataclass(frozen=True, slots=True)
class CoreTotals:
    """One NeuronCore over all the runtimes given (normally one; summed if a report lists it twice)."""

    index: int
    utilization: float  # percent, at most 100
    flops: float | None
    memory: CoreMemory
    pids: tuple[int, ...]


@dataclass(frozen=True)
class NeuronReport:
    """One neuron-monitor report. problems: texts to show the user (no driver, a group's error)."""

    runtimes: tuple[RuntimeSample, ...] = ()
    system: SystemSample = field(default_factory=SystemSample)
    instance: InstanceInfo = field(default_factory=InstanceInfo)
    hardware: HardwareInfo = field(default_factory=HardwareInfo)
    problems: tuple[str, ...] = ()
    driver_visible: bool = True
    t: float | None = None  # when it was read

    @property
    def cores_per_device(self) -> int:
        return cores_per_device(self.hardware)

    @property
    def core_version(self) -> str | None:
        return core_version_of(self.hardware)

    def core_totals(self) -> dict[int, CoreTotals]:
        return core_totals(self.runtimes)

    def device_memory(self) -> dict[int, CoreMemory]:
        return device_memory(self.runtimes, self.cores_per_device)

    @property
    def device_bytes(self) -> int:
        return sum(r.device_bytes or 0 for r in self.runtimes)

    @property
    def host_bytes(self) -> int:
        return sum(r.host_bytes or 0 for r in self.runtimes)


def parse_report(line: str | bytes, t: float | None = None) -> NeuronReport:
    """One report line; ValueError when it is not a JSON object. Missing or odd fields read as unknown."""
    try:
        data = _loads(line)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"a report is a JSON object, not {type(data).__name__}")
    problems: list[str] = []
    runtimes = tuple(
        _runtime(entry) for entry in _list(data.get("neuron_runtime_data")) if isinstance(entry, dict)
    )
    for rt in runtimes:
        for group, error in rt.group_errors.items():
            problems.append(f"{rt.label}: {error}" if group == "runtime" else f"{rt.label}: {group}: {error}")
    system_data = _obj(data.get("system_data"))
    for name, group in system_data.items():
        if _text(_obj(group).get("error")):
            problems.append(f"system {name}: {_text(group['error'])}")
    hw_counters = system_data.get("neuron_hw_counters")
    # A container without /dev/neuron* still runs neuron-monitor: it lists no runtimes and no devices.
    driver_visible = not (
        not runtimes
        and isinstance(hw_counters, dict)
        and "neuron_devices" in hw_counters
        and hw_counters["neuron_devices"] is None
    )
    if not driver_visible:
        problems.insert(0, NO_DRIVER)
    for name in ("instance_info", "neuron_hardware_info"):
        if _text(_obj(data.get(name)).get("error")):
            problems.append(f"{name}: {_text(data[name]['error'])}")
    return NeuronReport(
        runtimes=runtimes,
        system=_system(system_data),
        instance=_instance(_obj(data.get("instance_info"))),
        hardware=_hardware(_obj(data.get("neuron_hardware_info"))),
        problems=tuple(problems),
        driver_visible=driver_visible,
        t=t,
    )


def _runtime(entry: dict[str, Any]) -> RuntimeSample:
    pid = _int(entry.get("pid"))
    tag = _text(entry.get("neuron_runtime_tag")) or ("" if pid is None else str(pid))
    report = _obj(entry.get("report"))
    group_errors = {}
    if _text(entry.get("error")):
        group_errors["runtime"] = _text(entry.get("error"))
    for name, group in report.items():
        if _text(_obj(group).get("error")):
            group_errors[name] = _text(group["error"])

    cores = {}
    for key, counters in _obj(_obj(report.get("neuroncore_counters")).get("neuroncores_in_use")).items():
        index = _int(key)
        if index is None:
            continue
        counters = _obj(counters)
        flops = _num(counters.get("flops"))
        cores[index] = CoreSample(
            index,
            _num(counters.get("neuroncore_utilization")),
            flops if flops is not None else _num(counters.get("effective_flops")),
        )

    memory = _obj(report.get("memory_used"))
    used = _obj(memory.get("neuron_runtime_used_bytes"))
    breakdown = _obj(used.get("usage_breakdown"))
    core_memory = {}
    for key, usage in _obj(breakdown.get("neuroncore_memory_usage")).items():
        index = _int(key)
        if index is not None and isinstance(usage, dict):
            core_memory[index] = CoreMemory(**_counts(usage, CoreMemory.__dataclass_fields__))
    host = breakdown.get("host") if isinstance(breakdown.get("host"), dict) else None
    models = tuple(
        LoadedModel(
            name=_text(m.get("name")),
            uuid=_text(m.get("uuid")),
            model_id=_int(m.get("model_id")),
            is_running=m.get("is_running") if isinstance(m.get("is_running"), bool) else None,
        )
        for m in _list(memory.get("loaded_models"))
        if isinstance(m, dict)
    )

    execution = _obj(report.get("execution_stats"))
    latency = _obj(execution.get("latency_stats"))
    vcpu = _obj(_obj(report.get("neuron_runtime_vcpu_usage")).get("vcpu_usage"))
    return RuntimeSample(
        pid=pid,
        tag=tag,
        error=_text(entry.get("error")),
        cores=dict(sorted(cores.items())),
        core_memory=dict(sorted(core_memory.items())),
        host_memory=HostMemory(**_counts(host, HostMemory.__dataclass_fields__))
        if host is not None
        else None,
        host_bytes=_int(used.get("host")),
        device_bytes=_int(used.get("neuron_device")),
        loaded_models=models,
        execution=_counts(_obj(execution.get("execution_summary"))),
        errors=_counts(_obj(execution.get("error_summary"))),
        total_latency=_latency(latency.get("total_latency")),
        device_latency=_latency(latency.get("device_latency")),
        vcpu_user=_num(vcpu.get("user")),
        vcpu_system=_num(vcpu.get("system")),
        group_errors=group_errors,
    )


def _system(data: dict[str, Any]) -> SystemSample:
    vcpu = _obj(data.get("vcpu_usage"))
    memory = _obj(data.get("memory_info"))
    devices = _obj(data.get("neuron_hw_counters")).get("neuron_devices")
    ecc = None
    if isinstance(devices, list):
        ecc = tuple(
            EccCounters(
                device=_int(d.get("neuron_device_index")) or 0,
                mem_corrected=_int(d.get("mem_ecc_corrected")) or 0,
                mem_uncorrected=_int(d.get("mem_ecc_uncorrected")) or 0,
                sram_corrected=_int(d.get("sram_ecc_corrected")) or 0,
                sram_uncorrected=_int(d.get("sram_ecc_uncorrected")) or 0,
            )
            for d in devices
            if isinstance(d, dict)
        )
    average = _numbers(_obj(vcpu.get("average_usage")))
    usage_data = vcpu.get("usage_data")
    return SystemSample(
        vcpu_average=average,
        vcpu_count=len(usage_data) if isinstance(usage_data, dict) and usage_data else None,
        context_switches=_int(vcpu.get("context_switch_count")),
        memory_total=_int(memory.get("memory_total_bytes")),
        memory_used=_int(memory.get("memory_used_bytes")),
        swap_total=_int(memory.get("swap_total_bytes")),
        swap_used=_int(memory.get("swap_used_bytes")),
        ecc=ecc,
    )


def _instance(data: dict[str, Any]) -> InstanceInfo:
    def text(key: str) -> str | None:
        return _text(data.get(key)) or None

    return InstanceInfo(
        instance_type=text("instance_type"),
        instance_id=text("instance_id"),
        instance_name=text("instance_name"),
        availability_zone=text("instance_availability_zone"),
        availability_zone_id=text("instance_availability_zone_id"),
        region=text("instance_region"),
        ami_id=text("ami_id"),
        subnet_id=text("subnet_id"),
    )


def _hardware(data: dict[str, Any]) -> HardwareInfo:
    return HardwareInfo(
        device_count=_int(data.get("neuron_device_count")),
        cores_per_device=_int(data.get("neuroncore_per_device_count")) or None,
        device_memory_size=_int(data.get("neuron_device_memory_size")),
        device_type=_text(data.get("neuron_device_type")) or None,
        device_version=_text(data.get("neuron_device_version")) or None,
        core_version=_text(data.get("neuroncore_version")) or None,
        logical_neuroncore_config=_int(data.get("logical_neuroncore_config")),
    )


def cores_per_device(hardware: HardwareInfo) -> int:
    """NeuronCores per device as the report counts them: its own figure, else what its device type has (the
    logical cores of a Trainium2 at its LNC), else 2 (an old SDK's trn1/inf2 report says neither)."""
    if hardware.cores_per_device:
        return hardware.cores_per_device
    physical = PHYSICAL_CORES_BY_DEVICE_TYPE.get((hardware.device_type or "").lower())
    if physical is None:
        return 2
    return max(1, physical // (hardware.logical_neuroncore_config or 1))


def core_version_of(hardware: HardwareInfo) -> str | None:
    """The NeuronCore version a report states ("v2", "v3", "v3d"), or the one its device type implies."""
    if hardware.core_version:
        return hardware.core_version.lower()
    device = (hardware.device_type or "").lower()
    if device in ("trainium", "inferentia2"):
        return "v2"
    if device == "trainium2":
        return "v3d" if (hardware.logical_neuroncore_config or 2) == 2 else "v3"
    return None


def instance_family(instance_type: str | None) -> str | None:
    """`trn1n` for "trn1n.32xlarge" (or "ml.trn1n.32xlarge"); None for a type that is not a Neuron family."""
    if not instance_type:
        return None
    parts = instance_type.strip().lower().split(".")
    family = parts[1] if parts[0] == "ml" and len(parts) > 1 else parts[0]
    return family if family in CORE_VERSION_BY_FAMILY else None


def core_version_for_family(family: str | None, logical_neuroncore_config: int | None) -> str | None:
    version = CORE_VERSION_BY_FAMILY.get(family or "")
    if version == "v3" and (logical_neuroncore_config or 2) == 2:
        return "v3d"
    return version


def _latency(value: Any) -> Latency | None:
    if not isinstance(value, dict):
        return None  # null when nothing ran in the period
    return Latency(**{p: _num(value.get(p)) for p in PERCENTILES})


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    return None


def _label(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None or isinstance(value, bool) else str(value)


def _numbers(data: dict[str, Any]) -> dict[str, float]:
    return {k: n for k, v in data.items() if (n := _num(v)) is not None}


def _counts(data: dict[str, Any], only: Iterable[str] | None = None) -> dict[str, int]:
    keys = data.keys() if only is None else [k for k in only if k in data]
    return {k: n for k in keys if (n := _int(data[k])) is not None}


# ---- views over a report ----


def core_totals(runtimes: Iterable[RuntimeSample]) -> dict[int, CoreTotals]:
    """Per NeuronCore over the given runtimes, as neuron-top's "all" tab shows them."""
    util: dict[int, float] = {}
    flops: dict[int, float | None] = {}
    memory: dict[int, CoreMemory] = {}
    pids: dict[int, list[int]] = {}
    for rt in runtimes:
        for index in rt.cores.keys() | rt.core_memory.keys():
            core = rt.cores.get(index)
            util[index] = util.get(index, 0.0) + ((core.utilization or 0.0) if core else 0.0)
            known = None if core is None else core.flops
            if known is not None:
                flops[index] = (flops.get(index) or 0.0) + known
            else:
                flops.setdefault(index, None)
            if index in rt.core_memory:
                memory[index] = memory.get(index, CoreMemory()).plus(rt.core_memory[index])
            if rt.pid is not None and rt.pid not in pids.setdefault(index, []):
                pids[index].append(rt.pid)
    return {
        i: CoreTotals(i, min(util[i], 100.0), flops[i], memory.get(i, CoreMemory()), tuple(pids.get(i, ())))
        for i in sorted(util)
    }


def device_memory(runtimes: Iterable[RuntimeSample], cores_per_device: int) -> dict[int, CoreMemory]:
    """Device memory per Neuron device: core i belongs to device i // cores_per_device."""
    per_device: dict[int, CoreMemory] = {}
    for rt in runtimes:
        for index, usage in rt.core_memory.items():
            device = index // max(cores_per_device, 1)
            per_device[device] = per_device.get(device, CoreMemory()).plus(usage)
    return dict(sorted(per_device.items()))


def runtimes_for(report: NeuronReport, run_id: str, pids: Iterable[int]) -> list[RuntimeSample]:
    """The runtimes of one run: tagged with its id (NEURON_PROCESS_TAG), or one of its processes.

    A runtime with the default tag (its own pid) matches only by pid, so a run id made of digits cannot
    claim some other process that happens to have that pid.
    """
    wanted = set(pids)
    return [
        rt
        for rt in report.runtimes
        if (rt.tag == run_id and not rt.tag_is_default) or (rt.pid is not None and rt.pid in wanted)
    ]


# ---- loaded models: a new NEFF after warm-up is a recompilation ----


@dataclass(frozen=True, slots=True)
class ModelGrowth:
    pid: int | None
    tag: str
    previous: int  # models loaded in the runtime's previous report
    current: int
    new_models: tuple[str, ...]  # their names (NEFF paths)
    t: float | None = None


class ModelGrowthTracker:
    """Feed it reports in order; it returns each growth of a runtime's set of loaded models.

    A runtime's first report, and its first `warmup_reports` reports after that, set its baseline. A model
    unloaded and later loaded again is not new: only a model never seen in that runtime counts.
    """

    def __init__(self, warmup_reports: int = 0) -> None:
        self.warmup_reports = warmup_reports
        self._seen: dict[RuntimeKey, set[str]] = {}
        self._count: dict[RuntimeKey, int] = {}
        self._reports: dict[RuntimeKey, int] = {}

    def feed(self, report: NeuronReport) -> list[ModelGrowth]:
        grown = []
        for rt in report.runtimes:
            key = rt.key
            models = {m.key: m for m in rt.loaded_models}
            reports = self._reports[key] = self._reports.get(key, 0) + 1
            seen = self._seen.get(key)
            if seen is None:
                self._seen[key] = set(models)
            else:
                new = [m for k, m in models.items() if k not in seen]
                seen.update(models)
                if new and reports > self.warmup_reports + 1:
                    grown.append(
                        ModelGrowth(
                            rt.pid,
                            rt.tag,
                            self._count[key],
                            len(models),
                            tuple(m.name for m in new),
                            report.t,
                        )
                    )
            self._count[key] = len(models)
        return grown


def model_growth(reports: Iterable[NeuronReport], warmup_reports: int = 0) -> Iterator[ModelGrowth]:
    """Each growth of a runtime's loaded models over successive reports (see ModelGrowthTracker)."""
    tracker = ModelGrowthTracker(warmup_reports)
    for report in reports:
        yield from tracker.feed(report)


# ---- history ----


class NeuronHistory:
    """The last `maxlen` reports, reduced to what charts need. Safe to read while the reader thread adds."""

    def __init__(self, maxlen: int = 300) -> None:
        self._lock = threading.Lock()
        self._times: deque[float | None] = deque(maxlen=maxlen)
        self._util: deque[dict[int, float]] = deque(maxlen=maxlen)
        self._models: deque[dict[RuntimeKey, int]] = deque(maxlen=maxlen)

    def add(self, report: NeuronReport) -> None:
        util = {i: c.utilization for i, c in report.core_totals().items()}
        models = {rt.key: rt.model_count for rt in report.runtimes}
        with self._lock:
            self._times.append(report.t)
            self._util.append(util)
            self._models.append(models)

    def __len__(self) -> int:
        with self._lock:
            return len(self._times)

    def times(self) -> list[float | None]:
        with self._lock:
            return list(self._times)

    def cores(self) -> list[int]:
        with self._lock:
            return sorted({i for util in self._util for i in util})

    def utilization(self, core: int) -> list[float]:
        """The core's utilization (percent) per report, oldest first; 0 where no runtime used it."""
        with self._lock:
            return [util.get(core, 0.0) for util in self._util]

    def runtimes(self) -> list[RuntimeKey]:
        with self._lock:
            return list(dict.fromkeys(k for models in self._models for k in models))

    def model_counts(self, key: RuntimeKey) -> list[int | None]:
        """A runtime's loaded-model count per report, oldest first; None where it was not listed."""
        with self._lock:
            return [models.get(key) for models in self._models]


# ---- the neuron-monitor process ----


def monitor_config(period_s: int = 1, tag_filter: str = ".*") -> dict[str, Any]:
    """neuron-monitor's config: each runtime's counters, memory, execution stats and vCPU, and the host's."""
    return {
        "period": f"{period_s}s",
        "neuron_runtimes": [{"tag_filter": tag_filter, "metrics": [{"type": g} for g in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": g} for g in SYSTEM_GROUPS],
    }


class NeuronMonitor:
    """Runs `neuron-monitor -c CONFIG` and keeps its latest report, a short history and its health.

    A daemon thread reads the reports; unreadable lines are counted and skipped. The process is stopped by
    stop(), or at interpreter exit; if this process is killed outright, neuron-monitor ends at its next
    write into the closed pipe.
    """

    def __init__(
        self,
        executable: str | os.PathLike[str] | None = None,
        period_s: int = 1,
        history_len: int = 300,
        warmup_reports: int = 0,
        stop_timeout_s: float = 2.0,
    ) -> None:
        self.executable = executable
        self.period_s = period_s
        self.stop_timeout_s = stop_timeout_s
        self.history = NeuronHistory(history_len)
        self._growth = ModelGrowthTracker(warmup_reports)
        self._cond = threading.Condition()
        self._proc: subprocess.Popen[bytes] | None = None
        self._threads: list[threading.Thread] = []
        self._config: Path | None = None
        self._stderr_tail: deque[str] = deque(maxlen=5)
        self._status = "neuron-monitor: not started"
        self._stopping = False
        self.latest: NeuronReport | None = None
        self.reports = 0
        self.malformed = 0
        self.exit_reason: str | None = None
        self._grown: list[ModelGrowth] = []

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self._stopping

    @property
    def status(self) -> str:
        """One line on the source's state: running and how many reports, or why there are none."""
        with self._cond:
            if self._proc is None or self._stopping or self.exit_reason:
                return self.exit_reason or self._status
            if not self.reports:
                return "neuron-monitor: waiting for the first report"
            skipped = f", {self.malformed} unreadable line(s) skipped" if self.malformed else ""
            return f"neuron-monitor: {self.reports} report(s){skipped}"

    def start(self) -> bool:
        """Start neuron-monitor; False (and status says why) when it is missing or will not start."""
        if self._proc is not None:
            return self.running
        path = find_tool("neuron-monitor", self.executable)
        if path is None:
            self._status = missing_text("neuron-monitor", self.executable)
            return False
        fd, name = tempfile.mkstemp(prefix="trnconsole-neuron-monitor-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(monitor_config(self.period_s), f)
        self._config = Path(name)
        try:
            self._proc = subprocess.Popen(
                [path, "-c", name], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError as exc:
            self._config.unlink(missing_ok=True)
            self._status = f"neuron-monitor ({path}) could not start: {exc.strerror}"
            return False
        atexit.register(self.stop)
        self._threads = [
            threading.Thread(
                target=self._read_stderr, args=(self._proc,), name="neuron-monitor-stderr", daemon=True
            ),
            threading.Thread(target=self._read, args=(self._proc,), name="neuron-monitor", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return True

    def wait_for_reports(self, count: int, timeout_s: float) -> bool:
        """Block until `count` reports have been read in all (or the process ended, or the timeout)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.reports < count and self.exit_reason is None and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0 or self._proc is None:
                    break
                self._cond.wait(left)
            return self.reports >= count

    def take_model_growth(self) -> list[ModelGrowth]:
        """Loaded-model growths (recompilations after warm-up) seen since the last call."""
        with self._cond:
            grown, self._grown = self._grown, []
            return grown

    def stop(self) -> None:
        """Stop neuron-monitor: SIGTERM, then SIGKILL after stop_timeout_s. Safe to call twice."""
        atexit.unregister(self.stop)
        proc = self._proc
        if proc is None:
            return
        with self._cond:
            self._stopping = True
            self._status = "neuron-monitor: stopping"
            self._cond.notify_all()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2.0)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self._config is not None:
            self._config.unlink(missing_ok=True)
        with self._cond:
            if self.exit_reason is None:
                self._status = "neuron-monitor: stopped"

    def __enter__(self) -> NeuronMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.strip():
                continue
            try:
                report = parse_report(line, t=time.time())
            except ValueError:
                with self._cond:
                    self.malformed += 1
                continue
            self.history.add(report)
            grown = self._growth.feed(report)
            with self._cond:
                self.latest = report
                self.reports += 1
                self._grown += grown
                self._cond.notify_all()
        code = proc.wait()
        self._threads[0].join(timeout=1.0)  # the last stderr line says why it ended
        with self._cond:
            if not self._stopping:
                self.exit_reason = _exit_text(code, self._stderr_tail[-1] if self._stderr_tail else "")
            self._cond.notify_all()

    def _read_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode("utf-8", errors="replace").strip()
            if line:
                self._stderr_tail.append(line)


def _exit_text(code: int, last_stderr: str) -> str:
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return f"neuron-monitor {how}: {last_stderr}" if last_stderr else f"neuron-monitor {how}"


# ---- neuron-ls ----


@dataclass(frozen=True, slots=True)
class NeuronProcess:
    pid: int
    command: str
    runtime_version: str


@dataclass(frozen=True)
class NeuronDevice:
    index: int
    bdf: str
    cpu_affinity: str
    numa_node: str
    connected_to: tuple[int, ...]
    nc_count: int
    logical_neuroncore_config: int | None
    memory_size: int | None  # bytes
    core_ids: tuple[int, ...]
    processes: tuple[NeuronProcess, ...]
    instance_type: str | None = None  # newer neuron-ls releases name it on every device


@dataclass(frozen=True, slots=True)
class CoreHolder:
    """A process holding NeuronCores. neuron-ls lists processes per device, so core_ids are all the cores
    of the devices it is listed on."""

    pid: int
    command: str
    runtime_version: str
    devices: tuple[int, ...]
    core_ids: tuple[int, ...]


@dataclass(frozen=True)
class NeuronInventory:
    """What `neuron-ls -j` said; with problem set (and no devices) when it could not be asked."""

    devices: tuple[NeuronDevice, ...] = ()
    problem: str | None = None

    @property
    def core_count(self) -> int:
        return sum(len(d.core_ids) or d.nc_count for d in self.devices)

    @property
    def core_ids(self) -> tuple[int, ...]:
        """Every NeuronCore id NEURON_RT_VISIBLE_CORES may name (logical cores, at the host's LNC)."""
        ids: list[int] = []
        for device in self.devices:
            ids += device.core_ids or range(
                device.index * device.nc_count, (device.index + 1) * device.nc_count
            )
        return tuple(sorted(set(ids)))

    @property
    def cores_per_device(self) -> int | None:
        counts = {len(d.core_ids) or d.nc_count for d in self.devices}
        return counts.pop() if len(counts) == 1 else None

    def core_version(self, host_instance_type: str | None = None) -> str | None:
        """The NeuronCore version, from the instance type neuron-ls names (newer releases) or the host's."""
        named = next((d.instance_type for d in self.devices if d.instance_type), None)
        lnc = next((d.logical_neuroncore_config for d in self.devices if d.logical_neuroncore_config), None)
        return core_version_for_family(instance_family(named or host_instance_type), lnc)

    def holders(self) -> dict[int, CoreHolder]:
        """Every process listed as holding cores, by pid."""
        found: dict[int, tuple[NeuronProcess, list[int], list[int]]] = {}
        for device in self.devices:
            for proc in device.processes:
                _, devices, cores = found.setdefault(proc.pid, (proc, [], []))
                devices.append(device.index)
                cores += device.core_ids
        return {
            pid: CoreHolder(pid, p.command, p.runtime_version, tuple(devices), tuple(sorted(set(cores))))
            for pid, (p, devices, cores) in found.items()
        }


def parse_neuron_ls(text: str | bytes) -> NeuronInventory:
    """The output of `neuron-ls -j`; ValueError when it is not a JSON list."""
    try:
        data = _loads(text)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"neuron-ls -j: not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValueError(f"neuron-ls -j: expected a list of devices, got {type(data).__name__}")
    devices = []
    for position, d in enumerate(data):
        if not isinstance(d, dict):
            continue
        processes = tuple(
            NeuronProcess(pid, _text(p.get("command")), _text(p.get("neuron_runtime_version")))
            for p in _list(d.get("neuron_processes"))
            if isinstance(p, dict) and (pid := _int(p.get("pid"))) is not None
        )
        index = _int(d.get("neuron_device"))
        devices.append(
            NeuronDevice(
                index=position if index is None else index,
                bdf=_text(d.get("bdf")),
                cpu_affinity=_text(d.get("cpu_affinity")),
                numa_node=_label(d.get("numa_node")),
                connected_to=tuple(i for i in map(_int, _list(d.get("connected_to"))) if i is not None),
                nc_count=_int(d.get("nc_count")) or 0,
                logical_neuroncore_config=_int(d.get("logical_neuroncore_config")),
                memory_size=_int(d.get("memory_size")),
                core_ids=tuple(i for i in map(_int, _list(d.get("neuroncore_ids"))) if i is not None),
                processes=processes,
                instance_type=_text(d.get("instance_type")) or None,
            )
        )
    return NeuronInventory(devices=tuple(devices))


def neuron_ls(executable: str | os.PathLike[str] | None = None, timeout_s: float = 10.0) -> NeuronInventory:
    """Run `neuron-ls -j`. Never raises: a missing tool or a failure comes back as the inventory's problem."""
    path = find_tool("neuron-ls", executable)
    if path is None:
        return NeuronInventory(problem=missing_text("neuron-ls", executable))
    try:
        done = subprocess.run([path, "-j"], capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return NeuronInventory(problem=f"neuron-ls -j did not answer within {timeout_s:g} s")
    except OSError as exc:
        return NeuronInventory(problem=f"neuron-ls ({path}) could not start: {exc.strerror}")
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        why = f": {lines[-1]}" if lines else ""
        return NeuronInventory(problem=f"neuron-ls -j exited with code {done.returncode}{why}")
    try:
        return parse_neuron_ls(done.stdout)
    except ValueError as exc:
        return NeuronInventory(problem=str(exc))


def leftovers(inventory: NeuronInventory, known_pids: Iterable[int]) -> list[CoreHolder]:
    """Processes holding NeuronCores that belong to no known run (e.g. workers of a run that was killed)."""
    known = set(known_pids)
    return [h for pid, h in sorted(inventory.holders().items()) if pid not in known]


@dataclass(frozen=True, slots=True)
class KillOutcome:
    pid: int
    action: str  # "refused", "terminated", "killed", "gone" or "failed"
    message: str
    pgid: int | None = None


def kill_leftover(
    pid: int, grace_s: float = 5.0, executable: str | os.PathLike[str] | None = None
) -> KillOutcome:
    """Stop a leftover process's group: SIGTERM, then SIGKILL after grace_s.

    Only while neuron-ls still lists the pid as holding a core: the pid may have ended and been reused by
    an unrelated process since the user saw it. Never signals this console's own process group.
    """
    import psutil

    inventory = neuron_ls(executable)
    if inventory.problem:
        return KillOutcome(pid, "refused", f"pid {pid} not stopped: cannot check it ({inventory.problem})")
    if pid not in inventory.holders():
        return KillOutcome(pid, "refused", f"pid {pid} not stopped: it no longer holds a NeuronCore")
    try:
        proc = psutil.Process(pid)
        started = proc.create_time()
        pgid = os.getpgid(pid)
    except (psutil.NoSuchProcess, ProcessLookupError):
        return KillOutcome(pid, "gone", f"pid {pid} had already ended")
    except psutil.AccessDenied:
        return KillOutcome(pid, "failed", f"pid {pid} not stopped: not permitted to inspect it")
    own_group = pgid == os.getpgrp()

    def send(sig: signal.Signals) -> None:
        if own_group:
            os.kill(pid, sig)
        else:
            os.killpg(pgid, sig)

    try:
        send(signal.SIGTERM)
        if _wait_gone(proc, grace_s):
            return KillOutcome(
                pid, "terminated", f"process group {pgid} of pid {pid} stopped with SIGTERM", pgid
            )
        if _same_process(pid, started):
            send(signal.SIGKILL)
            _wait_gone(proc, 2.0)
            return KillOutcome(
                pid,
                "killed",
                f"process group {pgid} of pid {pid} ignored SIGTERM for {grace_s:g} s: SIGKILL",
                pgid,
            )
        return KillOutcome(pid, "terminated", f"process group {pgid} of pid {pid} stopped with SIGTERM", pgid)
    except ProcessLookupError:
        return KillOutcome(pid, "gone", f"pid {pid} had already ended", pgid)
    except PermissionError:
        return KillOutcome(
            pid, "failed", f"pid {pid} not stopped: it belongs to another user (stop it as that user)", pgid
        )


def _wait_gone(proc: psutil.Process, timeout_s: float) -> bool:
    """Whether the process ended (or is a zombie) within timeout_s."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        except psutil.AccessDenied:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _same_process(pid: int, started: float) -> bool:
    import psutil

    try:
        return psutil.Process(pid).create_time() == started
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
