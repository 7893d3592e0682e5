"""Text for the console's panels, from plain run views and host samples (no widgets here)."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from .. import textfmt as fmt

if TYPE_CHECKING:
    from ..live import RunView
    from ..monitors.host import HostSample


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
    if record.error and record.status != "completed":
        lines.append(record.error)
    return "\n".join(lines)


def host_text(sample: HostSample | None) -> str:
    if sample is None:
        return "host: sampling…"
    gib = 1024**3
    cores = " ".join(f"{c:3.0f}" for c in sample.cpu_percent[:16])
    more = f" +{len(sample.cpu_percent) - 16}" if len(sample.cpu_percent) > 16 else ""
    load = f"  load {sample.load_1m:.2f}" if sample.load_1m is not None else ""
    return (
        f"host CPU {sample.cpu_mean:3.0f}% [{cores}{more}]  "
        f"mem {sample.memory_used / gib:.1f}/{sample.memory_total / gib:.1f} GiB{load}"
    )


def device_text() -> str:
    """Which device monitors this host offers (their panels come from the monitoring sources)."""
    parts = []
    if shutil.which("neuron-monitor"):
        parts.append("Neuron: neuron-monitor found")
    else:
        parts.append("Neuron: neuron-monitor not on PATH (aws-neuronx-tools)")
    parts.append("NVIDIA: nvidia-smi found" if shutil.which("nvidia-smi") else "NVIDIA: none")
    return "devices  " + "  |  ".join(parts)
