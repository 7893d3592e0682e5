"""Plain text of monitoring snapshots: `trnconsole monitor` prints it and the console's device panels show it.

Bars and history are Unicode block characters, so the text reads the same in a pipe, in tmux and in Textual.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .monitors.host import HostSample
    from .monitors.hub import MonitorSnapshot, RunDevices
    from .monitors.neuron import NeuronReport
    from .monitors.nvidia import NvidiaSample

GIB = 1024**3
SPARK = " ▁▂▃▄▅▆▇█"
MEMORY_PARTS = ("tensors", "constants", "model_code", "model_shared_scratchpad", "runtime_memory")
MEMORY_SHORT = {"model_code": "code", "model_shared_scratchpad": "scratch", "runtime_memory": "runtime"}


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.1f}"


def spark(values: Sequence[float], width: int, top: float = 100.0) -> str:
    """The last `width` values as block characters, scaled to `top`."""
    tail = list(values)[-width:]
    out = []
    for v in tail:
        frac = 0.0 if not math.isfinite(v) else max(0.0, min(1.0, v / top))
        out.append(SPARK[round(frac * (len(SPARK) - 1))])
    return "".join(out).rjust(width)


def bar(percent: float | None, width: int) -> str:
    if percent is None:
        return "?".ljust(width)
    filled = max(0.0, min(1.0, percent / 100.0)) * width
    full = int(filled)
    return ("█" * full + ("▌" if filled - full >= 0.5 else "")).ljust(width, "·")


def wrap(head: str, cells: list[str], width: int) -> list[str]:
    """`head` then the cells, two spaces apart, continued on indented lines at `width`."""
    lines, line = [], head
    for cell in cells:
        if len(line) + 2 + len(cell) > width and line.strip() != head.strip():
            lines.append(line.rstrip())
            line = " " * len(head)
        line += cell + "  "
    lines.append(line.rstrip())
    return lines


def host_line(sample: HostSample | None) -> str:
    if sample is None:
        return "host  sampling…"
    cores = " ".join(f"{c:3.0f}" for c in sample.cpu_percent[:16])
    more = f" +{len(sample.cpu_percent) - 16}" if len(sample.cpu_percent) > 16 else ""
    load = f"  load {sample.load_1m:.2f}" if sample.load_1m is not None else ""
    return (
        f"host  CPU {sample.cpu_mean:3.0f}% [{cores}{more}]  "
        f"mem {gib(sample.memory_used)}/{gib(sample.memory_total)} GiB{load}"
    )


def run_line(devices: RunDevices, label: str = "") -> str:
    """One run's resources in one line: its process tree, and its cores or GPUs."""
    parts = [f"run {devices.run_id}{' ' + label if label else ''}"]
    tree = devices.tree
    if tree is None:
        parts.append("processes gone")
    else:
        parts.append(f"{tree.n_processes} proc  CPU {tree.cpu_percent:.0f}%  RSS {gib(tree.rss_bytes)} GiB")
    if devices.cores:
        util = devices.device_percent or 0.0
        tflops = [c.flops for c in devices.cores.values() if c.flops is not None]
        flops = f"  {sum(tflops) / 1e12:.1f} TFLOP/s" if tflops else ""
        parts.append(
            f"{len(devices.cores)} NeuronCores {util:.0f}%{flops}  dev mem {gib(devices.device_bytes)} GiB"
        )
        if devices.loaded_models is not None:
            parts.append(f"{devices.loaded_models} NEFFs loaded")
    elif devices.gpus:
        util = f" {devices.device_percent:.0f}%" if devices.device_percent is not None else ""
        parts.append(f"GPU {','.join(map(str, devices.gpus))}{util}  mem {gib(devices.device_bytes)} GiB")
    return "  ·  ".join(parts)


