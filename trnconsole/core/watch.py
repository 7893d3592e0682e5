"""Follow one run's directory: new metric lines become events in its RunMetrics, new log lines a buffer.

A bundled runner's metrics come from its metrics.jsonl; any other script's (and a remote job's, whose log
is mirrored into stdout.log) from its log lines. Offsets let a watcher resume where another stopped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path

from .alerts import Alert, AlertTracker
from .metrics import RunMetrics
from .parsers import MetricRegex
from .tail import FileTail

METRICS_FILE = "metrics.jsonl"
LOG_FILE = "stdout.log"
READ_CHUNK = 8 << 20  # bytes per poll, so a huge backlog is taken in slices and the caller stays live


class RunWatcher:
    def __init__(
        self,
        run_dir: Path,
        metrics_from_jsonl: bool,
        metric_regexes: Sequence[MetricRegex] = (),
        keep_log_lines: int = 2000,
    ) -> None:
        self.run_dir = run_dir
        self.metrics_from_jsonl = metrics_from_jsonl
        self.metrics = RunMetrics(metric_regexes=metric_regexes)
        self._jsonl = FileTail(run_dir / METRICS_FILE)
        self._log = FileTail(run_dir / LOG_FILE)
        self.log_tail: deque[str] = deque(maxlen=keep_log_lines)
        self.log_tail_open = False  # the last line of log_tail is a progress bar still being redrawn
        self.log_lines_seen = 0
        self.alerts = AlertTracker()
        self._new_alerts: list[Alert] = []

    def start_near_end(self, window_bytes: int) -> None:
        """Skip all but about the last window_bytes of each file (at a line start): recent figures, fast."""
        for tail in (self._jsonl, self._log):
            try:
                size = tail.path.stat().st_size
            except OSError:
                continue
            if size <= window_bytes:
                continue
            with tail.path.open("rb") as f:
                f.seek(size - window_bytes)
                cut = f.read(window_bytes).find(b"\n")
            tail.offset = size - window_bytes + cut + 1 if cut >= 0 else size

    def poll(self, max_bytes: int = READ_CHUNK) -> tuple[int, list[str]]:
        """Read what was appended since the last poll: (new metric lines, new finished log lines).

        A progress bar's frames are read as they come, for its figures; the line they are drawn on is given
        out once finished, and until then stands last in `log_tail`, each read's frames replacing the last's
        (a terminal shows the last frame only)."""
        new_log = self._log.read_lines(max_bytes=max_bytes, frames=True)
        if new_log and self.log_tail_open:
            self.log_tail.pop()
        self.log_tail.extend(new_log)
        if new_log:
            self.log_tail_open = self._log.open
        finished = new_log[:-1] if self._log.open else new_log
        self.log_lines_seen += len(finished)
        if self.metrics_from_jsonl:
            lines = self._jsonl.read_lines(max_bytes=max_bytes)
            self.metrics.feed_jsonl_lines(lines)
            metric_lines = len(lines)
        else:
            self.metrics.feed_log_lines(new_log)
            metric_lines = len(new_log)
        if new_log:
            self._new_alerts += self.alerts.check_log(new_log, self.metrics.last_step)
        if metric_lines:
            self._new_alerts += self.alerts.check_metrics(self.metrics)
        return metric_lines, finished

    def finished_log_tail(self) -> list[str]:
        """`log_tail` without a line still being drawn."""
        lines = list(self.log_tail)
        return lines[:-1] if self.log_tail_open and lines else lines

    def check_devices(
        self, device_percent: float | None, tree_cpu_percent: float | None, loaded_models: int | None
    ) -> None:
        """Once per monitoring period, what the monitors saw of this run: a hang, or a new compiled graph."""
        step = self.metrics.last_step
        self._new_alerts += self.alerts.check_activity(step, device_percent, tree_cpu_percent)
        if loaded_models is not None:
            self._new_alerts += self.alerts.check_loaded_models(loaded_models, step)

    def take_alerts(self) -> list[Alert]:
        """Alerts raised since the last call."""
        new, self._new_alerts = self._new_alerts, []
        return new

    def drain(self) -> None:
        """Read everything there is now (a finished run, or `show`)."""
        while True:
            metric_lines, log_lines = self.poll()
            if not metric_lines and not log_lines:
                self.metrics.settle()
                return
