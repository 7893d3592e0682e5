"""`--follow`: a run's progress printed live until it ends, as a progress bar on a terminal and as plain
lines otherwise, then its summary."""

from __future__ import annotations

import shutil
import time
from typing import Any, TextIO

from . import textfmt as fmt

POLL_S = 0.25
STATUS_EVERY_S = 1.0


def follow_run(console: Any, record: Any, out: TextIO, poll_s: float = POLL_S) -> int:
    """Follow until the run ends; exit code 0 when it completed. Ctrl-C stops following, not the run."""
    watcher = console.watcher(record)
    tty = out.isatty()
    shown_step: int | None = None
    shown_eval: dict[str, float] = {}
    last_status = 0.0
    try:
        while True:
            watcher.poll()
            metrics = watcher.metrics
            if metrics.last_step and metrics.last_step != shown_step:
                shown_step = metrics.last_step
                _progress(out, metrics, tty)
            for alert in watcher.take_alerts():
                out.write(f"{chr(10) if tty else ''}ALERT {alert.kind}: {alert.message}\n")
                out.flush()
            if metrics.last_eval and metrics.last_eval != shown_eval and not tty:
                shown_eval = dict(metrics.last_eval)
                out.write(f"eval at step {metrics.last_step}: {_evals(shown_eval)}\n")
                out.flush()
            if time.monotonic() - last_status >= STATUS_EVERY_S:
                last_status = time.monotonic()
                record = console.refresh(record)
                if record.finished:
                    watcher.drain()
                    if tty and shown_step is not None:
                        _progress(out, watcher.metrics, tty)
                        out.write("\n")
                    _final(out, console, record, watcher)
                    return 0 if record.status == "completed" else 1
            time.sleep(poll_s)
    except KeyboardInterrupt:
        out.write(f"\nstopped following; the run goes on: trnconsole logs -f {record.id}\n")
        return 0


def _progress(out: TextIO, metrics: Any, tty: bool) -> None:
    step, total = metrics.last_step, metrics.total_steps
    loss = metrics.series.get("loss")
    speed = metrics.series.get("samples_per_s")
    eta = metrics.eta_seconds()
    parts = [f"step {step}" + (f"/{total}" if total else "")]
    if loss is not None:
        parts.append(f"loss {fmt.number(loss.last)}")
    if speed is not None:
        parts.append(f"{fmt.number(speed.last)} samples/s")
    if eta is not None:
        parts.append(f"ETA {fmt.duration(eta)}")
    text = "  ".join(parts)
    if not tty:
        out.write(text + "\n")
    else:
        width = shutil.get_terminal_size((100, 24)).columns
        bar = ""
        if total:
            cells = 24
            done = min(cells, int(cells * step / total))
            bar = "[" + "#" * done + "." * (cells - done) + f"] {100 * step // total:3d}%  "
        out.write("\r" + (bar + text)[: width - 1].ljust(width - 1))
    out.flush()


def _evals(values: dict[str, float]) -> str:
    return ", ".join(f"{k} {fmt.number(v)}" for k, v in values.items()) or "-"


def _final(out: TextIO, console: Any, record: Any, watcher: Any) -> None:
    summary = console.summary(record, watcher)
    code = f" (exit {record.exit_code})" if record.exit_code is not None else ""
    out.write(f"{record.id} {record.status}{code}")
    if record.error and record.status != "completed":
        out.write(f": {record.error}")
    out.write("\n")
    figures = [
        ("steps", summary.get("step")),
        ("final loss", summary.get("final_loss")),
        (f"eval {summary.get('eval_metric') or ''}".rstrip(), summary.get("eval_value")),
        ("avg samples/s", summary.get("avg_samples_per_s")),
        ("MFU", summary.get("mfu")),
        ("compiles", summary.get("compile_count")),
    ]
    out.write("  ".join(f"{k} {fmt.number(v)}" for k, v in figures if v is not None))
    out.write(f"  wall {fmt.duration(summary.get('wall_time_s'))}\n")
    if record.status != "completed":
        out.write(f"last log lines (trnconsole logs {record.id}):\n")
        for line in list(watcher.log_tail)[-10:]:
            out.write(f"  {line}\n")
    out.flush()
