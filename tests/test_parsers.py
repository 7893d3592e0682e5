"""What the parsers make of metrics.jsonl lines and of any training script's stdout."""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from conftest import needs_c_compiler
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trn_harness import outputs
from trnconsole.core import parsers
from trnconsole.core.errors import UsageError
from trnconsole.core.events import Event
from trnconsole.core.metrics import RunMetrics
from trnconsole.core.parsers import JsonlParser, LogLineParser, MetricRegex, StepColumns

# The `reader` fixture patches the module for all of a test's examples, as it should.
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ROUND_TRIP = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LOG_STEP = (
    "LOG Sun Nov 22 07:42:44 2026 - (0, 10) step_loss : 0.8339 learning_rate : 3.33e-04 "
    "throughput : 56.3125 step_time_s : 0.2000 tokens_per_s : 7208.0000 mfu : 0.1235 grad_norm : 1.2346"
)


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.fixture(params=["compiled", "python"])
def reader(request: pytest.FixtureRequest) -> Iterator[str]:
    """The batch paths with the compiled reader of step lines (`_linescan`), and as an install without a
    C compiler has them."""
    if request.param == "compiled":
        if parsers._linescan is None:
            pytest.skip("installed without the compiled reader")
        yield request.param
        return
    with mock.patch.object(parsers, "_linescan", None):
        yield request.param


@needs_c_compiler
def test_the_compiled_reader_of_step_lines_is_built() -> None:
    # scripts/test.sh installs the project with the compiler this machine has: the fuzz tests below would
    # otherwise only compare the Python paths with each other.
    assert parsers._linescan is not None


# ---- metrics.jsonl ----


def test_jsonl_numbers_go_to_values_and_everything_else_to_info() -> None:
    parser = JsonlParser()
    event = parser.feed(
        '{"t": 1700000000.5, "kind": "compile", "step": 3, "phase": "train", "count": 4, '
        '"seconds": 12.5, "new": 1, "after_warmup": true}'
    )
    assert event == Event(
        "compile",
        3,
        {"count": 4, "seconds": 12.5, "new": 1},
        1700000000.5,
        {"phase": "train", "after_warmup": True},
    )


def test_jsonl_bools_are_info_not_numbers() -> None:
    event = JsonlParser().feed('{"t": 1.0, "kind": "step", "step": 1, "loss": 0.5, "synthetic": false}')
    assert event is not None
    assert event.values == {"loss": 0.5}
    assert event.info == {"synthetic": False}


def test_jsonl_nonfinite_float_strings_become_float_values() -> None:
    event = JsonlParser().feed(
        '{"t": 1.0, "kind": "step", "step": 7, "loss": "nan", "grad_norm": "inf", "mfu": "-inf", "x": "n/a"}'
    )
    assert event is not None
    assert math.isnan(event.values["loss"])
    assert event.values["grad_norm"] == math.inf
    assert event.values["mfu"] == -math.inf
    assert event.info == {"x": "n/a"}


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        '{"t": 1.0, "kind": "step", "step": 1, "loss": 0.5',  # cut off mid-write
        '["kind", "step"]',
        '{"t": 1.0, "step": 1, "loss": 0.5}',  # no kind
        '{"kind": 3, "step": 1}',
        '{"kind": "step"} trailing',
    ],
)
def test_jsonl_malformed_line_is_counted_and_skipped(line: str) -> None:
    parser = JsonlParser()
    assert parser.feed(line) is None
    assert (parser.lines, parser.malformed) == (1, 1)
    assert parser.feed('{"kind": "step", "step": 2, "loss": 1.0}') is not None
    assert parser.malformed == 1


def test_jsonl_blank_lines_are_ignored_not_malformed() -> None:
    parser = JsonlParser()
    assert parser.feed_lines(["", "   ", "\n"]) == []
    assert (parser.lines, parser.malformed) == (3, 0)


def test_jsonl_line_with_surrounding_whitespace_parses() -> None:
    event = JsonlParser().feed('  {"kind": "step", "step": 1, "loss": 0.25}\n')
    assert event == Event("step", 1, {"loss": 0.25})


def test_jsonl_missing_step_and_time_are_none() -> None:
    assert JsonlParser().feed('{"kind": "status", "state": "started"}') == Event(
        "status", None, {}, None, {"state": "started"}
    )


def test_jsonl_integral_float_step_is_an_int_and_a_text_step_is_kept_in_info() -> None:
    parser = JsonlParser()
    assert parser.feed('{"kind": "step", "step": 5.0}') == Event("step", 5)
    assert parser.feed('{"kind": "step", "step": "five"}') == Event("step", None, {}, None, {"step": "five"})


def test_jsonl_batch_and_single_feeding_agree() -> None:
    lines = ['{"kind": "step", "step": 1, "loss": 1.5}', "junk", '{"kind": "eval", "step": 1, "loss": 2}']
    single = JsonlParser()
    batch = JsonlParser()
    assert [e for e in map(single.feed, lines) if e] == batch.feed_lines(lines)
    assert (single.lines, single.malformed) == (batch.lines, batch.malformed) == (3, 1)


# ---- LOG lines ----


def test_log_line_in_the_neuron_sample_format_is_a_step_event_with_canonical_names() -> None:
    [event] = LogLineParser().feed(LOG_STEP)
    assert event.kind == "step"
    assert event.step == 10
    assert event.values == {
        "loss": 0.8339,
        "lr": 3.33e-04,
        "samples_per_s": 56.3125,
        "step_time_s": 0.2,
        "tokens_per_s": 7208.0,
        "mfu": 0.1235,
        "grad_norm": 1.2346,
        "epoch": 0,
    }


def test_log_line_with_only_eval_fields_is_an_eval_event() -> None:
    [event] = LogLineParser().feed(
        "LOG Sun Nov 22 07:43:01 2026 - (1, 20) eval_loss : 0.6931 eval_accuracy : 0.5"
    )
    assert (event.kind, event.step) == ("eval", 20)
    assert event.values == {"loss": 0.6931, "accuracy": 0.5, "epoch": 1}


