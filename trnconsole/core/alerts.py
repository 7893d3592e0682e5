"""Alerts: what a person watching a run would want to be told at once, from its metrics and its log lines.

Each condition is raised once when it appears (and again only after it clears, for the throughput drop).
The log patterns are the Neuron runtime's and compiler's own messages (see the Neuron troubleshooting docs).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from .metrics import RunMetrics

# (kind, severity, pattern, what to do about it)
LOG_RULES: tuple[tuple[str, str, re.Pattern[str], str], ...] = (
    (
        "device_oom",
        "error",
        re.compile(r"Failed to alloc(?:ate)? (?:DEVICE memory|[\d.]+\s*[KMG]B \(usage)"),
        "device memory exhausted: lower --batch-size or --seq-len, use bf16, or spread over more NeuronCores",
    ),
    (
        "collective_timeout",
        "error",
        re.compile(r"Timeout waiting for (?:RX|incoming connection)"),
        "a collective is waiting on a rank that is stuck or gone: check every worker's log",
    ),
    (
        "compiler_killed",
        "error",
        re.compile(r"neuronx-cc failed with -9"),
        "the Neuron compiler was killed (host out of memory): fewer parallel compile jobs or a bigger host",
    ),
    (
        "oom_killed",
        "error",
        re.compile(r"^\s*Killed\s*$|Signal 9 \(SIGKILL\) received|exitcode\s*:\s*-9\b"),
        "a process was killed with SIGKILL, most often by the host's OOM killer",
    ),
    (
        "cores_busy",
        "error",
        re.compile(r"NeuronCore\(s\) not available|No neuron device available"),
        "the NeuronCores are held by another process: find leftover workers (neuron-ls) and stop them",
    ),
)
THROUGHPUT_DROP = 0.5  # alert when samples/s falls below this fraction of the run's recent median
THROUGHPUT_WINDOW = 20


@dataclass(frozen=True)
class Alert:
    kind: str
    severity: str  # "warning" or "error"
    message: str
    step: int | None = None


class AlertTracker:
    """Feed it a run's new log lines and its RunMetrics after each read; it returns the new alerts."""

    def __init__(self) -> None:
        self.raised: list[Alert] = []
        self._seen_kinds: set[str] = set()
        self._nonfinite_seen = 0
        self._compiles_seen = 0
        self._slow = False
        self._speed_seen = 0

    def check_log(self, lines: Iterable[str], step: int | None = None) -> list[Alert]:
        new = []
        for line in lines:
            for kind, severity, pattern, advice in LOG_RULES:
                if kind not in self._seen_kinds and pattern.search(line):
                    self._seen_kinds.add(kind)
                    new.append(Alert(kind, severity, f"{advice} [{line.strip()[:160]}]", step))
        self.raised += new
        return new

    def check_metrics(self, metrics: RunMetrics) -> list[Alert]:
        new = []
        loss = metrics.series.get("loss")
        if loss is not None and loss.nonfinite > self._nonfinite_seen:
            if self._nonfinite_seen == 0:
                new.append(
                    Alert(
                        "nan_loss",
                        "error",
                        f"the loss is {loss.last} at step {metrics.last_step}: lower --lr, check the data, "
                        "or use bf16 with stochastic rounding rather than fp16",
                        metrics.last_step,
                    )
                )
            self._nonfinite_seen = loss.nonfinite
        after = metrics.compiles_after_warmup or 0
        if after > self._compiles_seen:
            new.append(
                Alert(
                    "recompile",
                    "warning",
                    f"{after} graph compilation(s) after warm-up: a shape or a Python value changes between "
                    "steps; pad to fixed shapes and keep scalars on the device",
                    metrics.last_step,
                )
            )
            self._compiles_seen = after
        speed = metrics.series.get("samples_per_s")
        if speed is not None and speed.count > self._speed_seen:
            # Every value since the last check, each against the median of the values before it (a run
            # read in one go, e.g. by `show`, is judged as if it had been watched live).
            fresh = speed.count - self._speed_seen
            values = speed.recent(fresh + THROUGHPUT_WINDOW)  # a Series keeps only its last few values
            self._speed_seen = speed.count
            for i in range(max(0, len(values) - fresh), len(values)):
                before = [v for v in values[max(0, i - THROUGHPUT_WINDOW) : i] if math.isfinite(v)]
                if len(before) < 5 or not math.isfinite(values[i]):
                    continue
                median = statistics.median(before)
                slow = values[i] < THROUGHPUT_DROP * median
                if slow and not self._slow:
                    new.append(
                        Alert(
                            "throughput_drop",
                            "warning",
                            f"throughput fell to {values[i]:.3g} samples/s, from a recent median of "
                            f"{median:.3g}",
                            metrics.last_step,
                        )
                    )
                self._slow = slow
        self.raised += new
        return new
