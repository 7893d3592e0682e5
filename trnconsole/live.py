"""The console's live state, kept outside any widget: the run list and a watcher per run being shown.

Plain Python shared by the UI's threads: a reader thread polls files into watchers under a lock, and the
screen's timer takes `RunView` snapshots (frozen, cheap) under the same lock to draw from.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .core.alerts import Alert
from .core.metrics import headline_eval_metric
from .core.pricing import Cost
from .core.series import Series
from .core.store import RunRecord
from .core.watch import RunWatcher

KEEP_FINISHED_WATCHERS = 8  # finished runs looked at recently keep their parsed series
CHART_SERIES = ("loss", "samples_per_s", "step_time_s", "eval_loss", "eval_accuracy", "eval_perplexity")
LAST_VALUES = ("loss", "samples_per_s", "tokens_per_s", "mfu")


@dataclass(frozen=True)
class RunView:
    """What the dashboard shows of one run at one moment."""

    record: RunRecord
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    eta_s: float | None = None
    compile_count: int | None = None
    compiles_after_warmup: int | None = None
    eval_metric: str | None = None
    eval_value: float | None = None
    malformed: int = 0
    series: dict[str, Series] = field(default_factory=dict)
    log_lines_seen: int = 0
    cost: Cost | None = None


class LiveRuns:
    def __init__(self, console: Any, clock: Callable[[], float] = time.time, limit: int = 200) -> None:
        self.console = console
        self.clock = clock
        self.limit = limit
        self.records: list[RunRecord] = []
        self.marked: set[str] = set()
        self._watchers: OrderedDict[str, RunWatcher] = OrderedDict()
        self._lock = threading.RLock()
        self._ended: list[RunRecord] = []
        self._alerts: list[tuple[RunRecord, Alert]] = []

    # ---- the run list (called from a worker thread) ----

    def refresh_records(self) -> list[RunRecord]:
        """Statuses from the backends; remembers runs that ended since the last call for notifications."""
        before = {r.id: r.status for r in self.records}
        records = self.console.refresh_all(limit=self.limit)
        with self._lock:
            self.records = records
            for r in records:
                if r.finished and before.get(r.id) not in (None, r.status) and r.id in before:
                    self._ended.append(r)
        return records

    def take_ended(self) -> list[RunRecord]:
        with self._lock:
            ended, self._ended = self._ended, []
        return ended

    def monitor_roots(self) -> dict[str, int]:
        """Root processes of the active local runs (their wrappers), for the process-tree sampler."""
        with self._lock:
            return {r.id: r.pid for r in self.records if not r.finished and r.backend == "local" and r.pid}

    def record(self, run_id: str) -> RunRecord | None:
        with self._lock:
            return next((r for r in self.records if r.id == run_id), None)

    # ---- watchers (polled from a worker thread) ----

    def _watcher(self, record: RunRecord) -> RunWatcher:
        watcher = self._watchers.get(record.id)
        if watcher is None:
            watcher = self._watchers[record.id] = self.console.watcher(record)
        self._watchers.move_to_end(record.id)
        finished = [rid for rid in self._watchers if (r := self.record(rid)) is not None and r.finished]
        for rid in finished[:-KEEP_FINISHED_WATCHERS]:
            if rid != record.id:
                del self._watchers[rid]
        return watcher

    def poll(self, run_ids: list[str]) -> list[str]:
        """Read what the given runs (and every active one) appended; returns new log lines of run_ids[0]."""
        with self._lock:
            wanted = [r for r in self.records if r.id in run_ids or not r.finished]
        new_lines: list[str] = []
        for record in wanted:
            with self._lock:
                watcher = self._watcher(record)
                _, lines = watcher.poll()
                self._alerts += [(record, alert) for alert in watcher.take_alerts()]
            if run_ids and record.id == run_ids[0]:
                new_lines = lines
        return new_lines

    def feed_monitors(self, runs: dict[str, Any]) -> None:
        """Each active run's monitoring figures (RunDevices by run id, one period's worth) into its alerts."""
        with self._lock:
            for run_id, devices in runs.items():
                record = self.record(run_id)
                watcher = self._watchers.get(run_id)
                if record is None or watcher is None or record.finished:
                    continue
                tree = devices.tree
                watcher.check_devices(
                    devices.device_percent, tree.cpu_percent if tree else None, devices.loaded_models
                )
                self._alerts += [(record, alert) for alert in watcher.take_alerts()]

    def take_alerts(self) -> list[tuple[RunRecord, Alert]]:
        """Alerts of any watched run raised since the last call, each with its run."""
        with self._lock:
            alerts, self._alerts = self._alerts, []
        return alerts

    def log_tail(self, run_id: str) -> list[str]:
        with self._lock:
            watcher = self._watchers.get(run_id)
            return watcher.finished_log_tail() if watcher else []

    def view(self, record: RunRecord, with_series: bool = False) -> RunView:
        """A snapshot for drawing, with what the run has cost where its instance's price is known."""
        view = self._view(record, with_series)
        cost = self.console.cost(record, view.step, view.total_steps, view.samples_per_s)
        return replace(view, cost=cost) if cost.usd_per_hour is not None else view

    def _view(self, record: RunRecord, with_series: bool = False) -> RunView:
        """A snapshot for drawing (with copies of the chart series when asked: the reader thread keeps
        adding to the originals); finished runs nobody polled fall back to their stored summary."""
        with self._lock:
            watcher = self._watchers.get(record.id)
            if watcher is None:
                s = record.summary or {}
                return RunView(
                    record=record,
                    step=s.get("step"),
                    total_steps=s.get("total_steps"),
                    loss=s.get("final_loss"),
                    samples_per_s=s.get("avg_samples_per_s"),
                    tokens_per_s=s.get("avg_tokens_per_s"),
                    mfu=s.get("mfu"),
                    compile_count=s.get("compile_count"),
                    compiles_after_warmup=s.get("compiles_after_warmup"),
                    eval_metric=s.get("eval_metric"),
                    eval_value=s.get("eval_value"),
                )
            m = watcher.metrics
            last = {name: m.series[name].last for name in LAST_VALUES if name in m.series}
            series = (
                {name: m.series[name].copy() for name in CHART_SERIES if name in m.series}
                if with_series
                else {}
            )
            evals = m.last_eval
            metric = headline_eval_metric(m.started_info.get("eval_metric"), evals)
            total = m.total_steps
            if total is None:
                steps = record.spec.flags.get("steps")
                total = int(steps) if isinstance(steps, str) and steps.isdigit() else None
            return RunView(
                record=record,
                step=m.last_step,
                total_steps=total,
                loss=last.get("loss"),
                samples_per_s=last.get("samples_per_s"),
                tokens_per_s=last.get("tokens_per_s"),
                mfu=last.get("mfu"),
                eta_s=m.eta_seconds() if not record.finished else None,
                compile_count=m.compile_count,
                compiles_after_warmup=m.compiles_after_warmup,
                eval_metric=metric,
                eval_value=evals.get(metric) if metric else None,
                malformed=m.malformed,
                series=series,
                log_lines_seen=watcher.log_lines_seen,
            )