def test_log_line_mixing_eval_and_train_fields_is_a_step_event_keeping_names() -> None:
    [event] = LogLineParser().feed("LOG t - (0, 3) step_loss : 1.0 eval_loss : 2.0")
    assert event.kind == "step"
    assert event.values == {"loss": 1.0, "eval_loss": 2.0, "epoch": 0}


@pytest.mark.parametrize(
    "prefix",
    ["[default0]:", "[1,0]<stdout>:", "2026-11-22 07:42:44,123 INFO ", "rank0: ", "\t"],
)
def test_log_line_after_a_rank_tag_or_timestamp_parses(prefix: str) -> None:
    [event] = LogLineParser().feed(prefix + LOG_STEP)
    assert (event.kind, event.step, event.values["loss"]) == ("step", 10, 0.8339)


def test_log_line_with_irregular_spacing_commas_and_nan_parses() -> None:
    [event] = LogLineParser().feed(
        "LOG Sun Nov 22 07:42:44 2026 - ( 2 ,  31 )  step_loss: nan, learning_rate :4.0e-04  throughput :  12"
    )
    assert event.step == 31
    assert math.isnan(event.values["loss"])
    assert (event.values["lr"], event.values["samples_per_s"], event.values["epoch"]) == (4e-4, 12.0, 2)


def test_log_line_coloured_with_ansi_escapes_parses() -> None:
    [event] = LogLineParser().feed("\x1b[1m\x1b[32m" + LOG_STEP + "\x1b[0m")
    assert event.values["grad_norm"] == 1.2346


def test_progress_bar_carriage_returns_do_not_hide_a_log_line() -> None:
    parser = LogLineParser()
    [event] = parser.feed(" 40%|####      | 4/10 [00:01<00:02]\r 50%|#####     | 5/10\r" + LOG_STEP + "\r\n")
    assert event.step == 10
    assert (parser.lines, parser.malformed, parser.events) == (1, 0, 1)


@pytest.mark.parametrize(
    "line",
    [
        "epoch 0 done",
        "CATALOG loaded",
        "LOGGING to /tmp/x",
        "LOG: starting training",
        "2026-11-22 INFO train.py:42 loss went down",
        "",
        "{",
        "config = {'model': 'bert', 'layers': 12}",
        "{'a': 1, 'b': 2.0}",
    ],
)
def test_plain_text_makes_no_event_and_is_not_malformed(line: str) -> None:
    parser = LogLineParser()
    assert parser.feed(line) == []
    assert (parser.lines, parser.malformed, parser.events) == (1, 0, 0)


@pytest.mark.parametrize(
    "line", ["LOG Sun Nov 22 07:42:44 2026 - (0, 10)", "LOG without a step tuple", "LOG x - (0, 1) a : b"]
)
def test_log_line_without_a_step_or_fields_is_malformed(line: str) -> None:
    parser = LogLineParser()
    assert parser.feed(line) == []
    assert parser.malformed == 1


def test_log_line_sets_the_current_step() -> None:
    parser = LogLineParser()
    parser.feed(LOG_STEP)
    assert parser.step == 10


# ---- Hugging Face Trainer dicts ----


def test_hf_step_dicts_are_step_events_numbered_by_a_running_count() -> None:
    parser = LogLineParser()
    first = parser.feed("{'loss': 0.6931, 'grad_norm': 1.25, 'learning_rate': 5e-05, 'epoch': 0.1}")
    second = parser.feed("{'loss': 0.5, 'grad_norm': 1.0, 'learning_rate': 4e-05, 'epoch': 0.2}")
    assert first == [Event("step", 1, {"loss": 0.6931, "grad_norm": 1.25, "lr": 5e-05, "epoch": 0.1})]
    assert [e.step for e in second] == [2]


def test_hf_step_key_sets_the_step_and_the_count_goes_on_from_it() -> None:
    parser = LogLineParser()
    assert [e.step for e in parser.feed("{'loss': 0.5, 'step': 500}")] == [500]
    assert [e.step for e in parser.feed("{'loss': 0.4}")] == [501]


def test_hf_eval_dict_is_an_eval_event_without_the_prefix_at_the_current_step() -> None:
    parser = LogLineParser()
    parser.feed(LOG_STEP)
    [event] = parser.feed(
        "{'eval_loss': 0.41, 'eval_accuracy': 0.83, 'eval_runtime': 2.5, "
        "'eval_samples_per_second': 400.0, 'eval_steps_per_second': 50.0, 'epoch': 1.0}"
    )
    assert (event.kind, event.step) == ("eval", 10)
    assert event.values == {
        "loss": 0.41,
        "accuracy": 0.83,
        "runtime_s": 2.5,
        "samples_per_s": 400.0,
        "steps_per_s": 50.0,
        "epoch": 1.0,
    }


def test_hf_train_summary_dict_is_a_summary_event() -> None:
    [event] = LogLineParser().feed(
        "{'train_runtime': 120.5, 'train_samples_per_second': 33.2, 'train_steps_per_second': 4.1, "
        "'total_flos': 1.5e+15, 'train_loss': 0.45, 'epoch': 3.0}"
    )
    assert event.kind == "summary"
    assert event.values == {
        "runtime_s": 120.5,
        "samples_per_s": 33.2,
        "steps_per_s": 4.1,
        "total_flos": 1.5e15,
        "loss": 0.45,
        "epoch": 3.0,
    }


def test_hf_nan_bare_or_quoted_and_tensor_reprs_are_numbers() -> None:
    [event] = LogLineParser().feed(
        "{'loss': nan, 'grad_norm': tensor(2.5, device='xla:0'), 'learning_rate': 'nan', 'epoch': 1}"
    )
    assert math.isnan(event.values["loss"]) and math.isnan(event.values["lr"])
    assert (event.values["grad_norm"], event.values["epoch"]) == (2.5, 1.0)


def test_hf_numpy_scalar_reprs_are_numbers() -> None:
    [event] = LogLineParser().feed(
        "{'eval_loss': np.float64(0.41), 'eval_accuracy': np.float32(0.8), 'epoch': 1.0}"
    )
    assert event.values == {"loss": 0.41, "accuracy": 0.8, "epoch": 1.0}


