"""tqdm bars as a progress source: frames drawn by the real tqdm read back to what it was given, and a
stream's training bar told apart from its evaluation bars."""

from __future__ import annotations

import io
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnconsole.core.metrics import RunMetrics
from trnconsole.core.parsers import LogLineParser
from trnconsole.core.progress import BarTracker, parse_bar, parse_rich_bar

tqdm = pytest.importorskip("tqdm").tqdm


def frames_of(text: str) -> list[str]:
    """What a terminal keeps of each redraw: `\\r` and `\\n` both end a frame."""
    return [part for line in text.split("\n") for part in line.split("\r") if part.strip()]


def test_a_frame_with_a_total_gives_count_total_rate_time_left_and_postfix() -> None:
    frame = parse_bar(" 58%|█████▊    | 35/60 [00:07<00:02,  9.06it/s, loss=0.12, lr=1e-05, phase=warm]")
    assert frame is not None
    assert (frame.n, frame.total, frame.elapsed_s, frame.remaining_s) == (35, 60, 7, 2)
    assert (frame.rate, frame.unit, frame.rate_metric) == (9.06, "it", "it_per_s")
    assert frame.postfix == {"loss": 0.12, "lr": 1e-05}
    assert frame.postfix_text == "loss=0.12, lr=1e-05, phase=warm"


def test_seconds_per_item_is_turned_back_into_a_rate() -> None:
    frame = parse_bar("Epoch 3:  5%|▌         | 3/60 [01:01:07<2:16:00,  4.00s/it]")
    assert frame is not None
    assert frame.desc == "Epoch 3"
    assert frame.rate == pytest.approx(0.25)
    assert (frame.elapsed_s, frame.remaining_s) == (3667, 8160)


@pytest.mark.parametrize(
    "text",
    [
        "Loaded [checkpoint] in 3 s",
        "35/60 done [fast]",
        "| 35/60 [00:07<00:02, 9.06]",  # no unit on the rate
        "[00:07<00:02, 9.06it/s]",
        "epoch 1/3 [loss=0.5]",
    ],
)
def test_text_that_only_looks_like_a_bar_is_not_one(text: str) -> None:
    assert parse_bar(text) is None


bar_options = st.fixed_dictionaries(
    {
        "n": st.integers(0, 10**7),
        "extra": st.integers(0, 10**7),
        "has_total": st.booleans(),
        "elapsed": st.just(0.0) | st.floats(1e-3, 5e5),
        "desc": st.sampled_from(["", "Epoch 2", "train", "Training: ", "loss 0.3 |"]),
        "unit": st.sampled_from(["it", "samples", "tok", "B", "batch"]),
        "unit_scale": st.booleans(),
        "ascii": st.booleans(),
        "postfix": st.dictionaries(
            st.sampled_from(["loss", "lr", "acc", "v_num", "train_loss"]),
            st.floats(-1e6, 1e6, allow_nan=False) | st.integers(-(10**6), 10**6),
            max_size=3,
        ),
        "ncols": st.sampled_from([None, 80, 200]),
    }
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bar_options)
def test_any_frame_the_real_tqdm_draws_reads_back_to_what_it_was_given(options: dict) -> None:
    total = options["n"] + options["extra"] if options["has_total"] else None
    out = io.StringIO()
    bar = tqdm(
        total=total,
        file=out,
        desc=options["desc"] or None,
        unit=options["unit"],
        unit_scale=options["unit_scale"],
        ascii=options["ascii"],
        ncols=options["ncols"],
        mininterval=0,
        miniters=1,
    )
    bar.n = options["n"]
    if options["postfix"]:
        bar.set_postfix(options["postfix"], refresh=False)
    text = tqdm.format_meter(**{**bar.format_dict, "elapsed": options["elapsed"]})
    bar.close()
    frame = parse_bar(text)
    if options["ncols"] is not None and len(text) >= options["ncols"] and text.rstrip()[-1:] != "]":
        assert frame is None  # cut to the width: tqdm trims the tail off
        return
    assert frame is not None, text
    scaled = options["unit_scale"]
    assert frame.n == pytest.approx(options["n"], rel=5e-3 if scaled else 0)
    if not total:  # tqdm draws a total of 0 as no total
        assert frame.total is None
    else:
        assert frame.total == pytest.approx(total, rel=5e-3 if scaled else 0)
    assert frame.unit == options["unit"]
    assert frame.elapsed_s == int(options["elapsed"])
    for name, value in options["postfix"].items():
        assert math.isclose(frame.postfix[name], value, rel_tol=1e-2, abs_tol=1e-2), (name, text)


def test_a_loop_with_set_postfix_gives_a_step_per_item_with_its_loss_and_rate() -> None:
    out = io.StringIO()
    given_losses = {}
    with tqdm(range(40), file=out, mininterval=0, miniters=1) as bar:
        for step in bar:
            loss = 1.0 / (step + 1)
            bar.set_postfix(loss=loss)
            given_losses[step] = loss
    metrics = RunMetrics()
    metrics.feed_log_lines(out.getvalue().split("\n"))
    summary = metrics.summary()
    assert (summary["step"], summary["total_steps"], summary["step_source"]) == (40, 40, "bar")
    loss = metrics.series["loss"]
    xs, ys, _, _ = loss.points()
    # set_postfix draws the frame of the item being worked on: n counts the items finished before it.
    assert dict(zip(xs, ys, strict=True)) == pytest.approx({n: given_losses[n] for n in range(40)}, rel=1e-2)
    assert summary["throughput"]["unit"] == "it/s"


def test_an_evaluation_bar_never_moves_the_training_step() -> None:
    out = io.StringIO()
    train = tqdm(total=20, file=out, mininterval=0, miniters=1)
    for _ in range(10):
        train.update(1)
    evaluation = tqdm(total=50, desc="Evaluating", file=out, mininterval=0, miniters=1, leave=False)
    for _ in range(50):
        evaluation.update(1)
    evaluation.close()
    parser = LogLineParser()
    parser.feed_lines(out.getvalue().split("\n"))
    assert (parser.step, parser.bars.total) == (10, 20)


def test_an_epoch_bar_over_a_batch_bar_counts_batches_across_epochs() -> None:
    out = io.StringIO()
    for _ in tqdm(range(3), desc="epochs", file=out, mininterval=0, miniters=1):
        for _ in tqdm(range(7), file=out, mininterval=0, miniters=1, leave=False):
            pass
    parser = LogLineParser()
    parser.feed_lines(out.getvalue().split("\n"))
    assert parser.step == 21


def test_lightning_style_epoch_bars_count_on_from_epoch_to_epoch() -> None:
    tracker = BarTracker()
    steps = []
    for epoch in range(3):
        for n in range(0, 11, 5):
            text = f"Epoch {epoch}: {n * 10:3d}%|#         | {n}/10 [00:01<00:01, 5.00it/s, v_num=0]"
            frame = parse_bar(text)
            assert frame is not None
            steps.append(tracker.observe(frame))
    assert steps == [0, 5, 10, 10, 15, 20, 20, 25, 30]


def test_a_frame_drawn_again_with_nothing_new_adds_no_point() -> None:
    parser = LogLineParser()
    frame = " 50%|#####     | 5/10 [00:01<00:01,  5.00it/s, loss=0.5]"
    first = parser.feed(frame)
    again = parser.feed("\r".join([frame] * 3))
    assert [e.kind for e in first] == ["progress", "step"]
    assert again == []


def test_a_trainer_dict_takes_the_step_of_the_frame_tqdm_draws_right_after_it() -> None:
    """tqdm draws at most every 0.1 s, so the frame before a dict may be a step behind; tqdm.write draws the
    bar again right after the dict, at the step the Trainer is at (as recorded from transformers 5)."""
    lines = [
        "\r 12%|█▎        | 5/40 [00:00<00:03, 11.59it/s]\r 22%|██▎       | 9/40 [00:00<00:02, 14.91it/s]"
        "\r                                              \r"
        "{'loss': '0.6825', 'grad_norm': '0.7223', 'learning_rate': '0.0004306', 'epoch': '0.5'}",
        "\r 25%|██▌       | 10/40 [00:00<00:02, 14.91it/s]",
    ]
    parser = LogLineParser()
    events = parser.feed_lines(lines)
    step = [e for e in events if e.kind == "step" and "loss" in e.values]
    assert len(step) == 1
    assert step[0].step == 10
    assert step[0].values == {"loss": 0.6825, "grad_norm": 0.7223, "lr": 0.0004306, "epoch": 0.5}
    assert parser.steps_per_epoch == 20


def test_a_trainer_dict_with_no_frame_after_it_is_given_out_at_the_end() -> None:
    metrics = RunMetrics()
    metrics.feed_log_lines([" 25%|██▌       | 10/40 [00:00<00:02, 14.91it/s]{'loss': '0.5', 'epoch': '0.5'}"])
    assert "loss" not in metrics.series
    metrics.settle()
    assert metrics.series["loss"].points()[:2] == ([10], [0.5])


def test_trainer_dicts_without_a_bar_take_their_step_from_the_epoch_when_steps_per_epoch_is_known() -> None:
    parser = LogLineParser()
    parser.steps_per_epoch = 125
    events = parser.feed_lines(
        [
            "{'loss': '0.6669', 'grad_norm': '0.7129', 'learning_rate': '0.0002167', 'epoch': '0.28'}",
            "{'eval_loss': '0.6449', 'eval_runtime': '0.074', 'epoch': '0.48'}",
        ]
    )
    assert [(e.kind, e.step) for e in events] == [("step", 35), ("eval", 60)]
    assert parser.step_source == "epoch"


def test_a_bar_with_no_newline_yet_is_progress_while_it_runs_and_one_folded_log_line(tmp_path) -> None:
    from trnconsole.core.watch import LOG_FILE, RunWatcher

    watcher = RunWatcher(tmp_path, metrics_from_jsonl=False)
    with (tmp_path / LOG_FILE).open("w") as f:
        f.write("epoch starts\n")
        bar = tqdm(total=100, file=f, mininterval=0, miniters=1, ascii=True, ncols=60)
        for _ in range(30):
            bar.update(1)
        f.flush()
        watcher.drain()
        assert (watcher.metrics.last_step, watcher.metrics.total_steps) == (29, 100)  # the last frame waits
        assert watcher.log_tail[0] == "epoch starts"
        assert "29/100" in watcher.log_tail[-1].rsplit("\r", 2)[-2]
        assert watcher.finished_log_tail() == ["epoch starts"]
        for _ in range(70):
            bar.update(1)
        bar.close()
    _, finished = watcher.poll()
    assert watcher.metrics.last_step == 100
    assert len(finished) == 1 and "100/100" in finished[0].rsplit("\r", 1)[-1]
    assert len(watcher.log_tail) == 2 and watcher.finished_log_tail() == list(watcher.log_tail)


def test_a_rich_progress_bar_frame_gives_epoch_pass_count_time_and_metrics() -> None:
    frame = parse_rich_bar(
        "Epoch 2/9  ━━━━━━━━╺━━━━━━━ 5/12 0:00:03 • 0:00:07 4.05it/s train_loss: 0.249 v_num: 0"
    )
    assert frame is not None
    assert (frame.desc, frame.n, frame.total, frame.passes, frame.pass_index) == ("Epoch 2/9", 5, 12, 10, 2)
    assert (frame.elapsed_s, frame.remaining_s, frame.rate, frame.unit) == (3, 7, 4.05, "it")
    assert frame.postfix == {"train_loss": 0.249, "v_num": 0}
    tracker = BarTracker()
    assert tracker.observe(frame) == 29
    assert tracker.total == 120


def test_rich_metrics_wrapped_below_the_frame_are_read_even_with_a_pair_cut_in_two() -> None:
    metrics = RunMetrics()
    metrics.feed_log_lines(
        [
            "Epoch 2/2  ━━━━━━━━━━━━━━━━━━━ 12/12 0:00:00 • 0:00:00 266.60it/s train_loss: 0.249 val_loss:",
            "                                                    0.187 val_acc: 0.938       ",
            "`Trainer.fit` stopped: `max_epochs=3` reached.",
        ]
    )
    summary = metrics.summary()
    assert (summary["step"], summary["total_steps"], summary["final_loss"]) == (36, 36, 0.249)
    assert summary["eval"] == {"loss": 0.187, "acc": 0.938}