def neuron_lines(
    report: NeuronReport | None, status: str, history: Any = None, width: int = 100, max_cores: int = 32
) -> list[str]:
    """NeuronCores: utilisation (with history), TFLOP/s and memory per core; devices; errors and latency."""
    if report is None:
        return [f"Neuron  {status}"]
    hw = report.hardware
    head = ["Neuron"]
    if report.instance.instance_type:
        head.append(report.instance.instance_type)
    if hw.device_count:
        size = f", {gib(hw.device_memory_size)} GiB each" if hw.device_memory_size else ""
        kind = f" NeuronCore-{report.core_version}" if report.core_version else ""
        head.append(f"{hw.device_count} device(s) x {report.cores_per_device}{kind} cores{size}")
    head.append(status)
    lines = ["  ".join(head)]
    lines += [f"  ! {p}" for p in report.problems]
    if not report.driver_visible:
        return lines
    totals = report.core_totals()
    if not totals:
        lines.append("  no Neuron application is running (no runtime reported)")
    hist_width = max(0, min(30, width - 78))
    header = "  NC  util      " + ("history".ljust(hist_width + 2) if hist_width else "")
    header += "TFLOP/s  mem GiB  tensors const  code scratch runtime  pids"
    if totals:
        lines.append(header)
    for index, core in list(sorted(totals.items()))[:max_cores]:
        history_text = ""
        if hist_width and history is not None:
            history_text = spark(history.utilization(index), hist_width) + "  "
        m = core.memory
        tflops = f"{core.flops / 1e12:7.1f}" if core.flops is not None else "      -"
        pids = ",".join(map(str, core.pids[:3])) + ("…" if len(core.pids) > 3 else "")
        lines.append(
            f"  {index:>2} {core.utilization:4.0f}% {bar(core.utilization, 5)} {history_text}{tflops}  "
            f"{m.total / GIB:7.2f}  {m.tensors / GIB:7.2f} {m.constants / GIB:5.2f} {m.model_code / GIB:5.2f}"
            f" {m.model_shared_scratchpad / GIB:7.2f} {m.runtime_memory / GIB:7.2f}  {pids}"
        )
    if len(totals) > max_cores:
        lines.append(f"  … {len(totals) - max_cores} more cores")
    per_device = report.device_memory()
    if per_device:
        size = hw.device_memory_size
        cells = [f"{d}:{gib(m.total)}" + (f"/{gib(size)}" if size else "") for d, m in per_device.items()]
        lines += wrap("  device mem GiB  ", cells, width)
    lines += _runtime_lines(report)
    ecc = report.system.ecc or ()
    bad = [e for e in ecc if e.corrected or e.uncorrected]
    if bad:
        cells = [f"device {e.device}: {e.corrected} corrected, {e.uncorrected} uncorrected" for e in bad]
        lines.append("  ECC  " + "; ".join(cells))
    return lines


def _runtime_lines(report: NeuronReport) -> list[str]:
    lines = []
    runtimes = report.runtimes
    if not runtimes:
        return lines
    host = sum(rt.host_bytes or 0 for rt in runtimes)
    models = sum(rt.model_count for rt in runtimes)
    errors: dict[str, int] = {}
    executions: dict[str, int] = {}
    for rt in runtimes:
        for k, v in rt.errors.items():
            errors[k] = errors.get(k, 0) + v
        for k, v in rt.execution.items():
            executions[k] = executions.get(k, 0) + v
    tags = sorted({rt.tag for rt in runtimes if not rt.tag_is_default})
    lines.append(
        f"  {len(runtimes)} runtime(s){' tagged ' + ', '.join(tags[:4]) if tags else ''}  "
        f"host mem {gib(host)} GiB  {models} NEFFs loaded  "
        f"executed {executions.get('completed', 0)} this period"
    )
    shown_errors = {k: v for k, v in errors.items() if v}
    if shown_errors:
        lines.append("  errors  " + "  ".join(f"{k} {v}" for k, v in sorted(shown_errors.items())))
    latency = next((rt.total_latency for rt in runtimes if rt.total_latency and rt.total_latency.p50), None)
    if latency is not None:
        cells = [
            f"{name} {getattr(latency, name) * 1000:.2f}"
            for name in ("p50", "p99", "p100")
            if getattr(latency, name) is not None
        ]
        lines.append("  latency ms  " + "  ".join(cells))
    return lines


def nvidia_lines(sample: NvidiaSample | None, status: str) -> list[str]:
    if sample is None or not sample.gpus:
        return [f"NVIDIA  {status}"]
    lines = [f"NVIDIA  {status}"]
    for gpu in sample.gpus:
        util = f"{gpu.utilization_gpu:3.0f}%" if gpu.utilization_gpu is not None else "  ?%"
        power = f"{gpu.power_w:.0f}W" if gpu.power_w is not None else "-W"
        if gpu.power_limit_w is not None:
            power += f"/{gpu.power_limit_w:.0f}W"
        temp = f"{gpu.temperature_c:.0f}C" if gpu.temperature_c is not None else "-C"
        procs = ""
        if gpu.processes:
            procs = "  " + " ".join(f"{p.pid}:{gib(p.used_memory)}" for p in gpu.processes[:6])
        lines.append(
            f"  {gpu.index} {gpu.name or '?'}  {util} {bar(gpu.utilization_gpu, 10)}  "
            f"mem {gib(gpu.memory_used)}/{gib(gpu.memory_total)} GiB  {power}  {temp}{procs}"
        )
    return lines


def snapshot_text(
    snapshot: MonitorSnapshot, history: Any = None, width: int = 100, labels: Any = None
) -> str:
    """The whole snapshot as `trnconsole monitor` prints it; `labels` maps run ids to a short name."""
    lines = [host_line(snapshot.host)]
    for run_id, devices in snapshot.runs.items():
        lines.append(run_line(devices, (labels or {}).get(run_id, "")))
    lines += neuron_lines(snapshot.neuron, snapshot.neuron_status, history, width)
    lines += nvidia_lines(snapshot.nvidia, snapshot.nvidia_status)
    return "\n".join(lines)


def snapshot_json(snapshot: MonitorSnapshot) -> str:
    """The snapshot as one line of JSON (dataclasses as objects, integer keys as strings)."""
    import orjson

    return orjson.dumps(snapshot, option=orjson.OPT_NON_STR_KEYS).decode()
