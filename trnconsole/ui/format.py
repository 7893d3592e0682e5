"""Text for the console's panels, from plain run views and host samples (no widgets here)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import textfmt as fmt
from ..devicefmt import gib, host_line, run_line

if TYPE_CHECKING:
    from ..core.pricing import Cost
    from ..live import RunView
    from ..monitors.hub import MonitorSnapshot


STATUS_ICONS = {
    "starting": "…",
    "running": "▶",
    "stopping": "■",
    "completed": "✔",
    "failed": "✘",
    "stopped": "■",
    "lost": "?",
}


def step_text(view: RunView) -> str:
    if view.step is None:
        return "-"
    return f"{view.step}/{view.total_steps}" if view.total_steps else str(view.step)


def key_numbers(view: RunView | None, now: float) -> str:
    if view is None:
        return "no run selected\n\nn  launch a run\n?  help"
    record = view.record
    lines = [f"{record.id}  {record.name or record.runner}  [{record.status}]"]
    phase = fmt.remote_phase(record.backend, record.detail)
    if phase:
        lines[0] += f"  {phase}"
    progress = step_text(view)
    if view.step is not None and view.total_steps:
        progress += f" ({100 * view.step // view.total_steps}%)"
    eta = f"  ETA {fmt.duration(view.eta_s)}" if view.eta_s is not None else ""
    lines.append(f"step {progress}{eta}  elapsed {fmt.duration(record.elapsed(now))}")
    evaluation = ""
    if view.eval_value is not None:
        evaluation = f"  eval {view.eval_metric} {fmt.number(view.eval_value)}"
    lines.append(f"loss {fmt.number(view.loss)}{evaluation}")
    speed = f"{fmt.number(view.samples_per_s)} samples/s"
    if view.tokens_per_s is not None:
        speed += f"  {fmt.number(view.tokens_per_s)} tok/s"
    lines.append(speed)
    mfu = "-" if view.mfu is None else f"{100 * view.mfu:.1f}%"
    compiles = "-" if view.compile_count is None else str(view.compile_count)
    if view.compiles_after_warmup:
        compiles += f" ({view.compiles_after_warmup} after warm-up!)"
    lines.append(f"MFU {mfu}  compiles {compiles}")
    if view.cost is not None:
        lines.append(cost_line(view.cost))
    if record.error and record.status != "completed":
        lines.append(record.error)
    return "\n".join(lines)


def cost_line(cost: Cost) -> str:
    """`$12.40 so far (2 x trn1.32xlarge at $21.50/h), ~$31.00 at the end, $0.0042 per 1k samples`"""
    where = f"{cost.instances} x {cost.instance_type}" if cost.instances > 1 else f"{cost.instance_type}"
    text = f"${fmt.money(cost.so_far)} so far ({where} at ${cost.usd_per_hour:g}/h)"
    if cost.projected is not None and cost.projected != cost.so_far:
        text += f", ~${fmt.money(cost.projected)} at the end"
    if cost.per_1k_samples is not None:
        text += f", ${fmt.money(cost.per_1k_samples, digits=4)}/1k samples"
    if cost.spot_savings:
        text += f", spot saved {100 * cost.spot_savings:.0f}%"
    return text


def device_panel(snapshot: MonitorSnapshot | None, selected: str | None) -> str:
    """The dashboard's device panel: the host, the selected run's resources, the Neuron and NVIDIA sources."""
    if snapshot is None:
        return "host  sampling…"
    lines = [host_line(snapshot.host)]
    devices = snapshot.runs.get(selected) if selected else None
    if devices is not None:
        lines.append(run_line(devices))
    lines.append(f"{neuron_summary(snapshot)}  ·  NVIDIA  {nvidia_summary(snapshot)}  ·  d: devices")
    return "\n".join(lines)


def neuron_summary(snapshot: MonitorSnapshot) -> str:
    report = snapshot.neuron
    if report is None:
        return f"Neuron  {snapshot.neuron_status.split(':')[0]}"  # the why and the fix: on the Devices screen
    if not report.driver_visible:
        return f"Neuron  {report.problems[0]}"
    totals = report.core_totals()
    if not totals:
        return "Neuron  no application running"
    busy = sum(1 for c in totals.values() if c.utilization > 0)
    mean = sum(c.utilization for c in totals.values()) / len(totals)
    cores = report.hardware.device_count and report.hardware.device_count * report.cores_per_device
    return (
        f"Neuron  {busy}/{cores or len(totals)} cores busy, mean {mean:.0f}%  "
        f"dev mem {gib(report.device_bytes)} GiB"
    )


def nvidia_summary(snapshot: MonitorSnapshot) -> str:
    sample = snapshot.nvidia
    if sample is None:
        return "none"
    if not sample.gpus:
        return snapshot.nvidia_status
    utils = [g.utilization_gpu for g in sample.gpus if g.utilization_gpu is not None]
    mean = f" mean {sum(utils) / len(utils):.0f}%" if utils else ""
    return f"{len(sample.gpus)} GPU(s){mean}"