def test_hf_dict_after_a_rank_tag_and_in_json_quotes_parses() -> None:
    [event] = LogLineParser().feed('[default0]:{"loss": 0.3, "learning_rate": 1e-4}')
    assert event.values == {"loss": 0.3, "lr": 1e-4}


@pytest.mark.parametrize("line", ["{'loss': 0.5, 'per_layer': [1, 2]}", "{'loss': oops}"])
def test_hf_like_dict_that_cannot_be_read_is_malformed(line: str) -> None:
    parser = LogLineParser()
    assert parser.feed(line) == []
    assert parser.malformed == 1


# ---- user regexes ----


@pytest.mark.parametrize(
    "line, step, values",
    [
        ("epoch 0 step 5: loss 0.7086 lr 8.50e-03", 5, {"loss": 0.7086, "lr": 8.5e-3}),
        (
            "Step 7/30 | loss=2.31 | grad_norm: 1.2 | acc 0.5",
            7,
            {"loss": 2.31, "grad_norm": 1.2, "accuracy": 0.5},
        ),
        ("[rank 0] step=12, Loss: nan, learning rate: 1e-4", 12, {"loss": math.nan, "lr": 1e-4}),
    ],
)
def test_a_line_in_words_with_a_step_and_a_loss_is_a_step_event(line: str, step: int, values: dict) -> None:
    parser = LogLineParser()
    events = [e for e in parser.feed(line) if e.kind == "step"]
    assert len(events) == 1 and events[0].step == step
    assert events[0].values.keys() == values.keys()
    assert all(same(events[0].values[k], v) for k, v in values.items())
    assert parser.step == step and parser.step_source == "log"


@pytest.mark.parametrize(
    "line", ["loss went down at step 3", "training on 2 process(es), 30 steps", "step 4 done", "lossy step 3"]
)
def test_words_without_a_step_and_a_loss_value_make_no_event(line: str) -> None:
    parser = LogLineParser()
    assert parser.feed(line) == []
    assert parser.malformed == 0


def test_the_mnist_samples_closing_lines_are_the_runs_own_final_figures() -> None:
    metrics = RunMetrics()
    metrics.feed_log_lines(["Train throughput (iter/sec): 123.45", "Final loss is 0.1234"])
    assert metrics.summary()["reported"] == {"it_per_s": 123.45, "loss": 0.1234}


def test_user_metric_regex_value_is_a_step_event_at_the_current_step() -> None:
    parser = LogLineParser([MetricRegex.from_spec("throughput=([0-9.]+) samples/s")])
    assert parser.feed("warming up: 12.5 samples/s") == [Event("step", None, {"throughput": 12.5})]
    parser.feed(LOG_STEP)
    assert parser.feed("now at 80.25 samples/s") == [Event("step", 10, {"throughput": 80.25})]


def test_user_metrics_matching_one_line_make_one_event() -> None:
    parser = LogLineParser(
        [MetricRegex.from_spec(r"loss=loss=([\d.]+)"), MetricRegex.from_spec(r"acc=acc=([\d.]+)")]
    )
    assert parser.feed("step 3 loss=0.5 acc=0.75") == [Event("step", None, {"loss": 0.5, "acc": 0.75})]
    assert parser.feed("step 4 loss=0.25") == [Event("step", None, {"loss": 0.25})]


def test_user_metric_value_that_is_not_a_number_is_malformed() -> None:
    parser = LogLineParser([MetricRegex.from_spec(r"tput=tput (\S+)")])
    assert parser.feed("tput fast") == []
    assert parser.malformed == 1


def test_metric_spec_splits_at_the_first_equals_sign() -> None:
    metric = MetricRegex.from_spec("ratio=ratio=(\\d+)")
    assert metric.name == "ratio"
    assert metric.pattern.pattern == "ratio=(\\d+)"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("throughput", "NAME=REGEX"),
        ("=([0-9.]+)", "NAME=REGEX"),
        ("throughput=([0-9.]+", "invalid regular expression"),
        ("throughput=[0-9.]+ samples/s", "capture group"),
    ],
)
def test_bad_metric_spec_is_a_usage_error_naming_the_flag_and_the_fix(spec: str, says: str) -> None:
    with pytest.raises(UsageError, match="--metric") as raised:
        MetricRegex.from_spec(spec)
    assert says in str(raised.value)


# ---- never raises ----


@FUZZ
@given(st.lists(st.text(max_size=120), max_size=20))
def test_arbitrary_text_never_raises_and_counts_add_up(lines: list[str]) -> None:
    jsonl = JsonlParser()
    events = jsonl.feed_lines(lines)
    blank = sum(1 for line in lines if not line.strip())
    assert jsonl.lines == len(lines)
    assert len(events) + jsonl.malformed + blank == len(lines)

    log = LogLineParser([MetricRegex.from_spec(r"x=x=(\S+)")])
    events = [e for line in lines for e in log.feed(line)]
    assert log.lines == len(lines)
    assert 0 <= log.malformed <= len(lines)
    assert log.events == len(events)


metric_tokens = st.sampled_from(
    ["LOG", "LOG ", " - (", "(0, 3)", ") ", "step_loss", " : ", ":", "nan", "1e-3", "{", "}", "'loss'",
     "'eval_loss'", ": ", ", ", "tensor(", "\r", "\x1b[0m", "[default0]:", "'", '"', "x=", "1.5", " ",
     "'0.6669'", "%|", "| ", "35/60", "3.5k/60k", "35it", " [", "00:07", "<", "1:02:03", "?", "9.06it/s",
     "2.5s/it", "infit/s", "loss=0.12", "]", "Epoch 1: ", "Evaluating: ", "step 3", "Step ", "/",
     "loss 0.5", " lr ", "Final loss is ", "Train throughput (iter/sec): ", "perf ", "seq/sec", " • ",
     "Epoch 2/9 ", "━━╺", "0:00:03", "-:--:--", "train_loss: ", "val_loss:", "\n"]
)  # fmt: skip


@FUZZ
@given(st.lists(st.lists(metric_tokens, max_size=16).map("".join), max_size=10))
def test_text_built_from_metric_syntax_never_raises(lines: list[str]) -> None:
    log = LogLineParser([MetricRegex.from_spec(r"x=x=(\S+)")])
    events = log.feed_lines(lines)
    assert log.events == len(events)
    assert 0 <= log.malformed <= log.lines == len(lines)
    jsonl = JsonlParser()
    jsonl.feed_lines(lines)
    assert jsonl.malformed <= len(lines)


# ---- round trips through the runners' own writer ----

reserved = {"t", "kind", "step", "self", "epoch", "step_loss", "learning_rate", "throughput"}
field_names = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True).filter(
    lambda name: name not in reserved and not name.startswith("eval_")
)
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**12), 10**12))


@pytest.fixture(scope="module")
def run_outputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[outputs.RunOutputs]:
    with mock.patch.object(outputs, "_open_tensorboard", return_value=None):
        writer = outputs.RunOutputs(tmp_path_factory.mktemp("run"), enabled=True)
    yield writer
    writer.close()


def printed_log_line(writer: outputs.RunOutputs, epoch: int, step: int, fields: dict) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        writer.log_line(epoch, step, fields)
    return out.getvalue()


@ROUND_TRIP
@given(
    epoch=st.integers(0, 10**6),
    step=st.integers(0, 10**9),
    canonical=st.dictionaries(st.sampled_from(["loss", "lr", "samples_per_s"]), numbers),
    other=st.dictionaries(field_names, st.one_of(numbers, st.none()), max_size=8),
)
def test_runner_log_line_parses_back_to_its_printed_values(
    run_outputs: outputs.RunOutputs, epoch: int, step: int, canonical: dict, other: dict
) -> None:
    fields = {**canonical, **other}
    printed = {k: v for k, v in fields.items() if v is not None}
    if not printed:
        return
    line = printed_log_line(run_outputs, epoch, step, fields)
    parser = LogLineParser()
    [event] = parser.feed(line)
    assert (event.kind, event.step, event.values.pop("epoch")) == ("step", step, epoch)
    assert set(event.values) == set(printed)
    for name, value in printed.items():
        label = outputs.LOG_NAMES.get(name, name)
        text = line.split(f" {label} : ", 1)[1].split()[0]
        assert same(event.values[name], float(text))  # exactly what was printed
        if math.isfinite(value) and abs(value) >= 1e-3 and name != "lr":
            assert abs(event.values[name] - value) <= 5e-5 * max(1.0, abs(value))
    assert parser.malformed == 0


@ROUND_TRIP
@given(
    step=st.integers(0, 10**9),
    values=st.dictionaries(field_names, numbers, max_size=8),
    info=st.dictionaries(
        field_names,
        st.one_of(st.booleans(), st.text(max_size=20).filter(lambda s: s not in ("nan", "inf", "-inf"))),
        max_size=4,
    ),
)
def test_runner_metrics_jsonl_line_parses_back_to_the_same_fields(
    run_outputs: outputs.RunOutputs, step: int, values: dict, info: dict
) -> None:
    info = {k: v for k, v in info.items() if k not in values}
    path = Path(run_outputs.output_dir) / "metrics.jsonl"
    start = path.stat().st_size
    run_outputs.event("step", step, **values, **info)
    with path.open(encoding="utf-8") as f:
        f.seek(start)
        [line] = f.read().splitlines()
    parser = JsonlParser()
    event = parser.feed(line)
    assert event is not None
    assert (event.kind, event.step) == ("step", step)
    assert event.t == json.loads(line)["t"]
    assert set(event.values) == set(values)
    for name, value in values.items():
        assert same(event.values[name], value)
    assert event.info == info


# ---- the batch paths: runs of step lines as columns, the same events as line by line ----

RUNNER_STEP = (
    '{"t": 1763797364.142, "kind": "step", "step": 1, "epoch": 0, "loss": 2.0420211125742527, '
    '"lr": 0.00039992, "samples_per_s": 57.0579544029403, "step_time_s": 0.14020832123606145, '
    '"grad_norm": 1.420571580830845}'
)


def normalized(items: list) -> str:
    """Rows (StepColumns expanded) as text that tells NaN, ints and floats apart and ignores dict order."""
    rows = []
    for item in items:
        for kind, step, values, t, info in item.rows() if isinstance(item, StepColumns) else [item]:
            rows.append((kind, step, sorted(values.items()), t, sorted(info.items())))
    return repr(rows)


def test_runner_step_lines_come_as_one_column_block_between_other_events() -> None:
    lines = [
        '{"t": 1.0, "kind": "status", "step": 0, "state": "started"}',
        *(RUNNER_STEP.replace('"step": 1', f'"step": {step}') for step in range(1, 6)),
        '{"t": 2.0, "kind": "eval", "step": 5, "loss": 0.5}',
        RUNNER_STEP.replace('"step": 1', '"step": 6'),
    ]
    parser = JsonlParser()
    batch = parser.parse_batch(lines)
    assert [type(item).__name__ if isinstance(item, StepColumns) else item[0] for item in batch] == [
        "status",
        "StepColumns",
        "eval",
        "StepColumns",
    ]
    block = batch[1]
    assert list(block.steps) == [1, 2, 3, 4, 5]
    assert block.names == ("epoch", "loss", "lr", "samples_per_s", "step_time_s", "grad_norm")
    assert list(block.columns[0]) == [0] * 5 and list(block.ts) == [1763797364.142] * 5
    assert normalized(batch) == normalized(JsonlParser().parse_rows(lines))
    assert (parser.lines, parser.malformed) == (8, 0)


def test_jsonl_step_lines_with_nan_strings_are_columns_of_floats() -> None:
    [block] = JsonlParser().parse_batch(
        [
            '{"t": 1.0, "kind": "step", "step": 1, "loss": "nan"}',
            '{"t": 2.0, "kind": "step", "step": 2, "loss": 0.5}',
        ]
    )
    assert isinstance(block, StepColumns)
    assert math.isnan(block.columns[0][0]) and block.columns[0][1] == 0.5


