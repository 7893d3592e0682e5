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
HANG_PERIODS = 60  # monitoring periods (1 s each) with no step and an idle device and process tree
IDLE_DEVICE_PERCENT = 1.0
IDLE_TREE_CPU_PERCENT = 5.0  # of one core; a compiling neuronx-cc keeps the run's tree busy


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
        self._idle_periods = 0
        self._step_at_last_period: int | None = None
        self._hung = False
        self._models_baseline: int | None = None
        self._models_seen: int | None = None

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

    def check_activity(
        self,
        step: int | None,
        device_percent: float | None,
        tree_cpu_percent: float | None,
        periods: int = HANG_PERIODS,
    ) -> list[Alert]:
        """Once per monitoring period: a hang is no step progress while the run's devices (NeuronCores or
        GPUs, mean utilisation) and its process tree (CPU % of one core) are idle, for `periods` periods in a
        row. A source that is not known (None) does not count as idle: with neither known, nothing is judged.
        Raised once, and again only after the run has moved on."""
        progressed = step != self._step_at_last_period
        self._step_at_last_period = step
        known = [v for v in (device_percent, tree_cpu_percent) if v is not None]
        idle = (
            bool(known)
            and (device_percent is None or device_percent < IDLE_DEVICE_PERCENT)
            and (tree_cpu_percent is None or tree_cpu_percent < IDLE_TREE_CPU_PERCENT)
        )
        if progressed or not idle:
            self._idle_periods = 0
            if progressed:
                self._hung = False
            return []
        self._idle_periods += 1
        if self._hung or self._idle_periods < periods:
            return []
        self._hung = True
        where = f"step {step}" if step is not None else "the start, before any step"
        alert = Alert(
            "hang",
            "error",
            f"no progress for {self._idle_periods} periods since {where}, with the devices and the "
            "processes idle: a rank is probably stuck in a collective or waiting on data; check every "
            "worker's log, then stop and rerun",
            step,
        )
        self.raised.append(alert)
        return [alert]

    def check_loaded_models(self, count: int, step: int | None, warmup_steps: int = 2) -> list[Alert]:
        """The number of NEFFs (compiled graphs) the run's Neuron runtimes have loaded, from neuron-monitor.
        A new one after warm-up means a graph was recompiled: the baseline is the count once the run has
        passed `warmup_steps` steps."""
        previous, self._models_seen = self._models_seen, count
        if step is None or step <= warmup_steps:
            return []
        if self._models_baseline is None:
            self._models_baseline = previous if previous is not None else count
        if previous is None or count <= previous or count <= self._models_baseline:
            return []
        alert = Alert(
            "recompile",
            "warning",
            f"a new compiled graph (NEFF) was loaded at step {step}: {count - self._models_baseline} since "
            f"warm-up ({count} loaded); a shape or a Python value changes between steps",
            step,
        )
        self.raised.append(alert)
        return [alert]
