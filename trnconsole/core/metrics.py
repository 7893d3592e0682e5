"""The live state of one run, built from its events: series, progress, status, evaluation, compilations,
checkpoints, and the summary the run list and the comparison table show.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

from .events import Event
from .parsers import Batch, JsonlParser, LogLineParser, MetricRegex, Row
from .series import Series, SeriesSet

_ETA_WINDOW = 20  # recent step_time_s values averaged for the ETA
_event_row = attrgetter("kind", "step", "values", "t", "info")


class RunMetrics:
    """Feed it events (or raw metrics.jsonl / stdout lines) in the order the run wrote them."""

    def __init__(self, metric_regexes: Sequence[MetricRegex] = (), capacity: int = 2048) -> None:
        self.series = SeriesSet(capacity)
        self.last_step: int | None = None
        self.total_steps: int | None = None
        self.started_info: dict[str, Any] = {}
        self.state: str | None = None
        self.error: str | None = None
        self.last_eval: dict[str, float] = {}
        self._last_eval_step: int | None = None
        self.compile_count: int | None = None
        self.compile_seconds: float | None = None
        self.compiles_after_warmup: int | None = None
        self.checkpoints: list[tuple[int | None, str]] = []
        self.reported_summary: dict[str, float] = {}  # a script's own end-of-training line (HF train_runtime)
        self.first_t: float | None = None
        self.last_t: float | None = None
        # A progress bar's figures (tqdm), for scripts that say nothing else of their progress.
        self.total_from_progress = False
        self.bar_remaining_s: float | None = None
        self.bar_unit: str | None = None
        self.bar_rate_metric: str | None = None
        self._structured = False  # events with their own steps: metrics.jsonl lines, or Event objects
        self._jsonl = JsonlParser()
        self._log = LogLineParser(metric_regexes)

    @property
    def malformed(self) -> int:
        """Lines the parsers could not read, from both metrics.jsonl and stdout."""
        return self._jsonl.malformed + self._log.malformed

    def feed_jsonl_lines(self, lines: Iterable[str]) -> None:
        self._structured = True
        self._ingest(self._jsonl.parse_batch(lines))

    def feed_log_lines(self, lines: Iterable[str]) -> None:
        self._ingest(self._log.parse_batch(lines))

    def settle(self) -> None:
        """Takes in what the log parser holds back for the line after it: call at the end of what there is
        to read (a finished run, or `show`)."""
        self._ingest(self._log.flush())

    def feed(self, events: Iterable[Event]) -> None:
        self._structured = True
        self._ingest(list(map(_event_row, events)))

    def _ingest(self, items: Batch | list[Row]) -> None:
        if not items:
            return
        kinds = [item[0] if type(item) is tuple else "step" for item in items]
        if kinds.count("step") != len(items):
            for kind, item in zip(kinds, items, strict=True):
                if kind != "step":
                    self._other(item)
        # The latest known step and time are nearly always on the last item.
        for item in reversed(items):
            step = item[1] if type(item) is tuple else item.steps[-1]
            if step is not None:
                self.last_step = step
                break
        for item in reversed(items):
            t = item[3] if type(item) is tuple else item.ts[-1] if item.ts is not None else None
            if t is not None:
                self.last_t = t
                break
        if self.first_t is None:
            for item in items:
                t = item[3] if type(item) is tuple else item.ts[0] if item.ts is not None else None
                if t is not None:
                    self.first_t = t
                    break
        self.series.add_batch(items, kinds)

    def _other(self, row: Row) -> None:
        kind, step, values, _, info = row
        if kind == "eval":
            evals = {k: v for k, v in values.items() if k != "epoch"}
            if step is not None and step == self._last_eval_step:  # more of the same evaluation
                self.last_eval.update(evals)
            else:
                self.last_eval = evals
            self._last_eval_step = step
        elif kind == "compile":
            self._compile(values, info)
        elif kind == "status":
            state = info.get("state")
            if isinstance(state, str):
                self.state = state
            if state == "started":  # also a resumed run's new start: an earlier failure is history
                self.error = None
                self.started_info = {**info, **values}
                total = self.started_info.get("total_steps")
                if isinstance(total, (int, float)) and not isinstance(total, bool) and math.isfinite(total):
                    self.total_steps = int(total)
            if "error" in info:
                self.error = str(info["error"])
        elif kind == "checkpoint":
            self.checkpoints.append((step, str(info.get("path", ""))))
        elif kind == "summary":
            self.reported_summary.update(values)
        elif kind == "progress":
            total = values.get("total")
            if total is not None and (self.total_steps is None or self.total_from_progress):
                self.total_steps = int(total)
                self.total_from_progress = True
            self.bar_remaining_s = values.get("remaining_s")
            unit, metric = info.get("unit"), info.get("rate_metric")
            if isinstance(unit, str) and isinstance(metric, str):
                self.bar_unit, self.bar_rate_metric = unit, metric

    def _compile(self, values: dict[str, float], info: dict[str, Any]) -> None:
        # The counts are cumulative for the process that wrote them: the latest wins.
        previous = self.compile_count or 0
        count = values.get("count")
        if count is not None and math.isfinite(count):
            self.compile_count = int(count)
        seconds = values.get("seconds")
        if seconds is not None:
            self.compile_seconds = seconds
        if self.compiles_after_warmup is None:
            self.compiles_after_warmup = 0
        if info.get("after_warmup") is True:
            new = values.get("new")
            if new is None and self.compile_count is not None:
                new = self.compile_count - previous
            if new is not None and math.isfinite(new) and new > 0:
                self.compiles_after_warmup += int(new)

    def _series(self, name: str) -> Series | None:
        return self.series.get(name)

    @property
    def step_source(self) -> str | None:
        """Where the last step came from: "runner" (metrics.jsonl, or events), or the log parser's "log",
        "bar", "epoch", "count"; None before any step."""
        if self.last_step is None:
            return None
        if self._structured:
            return "runner"
        return self._log.step_source

    @property
    def steps_per_epoch(self) -> float | None:
        return self._log.steps_per_epoch

    @steps_per_epoch.setter
    def steps_per_epoch(self, value: float | None) -> None:
        """What turns a Hugging Face log dict's epoch into its step where no bar says it."""
        self._log.steps_per_epoch = value

    def eta_seconds(self) -> float | None:
        """Seconds left at the recent pace (mean of the last step_time_s values), else the progress bar's own
        estimate; None when unknown."""
        if self.total_steps is None or self.last_step is None:
            return None
        if self.total_from_progress and "step_time_s" not in self.series:
            return self.bar_remaining_s
        remaining = self.total_steps - self.last_step
        if remaining <= 0:
            return 0.0
        series = self._series("step_time_s")
        if series is None:
            return None
        recent = [v for v in series.recent(_ETA_WINDOW) if math.isfinite(v) and v >= 0]
        if not recent:
            return None
        return remaining * sum(recent) / len(recent)

    def summary(self) -> dict[str, Any]:
        """The run's figures; unknown ones are None. Averages skip the first step event (warm-up and
        compilation) when there is more than one."""
        loss = self._series("loss")
        samples = self._series("samples_per_s")
        tokens = self._series("tokens_per_s")
        mfu = self._series("mfu")
        wall = None
        if self.first_t is not None and self.last_t is not None:
            wall = self.last_t - self.first_t
        return {
            "step": self.last_step,
            "total_steps": self.total_steps,
            "final_loss": loss.last if loss is not None else None,
            "eval": dict(self.last_eval),
            "eval_metric": self.started_info.get("eval_metric"),
            "avg_samples_per_s": samples.mean_excluding_first if samples is not None else None,
            "peak_samples_per_s": samples.max_excluding_first if samples is not None else None,
            "avg_tokens_per_s": tokens.mean_excluding_first if tokens is not None else None,
            "mfu": mfu.mean_excluding_first if mfu is not None else None,
            "compile_count": self.compile_count,
            "compile_seconds": self.compile_seconds,
            "compiles_after_warmup": self.compiles_after_warmup,
            "wall_time_s": wall,
            "state": self.state,
            "error": self.error,
            "malformed_lines": self.malformed,
            "step_source": self.step_source,
            "throughput": self._throughput(samples),
            "reported": dict(self.reported_summary),
        }

    def _throughput(self, samples: Series | None) -> dict[str, Any] | None:
        """The mean rate with its unit: samples/s where the run says it, else its progress bar's rate."""
        if samples is not None and samples.mean_excluding_first is not None:
            return {"value": samples.mean_excluding_first, "unit": "samples/s"}
        rate = self.series.get(self.bar_rate_metric) if self.bar_rate_metric else None
        if rate is None or rate.mean_excluding_first is None:
            return None
        return {"value": rate.mean_excluding_first, "unit": f"{self.bar_unit}/s"}


def headline_eval_metric(declared: str | None, evals: dict[str, float]) -> str | None:
    """The evaluation metric to show: the one the run declared, else the first of accuracy, perplexity, loss
    that it reported."""
    return declared or next((m for m in ("accuracy", "perplexity", "loss") if m in evals), None)