@pytest.mark.parametrize(
    "odd",
    [
        '"synthetic": true',  # a bool is info
        '"note": "n/a"',  # so is text
        '"per_layer": [1, 2]',
        '"loss": null',
        '"big": 18446744073709551617',  # beyond 64 bits: json keeps an exact int, orjson would not
    ],
)
def test_jsonl_step_line_with_a_field_that_is_not_a_number_gives_the_same_rows(odd: str) -> None:
    lines = [RUNNER_STEP, RUNNER_STEP.replace('"step": 1', '"step": 2').replace('"lr"', f"{odd}, " + '"lr"')]
    lines.append(RUNNER_STEP.replace('"step": 1', '"step": 3'))
    assert normalized(JsonlParser().parse_batch(lines)) == normalized(JsonlParser().parse_rows(lines))


@pytest.mark.parametrize(
    "line",
    [
        '{"kind": "step", "step": 1, "n": 18446744073709551617}',
        '{"kind": "step", "step": 18446744073709551616, "n": 1}',
        '{"kind": "step", "step": 1, "n": -9223372036854775809, "m": [1, 123456789012345678901234567890]}',
        '{"kind": "step", "step": 1, "n": 1e400}',
        '{"kind": "step", "step": 1, "n": NaN, "m": -Infinity}',
        '{"kind": "step", "step": 1, "n": 1, "n": 2}',
        '{"kind": "step", "step": 1, "s": "\\ud800"}',
        '{"kind": "step", "step": 1, "deep": ' + "[" * 1010 + "]" * 1010 + "}",
        '{"kind": "step", "step": 1, "deep": ' + "[" * 3000 + "]" * 3000 + "}",
        '{"kind": "step", "step": 1, "nested": ' + "[" * 100 + "1" + "]" * 100 + "}",
        ' \t{"kind": "step", "step": 1}\r\n ',
        '\ufeff{"kind": "step"}',
        '{"kind": "step", "s": "\x01"}',
    ],
)
def test_jsonl_lines_read_alike_with_and_without_orjson(reader: str, line: str) -> None:
    fast = JsonlParser()
    got = normalized(fast.parse_batch([line, line]))
    with mock.patch.object(parsers, "_orjson_loads", None):
        slow = JsonlParser()
        want = normalized(slow.parse_rows([line, line]))
    assert got == want
    assert (fast.lines, fast.malformed) == (slow.lines, slow.malformed)


JSONL_FIELDS = ["loss", "lr", "mfu", "epoch", "grad_norm", "samples_per_s"]
ODD_JSONL_LINES = [
    "",
    "   ",
    "not json",
    "[1, 2]",
    "null",
    '{"kind": 3, "step": 1}',
    '{"t": 1.0, "step": 1, "loss": 0.5}',
    '{"t": 1.0, "kind": "step", "step": 1, "loss": 0.5',
    '{"kind": "step"} trailing',
    '{"kind": "step", "step": 1, "a": 1, "a": 2}',
    '{"kind": "step", "step": 1, "loss": 1e400}',
    '{"kind": "step", "step": 1, "loss": 123456789012345678901234567890}',
    '{"kind": "step", "step": 1, "deep": ' + "[" * 1010 + "]" * 1010 + "}",
    '{"t": 1.0, "kind": "step", "step": 1, "loss": NaN}',
    '{"t": 1.0, "kind": "step", "step": 1, "lo\\u0073s": 0.5}',
    '{"t": 1.0, "kind": "step", "step": 01, "loss": 0.5}',
    '{"t": "nan", "kind": "step", "step": 1, "loss": 0.5}',
    '{"t": 1.0, "kind": "step", "step": "nan", "loss": 0.5}',
    '{"t": 1.0, "kind": "step", "step": 1.5, "loss": 0.5}',
    '{"t": 1.0, "kind": "step", "step": 1234567890123456789, "loss": 0.5}',
    '{"t": 1.0, "kind": "step", "step": 123456789012345678, "loss": 0.5}',
    '{"t":1.0,"kind":"step","step":2,"loss":-0}',
    ' {"t": 1.0,\t"kind" : "step", "step": 3, "loss": -0.0E+2}\r',
    '{"t": 1.0, "kind": "step", "step": 4, "lösß": 0.5}',
    '{"t": 1.0, "kind": "step", "step": 5, "loss": 1.0e-5000}',
    '{"t": 1.0, "kind": "step", "step": 6, "loss": 0.' + "1234567890" * 8 + "}",
    '{"t": 1.0, "kind": "step", "step": 7, "loss": 1.}',
    '{"t": 1.0, "kind": "step", "step": 8, "loss": 0.5,}',
    '{"t": 1.0, "kind": "step", "step": 9, "loss": "NaN"}',
    '{"t": 1.0, "kind": "step", "step": 10, "loss": true}',
    '{"t": 1.0, "kind": "step", "step": 11, "kind": "step"}',
]
plain_numbers = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**53), 2**53), st.integers(0, 100)
)
odd_values = st.one_of(
    st.sampled_from(
        ["nan", "inf", "-inf", "n/a", True, False, None, [1.5], 2**64 + 1, -(2**63) - 1, 2**63 + 0.0]
    ),
    st.floats(),  # NaN and inf: json.dumps writes NaN and Infinity, which orjson refuses
)


@st.composite
def jsonl_batches(draw: st.DrawFn) -> list[list[str]]:
    """metrics.jsonl lines in batches: mostly step lines of a few shapes, some with odd fields, other
    kinds, and lines that are not events at all."""
    shapes = draw(
        st.lists(st.lists(st.sampled_from(JSONL_FIELDS), unique=True, max_size=4), min_size=1, max_size=3)
    )
    lines = []
    t = 1_700_000_000.0
    for step in range(draw(st.integers(0, 40))):
        roll = draw(st.integers(0, 19))
        if roll < 14:
            record: dict = {"t": t + step, "kind": "step", "step": step}
            for name in draw(st.sampled_from(shapes)):
                odd = draw(st.integers(0, 19)) == 0
                record[name] = draw(odd_values if odd else plain_numbers)
            if draw(st.integers(0, 19)) == 0:
                record[draw(st.sampled_from(["t", "step"]))] = draw(
                    st.one_of(odd_values, st.just(float(step)))
                )
            if draw(st.integers(0, 19)) == 0:
                del record[draw(st.sampled_from(["t", "step"]))]
            if draw(st.integers(0, 19)) == 0:
                record = dict(reversed(record.items()))
            lines.append(json.dumps(record))
        elif roll < 17:
            kind = draw(st.sampled_from(["eval", "compile", "status", "checkpoint", "summary"]))
            record = {
                "t": t + step,
                "kind": kind,
                "step": draw(st.one_of(st.none(), st.just(step))),
                "loss": 0.5,
            }
            lines.append(json.dumps({k: v for k, v in record.items() if v is not None}))
        else:
            lines.append(draw(st.sampled_from(ODD_JSONL_LINES)))
    cuts = sorted(draw(st.lists(st.integers(0, len(lines)), max_size=4)))
    return [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]


