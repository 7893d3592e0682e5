"""`trnconsole monitor`: the host, each active local run's processes, cores and GPUs, as text or JSON."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..core.store import ACTIVE


def active_roots(console: Any) -> tuple[dict[str, int], dict[str, str]]:
    """Root pids of the active local runs (their wrappers), and a short label for each."""
    roots, labels = {}, {}
    for record in console.refresh_all(limit=200):
        if record.status in ACTIVE and record.backend == "local" and record.pid:
            roots[record.id] = record.pid
            labels[record.id] = record.name or record.runner
    return roots, labels


def cmd_monitor(args: argparse.Namespace, console_factory: Any) -> int:
    from ..devicefmt import snapshot_json, snapshot_text
    from ..monitors.hub import MonitorHub

    console = console_factory()
    interval = max(0.2, args.interval)
    tty = sys.stdout.isatty() and not args.json
    with MonitorHub() as hub:
        roots, _ = active_roots(console)
        hub.sample(roots)  # CPU figures are rates: the first reading only starts the interval
        if hub.neuron.running:
            hub.neuron.wait_for_reports(1, timeout_s=max(interval, 3.0))
        else:
            time.sleep(min(interval, 1.0))
        try:
            while True:
                roots, labels = active_roots(console)
                snapshot = hub.sample(roots)
                if args.json:
                    out = snapshot_json(snapshot)
                else:
                    width = 100 if not tty else max(60, _terminal_width())
                    out = snapshot_text(snapshot, hub.neuron.history, width, labels)
                    if tty and not args.once:
                        out = "\x1b[H\x1b[2J" + out
                print(out, flush=True)
                if args.once:
                    return 0
                time.sleep(interval)
        except KeyboardInterrupt:
            return 0


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns
