"""A run's live state and summary, built from what the runners really write."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parsers import jsonl_batches, log_batches

from trn_harness import outputs
from trnconsole.core.events import Event
from trnconsole.core.metrics import RunMetrics
from trnconsole.core.parsers import JsonlParser, LogLineParser, MetricRegex
from trnconsole.core.tail import FileTail

STARTED = dict(
    runner="bert",
    device="cpu",
    platform="cpu",
    world_size=2,
    precision="bf16",
    model_size="tiny",
    model_path=None,
    params=4_385_920,
    global_batch=16,
    total_steps=40,
    steps_per_epoch=20,
    flops_per_sample=3.4e9,
    peak_flops_per_device=1.9e14,
    peak_flops_source="table",
    tokens_per_sample=128,
    resumed_from=None,
    eval_metric="accuracy",
)
# (step, samples_per_s): the first window includes compilation, so it is slow.
STEPS = [(10, 20.0), (20, 100.0), (30, 110.0), (40, 90.0)]


def step_fields(step: int, sps: float) -> dict:
    """The fields Trainer._report_now passes to RunOutputs.event and .log_line."""
    return {
        "loss": 1.0 / step,
        "lr": 4e-4 * (1 - step / 40),
        "samples_per_s": sps,
        "step_time_s": 16 / sps,
        "tokens_per_s": sps * 128,
        "mfu": 3.4e9 * sps / (1.9e14 * 2),
        "grad_norm": None if step == 10 else 1.5,
    }


@pytest.fixture
def writer(tmp_path: Path) -> outputs.RunOutputs:
    with mock.patch.object(outputs, "_open_tensorboard", return_value=None):
        return outputs.RunOutputs(tmp_path / "run", enabled=True)


def write_run(writer: outputs.RunOutputs) -> tuple[Path, str]:
    """A whole run's metrics.jsonl, in the order the training loop writes it; returns it and its stdout."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        writer.event("status", 0, state="started", **STARTED)
        writer.event("compile", 0, phase="train", count=1, seconds=30.0, new=1, after_warmup=False)
        writer.event("compile", 1, phase="train", count=2, seconds=55.5, new=1, after_warmup=False)
        for step, sps in STEPS:
            fields = step_fields(step, sps)
            writer.event("step", step, epoch=step // 20, **fields)
            writer.log_line(step // 20, step, fields)
            if step == 20:
                writer.event("compile", 20, phase="eval", count=3, seconds=70.0, new=1, after_warmup=False)
                writer.event("eval", 20, epoch=1, loss=0.69, accuracy=0.55)
                writer.log_line(1, 20, {"eval_loss": 0.69, "eval_accuracy": 0.55})
                writer.event("checkpoint", 20, path="/runs/x/checkpoints/step-20.pt")
            if step == 30:  # a recompilation after warm-up: what the alert is for
                writer.event("compile", 30, phase="train", count=5, seconds=80.25, new=2, after_warmup=True)
        writer.event("eval", 40, epoch=2, loss=0.61, accuracy=0.625)
        writer.event("status", 40, state="completed", wall_time_s=12.5)
    writer.close()
    return writer.output_dir / "metrics.jsonl", stdout.getvalue()


def test_summary_of_a_real_metrics_jsonl(writer: outputs.RunOutputs) -> None:
    path, _ = write_run(writer)
    with path.open("a") as f:
        f.write('{"t": 17000\n')  # a line torn by a crash, then the run resumed
    records = [json.loads(line) for line in path.read_text().splitlines()[:-1]]

    metrics = RunMetrics()
    metrics.feed_jsonl_lines(FileTail(path).read_lines())

    steady = [sps for _, sps in STEPS[1:]]
    assert metrics.summary() == {
        "step": 40,
        "total_steps": 40,
        "final_loss": 1.0 / 40,
        "eval": {"loss": 0.61, "accuracy": 0.625},
        "eval_metric": "accuracy",
        "avg_samples_per_s": pytest.approx(sum(steady) / 3),
        "peak_samples_per_s": 110.0,
        "avg_tokens_per_s": pytest.approx(sum(steady) / 3 * 128),
        "mfu": pytest.approx(3.4e9 * (sum(steady) / 3) / (1.9e14 * 2)),
        "compile_count": 5,
        "compile_seconds": 80.25,
        "compiles_after_warmup": 2,
        "wall_time_s": pytest.approx(records[-1]["t"] - records[0]["t"]),
        "state": "completed",
        "error": None,
        "malformed_lines": 1,
        "step_source": "runner",
        "throughput": {"value": pytest.approx(sum(steady) / 3), "unit": "samples/s"},
        "reported": {},
    }
    assert metrics.started_info["runner"] == "bert"
    assert metrics.started_info["params"] == 4_385_920
    assert metrics.checkpoints == [(20, "/runs/x/checkpoints/step-20.pt")]
    assert metrics.eta_seconds() == 0.0


def test_series_of_a_real_metrics_jsonl(writer: outputs.RunOutputs) -> None:
    path, _ = write_run(writer)
    metrics = RunMetrics()
    metrics.feed_jsonl_lines(path.read_text().splitlines())
    series = metrics.series
    for name in ("loss", "lr", "samples_per_s", "step_time_s", "tokens_per_s", "mfu", "grad_norm", "epoch"):
        assert name in series
    assert series["loss"].points()[0] == [10, 20, 30, 40]
    assert series["grad_norm"].points()[0] == [20, 30, 40]  # None is not written
    assert series["eval_accuracy"].points()[3] == [0.55, 0.625]
    assert series["compile_count"].last == 5
    assert "total_steps" not in series  # status values are not series


def test_the_stdout_log_lines_carry_the_same_step_metrics(writer: outputs.RunOutputs) -> None:
    _, stdout = write_run(writer)
    metrics = RunMetrics()
    metrics.feed_log_lines(stdout.splitlines())
    summary = metrics.summary()
    assert summary["step"] == 40
    assert summary["final_loss"] == pytest.approx(1.0 / 40, abs=5e-5)
    assert summary["avg_samples_per_s"] == pytest.approx(100.0, abs=1e-3)
    assert summary["eval"] == {"loss": 0.69, "accuracy": 0.55}
    assert metrics.series["eval_loss"].last == 0.69
    assert summary["total_steps"] is None and summary["state"] is None


def test_feeding_events_or_their_lines_gives_the_same_summary(writer: outputs.RunOutputs) -> None:
    path, _ = write_run(writer)
    lines = path.read_text().splitlines()
    from_lines, from_events = RunMetrics(), RunMetrics()
    from_lines.feed_jsonl_lines(lines)
    parser = JsonlParser()
    for line in lines:
        event = parser.feed(line)
        assert event is not None
        from_events.feed([event])
    assert from_lines.summary() == from_events.summary()


def test_a_run_with_no_events_is_all_unknown() -> None:
    assert RunMetrics().summary() == {
        "step": None,
        "total_steps": None,
        "final_loss": None,
        "eval": {},
        "eval_metric": None,
        "avg_samples_per_s": None,
        "peak_samples_per_s": None,
        "avg_tokens_per_s": None,
        "mfu": None,
        "compile_count": None,
        "compile_seconds": None,
        "compiles_after_warmup": None,
        "wall_time_s": None,
        "state": None,
        "error": None,
        "malformed_lines": 0,
        "step_source": None,
        "throughput": None,
        "reported": {},
    }
    assert RunMetrics().eta_seconds() is None


def test_a_single_step_is_its_own_average() -> None:
    metrics = RunMetrics()
    metrics.feed([Event("step", 1, {"samples_per_s": 42.0, "mfu": 0.25})])
    summary = metrics.summary()
    assert (summary["avg_samples_per_s"], summary["peak_samples_per_s"], summary["mfu"]) == (42.0, 42.0, 0.25)


def test_a_failed_run_keeps_its_state_and_error() -> None:
    metrics = RunMetrics()
    metrics.feed_jsonl_lines(
        [
            '{"t": 1.0, "kind": "status", "step": 0, "state": "started", "total_steps": 100}',
            '{"t": 2.0, "kind": "step", "step": 5, "loss": "nan"}',
            '{"t": 3.5, "kind": "status", "step": 5, "state": "failed", "error": "RuntimeError: device OOM"}',
        ]
    )
    summary = metrics.summary()
    assert (summary["state"], summary["error"]) == ("failed", "RuntimeError: device OOM")
    assert summary["final_loss"] != summary["final_loss"]  # NaN, the true last value
    assert summary["wall_time_s"] == 2.5


def test_compiles_after_warmup_count_the_new_compiles_flagged_so() -> None:
    metrics = RunMetrics()
    metrics.feed(
        [
            Event("compile", 0, {"count": 2, "seconds": 40.0}, None, {"after_warmup": False}),
            Event("compile", 9, {"count": 3, "seconds": 45.0}, None, {"after_warmup": True}),
            Event("compile", 12, {"count": 6, "seconds": 60.0, "new": 3}, None, {"after_warmup": True}),
        ]
    )
    assert (metrics.compile_count, metrics.compile_seconds, metrics.compiles_after_warmup) == (6, 60.0, 4)


def test_eta_is_steps_left_times_the_recent_step_time() -> None:
    metrics = RunMetrics()
    metrics.feed([Event("status", 0, {"total_steps": 100}, None, {"state": "started"})])
    assert metrics.eta_seconds() is None  # no step time yet
    metrics.feed([Event("step", s, {"step_time_s": 9.0 if s < 10 else 0.5}) for s in range(1, 61)])
    assert metrics.eta_seconds() == pytest.approx(40 * 0.5)


def test_hugging_face_stdout_gives_steps_evals_and_the_reported_summary() -> None:
    metrics = RunMetrics([MetricRegex.from_spec(r"samples_per_s=([\d.]+) it/s")])
    metrics.feed_log_lines(
        [
            "{'loss': 0.9, 'grad_norm': 3.0, 'learning_rate': 5e-05, 'epoch': 0.5}",
            " 50%|#####     | 5/10 [00:05<00:05,  4.00 it/s]",
            "{'loss': 0.7, 'grad_norm': 2.0, 'learning_rate': 2.5e-05, 'epoch': 1.0}",
            "{'eval_loss': 0.8, 'eval_accuracy': 0.7, 'eval_runtime': 1.0, 'epoch': 1.0}",
            "{'train_runtime': 10.0, 'train_samples_per_second': 8.0, 'train_loss': 0.8, 'epoch': 1.0}",
            "{'loss': oops}",
        ]
    )
    summary = metrics.summary()
    assert (summary["step"], summary["final_loss"]) == (2, 0.7)
    assert summary["eval"] == {"loss": 0.8, "accuracy": 0.7, "runtime_s": 1.0}
    assert metrics.series["samples_per_s"].points()[0] == [1]
    assert metrics.reported_summary["runtime_s"] == 10.0
    assert summary["malformed_lines"] == 1


def test_a_resumed_run_starting_again_clears_the_earlier_failure() -> None:
    metrics = RunMetrics()
    metrics.feed(
        [
            Event("status", 5, {}, None, {"state": "failed", "error": "collective timeout"}),
            Event("status", 5, {"total_steps": 50}, None, {"state": "started", "resumed_from": "ck"}),
        ]
    )
    assert (metrics.state, metrics.error, metrics.total_steps) == ("started", None, 50)


# ---- the batch paths against the event path ----


def run_state(metrics: RunMetrics) -> str:
    """Everything a run's metrics hold but the malformed count and where the steps came from (lines or
    events), as text that tells NaN, ints and floats apart: the summary and the state of every series, down
    to its buckets and the floats its mean sums."""
    series = metrics.series
    names = series.names()  # folds what is queued
    summary = metrics.summary()
    del summary["malformed_lines"], summary["step_source"]
    return repr(
        [
            summary,
            metrics.eta_seconds(),
            metrics.checkpoints,
            sorted(metrics.started_info.items()),
            metrics.reported_summary,
            names,
            [sorted(vars(series[name]).items()) for name in names],
        ]
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=jsonl_batches(), capacity=st.sampled_from([2, 3, 16, 2048]))
def test_metrics_jsonl_lines_in_batches_match_their_events_fed_one_batch_at_a_time(
    batches: list[list[str]], capacity: int
) -> None:
    from_lines, from_events = RunMetrics(capacity=capacity), RunMetrics(capacity=capacity)
    parser = JsonlParser()
    for batch in batches:
        from_lines.feed_jsonl_lines(batch)
        from_events.feed(parser.feed_lines(batch))
    assert run_state(from_lines) == run_state(from_events)
    assert from_lines.malformed == parser.malformed


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=log_batches(), capacity=st.sampled_from([2, 3, 16, 2048]))
def test_metrics_log_lines_in_batches_match_their_events_fed_one_batch_at_a_time(
    batches: list[list[str]], capacity: int
) -> None:
    from_lines, from_events = RunMetrics(capacity=capacity), RunMetrics(capacity=capacity)
    parser = LogLineParser()
    for batch in batches:
        from_lines.feed_log_lines(batch)
        from_events.feed(parser.feed_lines(batch))
    assert run_state(from_lines) == run_state(from_events)
    assert from_lines.malformed == parser.malformed


def test_a_long_run_of_runner_lines_matches_its_events(writer: outputs.RunOutputs) -> None:
    """Thousands of steps: the series fold many times and their buckets merge, on both paths alike."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        writer.event("status", 0, state="started", **STARTED)
        for step in range(1, 5000):
            fields = step_fields(step % 40 + 1, 100.0 + step % 7)
            writer.event("step", step, epoch=step // 1000, **fields)
            writer.log_line(step // 1000, step, fields)
            if step % 700 == 0:
                writer.event("eval", step, loss=0.5, accuracy=0.75)
                writer.event("checkpoint", step, path=f"/ck/{step}")
    writer.close()
    jsonl = (writer.output_dir / "metrics.jsonl").read_text().splitlines()
    log = stdout.getvalue().splitlines()
    for feed, lines, parser in (
        ("feed_jsonl_lines", jsonl, JsonlParser()),
        ("feed_log_lines", log, LogLineParser()),
    ):
        from_lines, from_events = RunMetrics(capacity=64), RunMetrics(capacity=64)
        for at in range(0, len(lines), 1500):
            getattr(from_lines, feed)(lines[at : at + 1500])
            from_events.feed(parser.feed_lines(lines[at : at + 1500]))
        assert run_state(from_lines) == run_state(from_events)
        assert from_lines.series["loss"].count == 4999