@FUZZ
@given(batches=jsonl_batches())
def test_jsonl_batch_path_gives_the_rows_of_the_line_path(reader: str, batches: list[list[str]]) -> None:
    columns, rows = JsonlParser(), JsonlParser()
    for batch in batches:
        assert normalized(columns.parse_batch(batch)) == normalized(rows.parse_rows(batch))
    assert (columns.lines, columns.malformed) == (rows.lines, rows.malformed)


@FUZZ
@given(batches=jsonl_batches())
def test_jsonl_reads_the_same_with_orjson_and_with_the_stdlib_scanner(
    reader: str, batches: list[list[str]]
) -> None:
    lines = [line for batch in batches for line in batch]
    fast = JsonlParser()
    got = normalized(fast.parse_batch(lines))
    with mock.patch.object(parsers, "_orjson_loads", None):
        slow = JsonlParser()
        assert normalized(slow.parse_batch(lines)) == normalized(JsonlParser().parse_rows(lines)) == got
    assert (fast.lines, fast.malformed) == (slow.lines, slow.malformed)


def runner_step_line(step: int) -> str:
    return json.dumps({"t": 1_700_000_000.0 + step, "kind": "step", "step": step, "loss": 1 / (step + 1)})


@pytest.mark.parametrize("odd", ODD_JSONL_LINES)
def test_jsonl_odd_line_between_step_lines_gives_the_rows_of_the_line_path(reader: str, odd: str) -> None:
    lines = [runner_step_line(1), runner_step_line(2), odd, runner_step_line(3), odd, odd]
    columns, rows = JsonlParser(), JsonlParser()
    assert normalized(columns.parse_batch(lines)) == normalized(rows.parse_rows(lines))
    assert (columns.lines, columns.malformed) == (rows.lines, rows.malformed)


LOG_SHAPES = [
    ["step_loss", "learning_rate", "throughput", "grad_norm"],
    ["step_loss", "mfu"],
    ["eval_loss", "eval_accuracy"],
    ["loss", "step_loss"],  # both become "loss"
    ["epoch", "step_loss"],
]
ODD_LOG_LINES = [
    "",
    "epoch 0 done",
    "LOG: starting",
    "LOG without a step tuple",
    "LOG t - (0, 1)",
    "LOG (x) - (0, 1) step_loss : 1.0",
    "LOG LOG - (0, 2) step_loss : 1.0",  # a time that is `LOG`
    "LOG t - (0, 3) step_loss : 1.0 LOG t - (0, 4) step_loss : 2.0",  # two lines run together
    "LOG t - (0, 5) step_loss : tensor(1.0)",
    "LOG t - ( 2 ,  31 )  step_loss: nan, learning_rate :4.0e-04",
    "[default0]:LOG t - (0, 9) step_loss : 0.5",
    "\x1b[32mLOG t - (0, 8) step_loss : 0.5\x1b[0m",
    " 40%|####  | 4/10\rLOG t - (0, 7) step_loss : 0.5\r",
    "{'loss': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}",
    "{'eval_loss': 0.41, 'epoch': 1.0}",
    "{'loss': oops}",
    "LOG t - (0, 11) step_loss : 1.0\n",
    "LOG t - (0, 12) step_lösß : 1.0",
    "LOG t - (0, 13) step_loss : 1e999",
    "LOG t - (0, 14) step_loss : -Infinity",
    "LOG t - (0, 15) step_loss : 0." + "1234567890" * 8,
    "LOG t - (0, 1234567890123456789) step_loss : 1.0",
    "LOG\tt - (0,16)\tstep_loss\t:\t1.0",
    "LOG t - (0, 17) step_loss : 1,5",
    'LOG t - (0, 18) step_loss : "1.5"',
    "LOG t - (0, 19) step_loss : -0 learning_rate : 7 throughput : -0.0",
    "LOG t - (-0, 20) step_loss : 00 learning_rate : -00.5e1 throughput : 1e-0",
]
log_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.4f}"),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.2e}"),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(
        ["nan", "inf", "-inf", "NaN", "1_0", "+5", "abc", "0x10", "1e999", "١٢", ".5", "5.", "-0", "7", "-00"]
    ),
)
log_numbers = st.one_of(
    st.integers(0, 10**6).map(str),
    st.sampled_from(["-3", "0000000000000000001", "123456789012345678", "+4", "1_0", "١٢", "", "x"]),
)
log_spaces = st.sampled_from([" ", " ", " ", "  ", "\t", "\x1c"])


@st.composite
def log_batches(draw: st.DrawFn) -> list[list[str]]:
    """stdout lines in batches: mostly LOG lines of a few shapes (now and then an odd token or spacing),
    some other metric lines and plain text."""
    lines = []
    for step in range(draw(st.integers(0, 40))):
        roll = draw(st.integers(0, 19))
        if roll < 16:
            odd = draw(st.integers(0, 9)) == 0
            epoch, number = (draw(log_numbers), draw(log_numbers)) if odd else ("0", str(step))
            stamp = draw(
                st.sampled_from(["Sun Nov 22 07:42:44 2026", "Sun Nov  2 07:42:44 2026", "12:00:01"])
            )
            tokens = ["LOG", stamp, "-", f"({epoch},", f"{number})"]
            for name in draw(st.sampled_from(LOG_SHAPES[:2] if not odd else LOG_SHAPES)):
                value = draw(log_values) if odd else f"{draw(st.floats(0, 10)):.4f}"
                tokens += [name, ":", value]
            space = draw(log_spaces) if odd else " "
            lines.append(space.join(tokens))
        else:
            lines.append(draw(st.sampled_from(ODD_LOG_LINES)))
    cuts = sorted(draw(st.lists(st.integers(0, len(lines)), max_size=4)))
    return [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]


