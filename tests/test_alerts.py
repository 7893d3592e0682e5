"""Alerts from a run's metrics and log lines: each raised once, with what to do about it."""

from __future__ import annotations

import json

import pytest

from trnconsole.core.alerts import AlertTracker
from trnconsole.core.metrics import RunMetrics


def step_line(step: int, loss: float | str, sps: float = 100.0) -> str:
    return json.dumps({"t": 1.0 + step, "kind": "step", "step": step, "loss": loss, "samples_per_s": sps})


def compile_line(step: int, count: int, after_warmup: bool) -> str:
    return json.dumps(
        {
            "t": 1.0,
            "kind": "compile",
            "step": step,
            "phase": "train",
            "count": count,
            "seconds": 1.0,
            "new": 1,
            "after_warmup": after_warmup,
        }
    )


def feed(metrics: RunMetrics, tracker: AlertTracker, lines: list[str]) -> list[str]:
    metrics.feed_jsonl_lines(lines)
    return [a.kind for a in tracker.check_metrics(metrics)]


def test_nan_loss_is_an_error_raised_once():
    metrics, tracker = RunMetrics(), AlertTracker()
    assert feed(metrics, tracker, [step_line(1, 0.7), step_line(2, 0.6)]) == []
    assert feed(metrics, tracker, [step_line(3, "nan")]) == ["nan_loss"]
    assert feed(metrics, tracker, [step_line(4, "nan"), step_line(5, "inf")]) == []
    (alert,) = tracker.raised
    assert alert.severity == "error" and alert.step == 3 and "nan" in alert.message


def test_a_compilation_after_warm_up_is_a_recompile_warning():
    metrics, tracker = RunMetrics(), AlertTracker()
    assert feed(metrics, tracker, [compile_line(1, 3, False), step_line(5, 0.5)]) == []
    assert feed(metrics, tracker, [compile_line(40, 4, True)]) == ["recompile"]
    assert feed(metrics, tracker, [step_line(41, 0.4)]) == []
    assert feed(metrics, tracker, [compile_line(60, 5, True)]) == ["recompile"]
    assert "2 graph compilation(s) after warm-up" in tracker.raised[-1].message


def test_a_throughput_drop_against_the_recent_median_is_raised_again_only_after_recovery():
    metrics, tracker = RunMetrics(), AlertTracker()
    assert feed(metrics, tracker, [step_line(i, 0.5, 100.0) for i in range(1, 12)]) == []
    assert feed(metrics, tracker, [step_line(12, 0.5, 30.0)]) == ["throughput_drop"]
    assert feed(metrics, tracker, [step_line(13, 0.5, 20.0)]) == []
    assert feed(metrics, tracker, [step_line(14, 0.5, 100.0)]) == []
    assert feed(metrics, tracker, [step_line(15, 0.5, 10.0)]) == ["throughput_drop"]


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("2026-Nov-22 ERROR TDRV:dmem_alloc_internal Failed to alloc DEVICE memory: 1048576", "device_oom"),
        ("TDRV:log_dev_mem Failed to allocate 172.000MB (usage: tensors) on ND 0:NC 0", "device_oom"),
        (
            "bootstrap.cc:89 CCOM WARN Timeout waiting for RX (waited 120 sec) - retrying",
            "collective_timeout",
        ),
        ("ERROR: neuronx-cc failed with -9", "compiler_killed"),
        ("Killed", "oom_killed"),
        ("  exitcode  : -9 (pid: 4242)", "oom_killed"),
        ("nrt_allocate_neuron_cores: NeuronCore(s) not available - Requested:1 Available:0", "cores_busy"),
    ],
)
def test_neuron_failure_lines_become_alerts(line, kind):
    tracker = AlertTracker()
    alerts = tracker.check_log(["step 1 ok", line, line], step=7)
    assert [a.kind for a in alerts] == [kind]
    assert alerts[0].severity == "error" and alerts[0].step == 7 and line.strip()[:40] in alerts[0].message


def test_ordinary_log_lines_raise_nothing():
    tracker = AlertTracker()
    lines = ["LOG Sun Nov 22 - (0, 1) step_loss : 0.5", "Killed the old cache entry", "loading weights", ""]
    assert tracker.check_log(lines) == []


def test_a_hang_needs_no_progress_and_idle_devices_and_processes_for_n_periods():
    tracker = AlertTracker()
    assert tracker.check_activity(5, 90.0, 150.0, periods=3) == []
    for _ in range(3):  # no step, but the tree is busy (say, a compiler): not a hang
        assert tracker.check_activity(5, 0.0, 180.0, periods=3) == []
    assert tracker.check_activity(5, 0.0, 0.5, periods=3) == []
    assert tracker.check_activity(5, 0.2, 0.5, periods=3) == []
    (alert,) = tracker.check_activity(5, 0.0, 0.3, periods=3)
    assert alert.kind == "hang" and alert.severity == "error" and alert.step == 5
    assert tracker.check_activity(5, 0.0, 0.3, periods=3) == []  # raised once
    assert tracker.check_activity(6, 50.0, 100.0, periods=3) == []  # moved on
    for _ in range(2):
        assert tracker.check_activity(6, None, 0.1, periods=3) == []
    assert [a.kind for a in tracker.check_activity(6, None, 0.1, periods=3)] == ["hang"]


def test_no_hang_is_judged_without_any_activity_source():
    tracker = AlertTracker()
    assert all(tracker.check_activity(3, None, None, periods=2) == [] for _ in range(10))


def test_loaded_models_growing_after_warm_up_is_a_recompile():
    tracker = AlertTracker()
    assert tracker.check_loaded_models(1, step=1) == []  # warm-up compiles are expected
    assert tracker.check_loaded_models(2, step=2) == []
    assert tracker.check_loaded_models(2, step=3) == []
    assert tracker.check_loaded_models(2, step=10) == []
    (alert,) = tracker.check_loaded_models(3, step=11)
    assert alert.kind == "recompile" and "1 since warm-up (3 loaded)" in alert.message
    assert tracker.check_loaded_models(3, step=12) == []
    assert "2 since warm-up" in tracker.check_loaded_models(4, step=20)[0].message