@pytest.mark.parametrize("odd", ODD_LOG_LINES)
def test_log_odd_line_between_step_lines_gives_the_rows_of_the_line_path(reader: str, odd: str) -> None:
    step_line = LOG_STEP.replace("(0, 10)", "(0, {})").format
    lines = [step_line(1), step_line(2), odd, step_line(3), odd, odd]
    columns, rows = LogLineParser(), LogLineParser()
    assert normalized(columns.parse_batch(lines)) == normalized(rows.parse_rows(lines))
    assert (columns.lines, columns.malformed, columns.events, columns.step) == (
        rows.lines,
        rows.malformed,
        rows.events,
        rows.step,
    )


@FUZZ
@given(batches=log_batches())
def test_log_batch_path_gives_the_rows_of_the_line_path(reader: str, batches: list[list[str]]) -> None:
    columns, rows = LogLineParser(), LogLineParser()
    for batch in batches:
        assert normalized(columns.parse_batch(batch)) == normalized(rows.parse_rows(batch))
        assert columns.step == rows.step
    assert (columns.lines, columns.malformed, columns.events) == (rows.lines, rows.malformed, rows.events)


def test_runner_log_lines_come_as_one_column_block() -> None:
    lines = [LOG_STEP.replace("(0, 10)", f"(0, {step})") for step in range(10, 14)]
    parser = LogLineParser()
    [block] = parser.parse_batch(lines)
    assert isinstance(block, StepColumns)
    assert list(block.steps) == [10, 11, 12, 13] and block.ts is None
    assert block.names == (
        "loss",
        "lr",
        "samples_per_s",
        "step_time_s",
        "tokens_per_s",
        "mfu",
        "grad_norm",
        "epoch",
    )
    assert list(block.columns[0]) == [0.8339] * 4
    assert (parser.step, parser.lines, parser.events) == (13, 4, 4)


def test_log_batch_path_with_user_regexes_reads_line_by_line() -> None:
    regex = MetricRegex.from_spec(r"x=x=(\S+)")
    batch = LogLineParser([regex]).parse_batch([LOG_STEP, "x=2.5"])
    assert normalized(batch) == normalized(LogLineParser([regex]).parse_rows([LOG_STEP, "x=2.5"]))


@pytest.mark.parametrize(
    "lines",
    [
        # As many tokens in all as three lines of the first one's length, split otherwise.
        ["LOG t - (0, 1) a : 1 b : 2", "LOG t - (0, 2) a : 1", "LOG t - (0, 3) a : 1 b : 2 c : 3"],
        ["LOG t - (0, 1) a : 1 LOG : 2", "LOG t - (0, 2) a : 1 LOG : 2"],
        ["LOG LOG - (0, 1) a : 1", "LOG t - (0, 2) a : 1"],
        ["LOG t - (0, 1) a : 1", "LOG t - (0, 2) a : 1 LOG", "t - (0, 3) a : 1"],
        ["LOG t) - (0, 1) a : 1", "LOG t - (0, 2) a : 1"],
        ["LOG t - (0, 1) a : 1", "LOG t - (0, 2)) a : 1", "LOG t - (0, +3) a : 1", "LOG t - (0, 1_0) a : 1"],
        [" LOG t - (0, 1) a : 1", "\x1cLOG t - (0, 2) a : 1"],
    ],
)
def test_log_lines_that_only_look_alike_read_as_one_by_one(lines: list[str]) -> None:
    columns, rows = LogLineParser(), LogLineParser()
    assert normalized(columns.parse_batch(lines)) == normalized(rows.parse_rows(lines))
    assert (columns.step, columns.malformed, columns.events) == (rows.step, rows.malformed, rows.events)


@needs_c_compiler
def test_the_compiled_reader_keeps_no_memory_between_calls() -> None:
    import tracemalloc

    jsonl = [runner_step_line(step) for step in range(50)]
    jsonl[20] = ODD_JSONL_LINES[-8]  # a number beyond a double: read one by one
    log = [LOG_STEP.replace("(0, 10)", f"(0, {step})") for step in range(50)]
    log[30] = "LOG t - (0, 14) step_loss : -Infinity"

    def read_all() -> None:
        for at in range(0, 50, 7):
            parsers._linescan.jsonl_steps(jsonl, at)
            parsers._linescan.log_steps(log, at)
        parsers._linescan.jsonl_steps(ODD_JSONL_LINES, 0)
        parsers._linescan.log_steps(ODD_LOG_LINES, 0)

    read_all()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(300):
            read_all()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes kept after 300 rounds"


json_tokens = st.sampled_from(
    ['{"t": ', '{"kind": "step"', '"kind": "step", ', '"step": ', '"t": ', '"loss": ', ", ", "}", "{", "1",
     "-0", "1.5e3", '"nan"', '"inf"', "NaN", "1" * 20, '"', "\\", "\x00", "é", "true", "[1]", " ", "\t"]
)  # fmt: skip
any_line = st.one_of(
    st.text(max_size=80),
    st.lists(json_tokens, max_size=12).map("".join),
    st.lists(metric_tokens, max_size=16).map("".join),
    st.sampled_from(["\ud800", "LOG t - (0, 1) step_loss : \udcff", '{"t": 1, "kind": "step", "step": 1}']),
)


@needs_c_compiler
@FUZZ
@given(lines=st.lists(any_line, max_size=12))
def test_compiled_readers_take_any_text_and_agree_with_the_line_path(lines: list[str]) -> None:
    for start in range(len(lines) + 1):  # from every line, as the batch paths may call them
        parsers._linescan.jsonl_steps(lines, start)
        parsers._linescan.log_steps(lines, start)
    columns, rows = JsonlParser(), JsonlParser()
    assert normalized(columns.parse_batch(lines)) == normalized(rows.parse_rows(lines))
    assert columns.malformed == rows.malformed
    log_columns, log_rows = LogLineParser(), LogLineParser()
    assert normalized(log_columns.parse_batch(lines)) == normalized(log_rows.parse_rows(lines))
    assert (log_columns.malformed, log_columns.step) == (log_rows.malformed, log_rows.step)


# Numbers at the edges of the compiled reader's exact path (at most 2**53 times a power of ten within 1e22)
# and beyond it (orjson, or PyOS_string_to_double one by one).
EDGE_NUMBERS = [
    "0", "-0", "0.0", "-0.0", "0e5", "-0E-5", "5", "1.5", "9007199254740992", "9007199254740993",
    "9007199254740992.0", "9007199254740993.0", "1e22", "1e23", "-1e-22", "1e-23", "123456789012345678e-5",
    "1234567890123456789e-3", "12345678901234567890e-3", "0.1e-22", "4.9e-324", "5e-325",
    "1.7976931348623157e308", "1.7976931348623159e308", "2.2250738585072014e-308", "1e400", "-1e400",
    "0.30000000000000004", "1.0000000000000002", "0.000000000000000000001234", "123456789012345678",
    "0.12345678901234567890123", "7.00000000000000000000000000000000000000001", "1E+2", "3.0e-0",
    "0.00039992000000000001", "0.1234567890123456789", "1234567890123456789.0", "1e-28",
    "0.0000000000000000000000000001",
    "0.123456789012345678901234", "123456789012345678901234.5",  # 20+ digits that end with 8 read at once
    # 19 digits just above or below a point halfway between two doubles, so close that rounding them to
    # 64 bits first lands on it: double rounding would then go to the even neighbour, wrongly for the first.
    "1.535882004306689308", "1.057998924774706917", "1.826852124672038280", "1.223238964607014645",
]  # fmt: skip


def number_texts(x: float) -> st.SearchStrategy[str]:
    return st.sampled_from(
        [repr(x), json.dumps(x), f"{x:.2e}", f"{x:.17g}", f"{x:.6g}", f"{x:.4f}", f"{x:.20e}", f"{x:e}"]
    )


numbers = st.one_of(
    st.sampled_from(EDGE_NUMBERS),
    st.floats(allow_nan=False, allow_infinity=False).flatmap(number_texts),
    st.floats(-1e6, 1e6).flatmap(number_texts),
    st.integers(-(10**19), 10**19).map(str),
)


@needs_c_compiler
def test_compiled_reader_reads_every_edge_number_as_json_and_float_do() -> None:
    jsonl = [f'{{"t": 1.5, "kind": "step", "step": 1, "v": {text}}}' for text in EDGE_NUMBERS]
    log = [f"LOG t - (0, 1) v : {text}" for text in EDGE_NUMBERS]
    for text, jsonl_line, log_line in zip(EDGE_NUMBERS, jsonl, log, strict=True):
        found = parsers._linescan.jsonl_steps([jsonl_line], 0)
        if found is not None:  # None: an integer beyond 18 digits, which the line path reads
            assert repr(found[2][-1][0]) == repr(json.loads(text)), text
        assert repr(parsers._linescan.log_steps([log_line], 0)[4][0][0]) == repr(float(text)), text
    # All at once: the numbers left to orjson are read by one call, or one by one where it refuses one.
    assert normalized(JsonlParser().parse_batch(jsonl)) == normalized(JsonlParser().parse_rows(jsonl))
    assert normalized(LogLineParser().parse_batch(log)) == normalized(LogLineParser().parse_rows(log))


@needs_c_compiler
@FUZZ
@given(texts=st.lists(numbers, min_size=1, max_size=8))
def test_compiled_reader_reads_numbers_bit_for_bit_as_json_and_float_do(texts: list[str]) -> None:
    jsonl = [f'{{"t": 1.5, "kind": "step", "step": {i}, "v": {text}}}' for i, text in enumerate(texts)]
    log = [f"LOG t - (0, {i}) v : {text}" for i, text in enumerate(texts)]
    # normalized() compares repr()s: the same text for the same double, -0.0 and ints told apart.
    assert normalized(JsonlParser().parse_batch(jsonl)) == normalized(JsonlParser().parse_rows(jsonl))
    assert normalized(LogLineParser().parse_batch(log)) == normalized(LogLineParser().parse_rows(log))
    for at, text in enumerate(texts):
        found = parsers._linescan.log_steps(log, at)
        if found is not None and "_" not in text:
            assert repr(found[4][0][0]) == repr(float(text)), text


@needs_c_compiler
def test_compiled_reader_reads_step_lines_into_typed_arrays() -> None:
    lines = [RUNNER_STEP.replace('"step": 1', f'"step": {step}') for step in range(1, 4)]
    end, keys, columns = parsers._linescan.jsonl_steps(lines, 0)
    assert end == 3
    assert keys == ("t", "step", "epoch", "loss", "lr", "samples_per_s", "step_time_s", "grad_norm")
    assert [column.typecode for column in columns] == ["d", "q", "q", "d", "d", "d", "d", "d"]
    assert list(columns[1]) == [1, 2, 3] and columns[3][0] == 2.0420211125742527
    end, names, epochs, steps, values = parsers._linescan.log_steps([LOG_STEP, LOG_STEP], 0)
    assert (end, epochs.typecode, list(epochs)) == (2, "q", [0, 0])
    assert (steps.typecode, list(steps)) == ("q", [10, 10])
    assert names[0] == "step_loss" and [column.typecode for column in values] == ["d"] * 7


def test_a_value_that_turns_from_int_to_float_keeps_its_type_in_the_batch() -> None:
    lines = [
        '{"t": 1.0, "kind": "step", "step": 1, "loss": 1, "lr": 0.5}',
        '{"t": 2.0, "kind": "step", "step": 2, "loss": 0.75, "lr": 0.5}',
        '{"t": 3, "kind": "step", "step": 3, "loss": 0.5, "lr": 0.5}',
        '{"t": 4.0, "kind": "step", "step": 4, "loss": "nan", "lr": 0}',
    ]
    batch = JsonlParser().parse_batch(lines)
    assert normalized(batch) == normalized(JsonlParser().parse_rows(lines))
    rows = [row for item in batch for row in item.rows()]
    assert [type(row[2]["loss"]) for row in rows] == [int, float, float, float]
    assert [type(row[3]) for row in rows] == [float, float, int, float]
