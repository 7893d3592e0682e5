"""The harness's pure parts, in process: schedules, samplers, synthetic data and file readers."""

from __future__ import annotations

import numpy as np
import pytest

from trn_harness import config, data
from trn_harness.schedule import lr_factor


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
def test_lr_factor_warms_up_and_never_reaches_zero(schedule):
    factor = lr_factor(schedule, warmup_steps=4, total_steps=20)
    values = [factor(s) for s in range(20)]
    assert values[:4] == sorted(values[:4]) and values[0] > 0
    assert values[4] == pytest.approx(1.0)
    assert min(values) > 0  # a literal 0 would be a new XLA graph on the last step
    if schedule != "constant":
        assert values[-1] < values[5]


def test_sampler_shards_are_disjoint_equal_and_resumable():
    torch = pytest.importorskip("torch")
    from trn_harness.sampler import ShardedEpochSampler

    shards = [ShardedEpochSampler(10, rank, 3, seed=1) for rank in range(3)]
    seen = [list(s) for s in shards]
    assert all(len(s) == 3 for s in seen)
    assert len({i for shard in seen for i in shard}) == 9
    resumed = ShardedEpochSampler(10, 0, 3, seed=1)
    resumed.set_epoch(0, skip_samples=2)
    assert list(resumed) == seen[0][2:]
    shards[0].set_epoch(1)
    assert list(shards[0]) != seen[0]
    del torch


def test_synthetic_text_is_padded_to_a_static_shape():
    arrays = data.synthetic_classification_text(32, 16, 100, 3, seed=0)
    assert arrays["input_ids"].shape == (32, 16) and arrays["attention_mask"].shape == (32, 16)
    assert set(np.unique(arrays["labels"])) <= {0, 1, 2}
    assert (arrays["input_ids"][arrays["attention_mask"] == 0] == 0).all()


def test_synthetic_train_and_eval_share_the_class_signal():
    a = data.synthetic_images(4, 8, 2, seed=0)
    b = data.synthetic_images(4, 8, 2, seed=1)
    assert a["pixel_values"].shape == b["pixel_values"].shape == (4, 3, 8, 8)
    text_a = data.synthetic_classification_text(200, 32, 500, 2, seed=0)
    text_b = data.synthetic_classification_text(200, 32, 500, 2, seed=1)

    def keywords(arrays, label):
        ids = arrays["input_ids"][arrays["labels"] == label]
        values, counts = np.unique(ids[ids >= data.FIRST_ORDINARY_TOKEN], return_counts=True)
        return set(values[np.argsort(counts)[-4:]])

    assert keywords(text_a, 0) == keywords(text_b, 0)


def test_labels_accept_integral_floats_and_reject_the_rest(tmp_path):
    assert data.label_ids(["0", "1.0", "2"], 3, tmp_path).tolist() == [0, 1, 2]
    with pytest.raises(config.UsageError, match="out of range"):
        data.label_ids(["3"], 3, tmp_path)
    with pytest.raises(config.UsageError, match="not an integer class id"):
        data.label_ids(["1.5"], 3, tmp_path)


def test_csv_with_a_ragged_row_is_named(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text,label\nok,1\ntoo,many,fields\n")
    with pytest.raises(config.UsageError, match="line 3: wrong number of fields"):
        data.read_text_label_file(path, "text", "label")


def test_hold_out_is_deterministic_and_disjoint():
    arrays = {"x": np.arange(100)}
    train, held = data.hold_out(arrays, 0.1, seed=3)
    again, _ = data.hold_out(arrays, 0.1, seed=3)
    assert len(held["x"]) == 10 and not set(train["x"]) & set(held["x"])
    assert (train["x"] == again["x"]).all()


def test_epochs_and_steps_resolve_to_whichever_ends_first():
    parser = config.build_parser(
        "t", "t", config.RunnerDefaults(lr_by_size={"tiny": 1, "small": 1, "base": 1})
    )
    args = parser.parse_args(["--epochs", "2", "--grad-accum", "2"])
    assert config.resolve_steps(args, batches_per_epoch=10) == (10, 5)
    args = parser.parse_args(["--epochs", "2", "--steps", "3"])
    assert config.resolve_steps(args, batches_per_epoch=10) == (3, 10)
    assert config.resolve_steps(parser.parse_args([]), 10) == (config.DEFAULT_STEPS, 10)
    with pytest.raises(config.UsageError, match="--grad-accum"):
        config.resolve_steps(parser.parse_args(["--grad-accum", "20"]), batches_per_epoch=10)


def test_neuron_compiler_flags_are_appended_to_the_environment(monkeypatch):
    import os

    from trn_harness import device

    monkeypatch.setenv("NEURON_CC_FLAGS", "--cache_dir=/tmp/cache")
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    parser = config.build_parser(
        "t", "t", config.RunnerDefaults(lr_by_size={"tiny": 1, "small": 1, "base": 1})
    )
    args = parser.parse_args(
        ["--compiler-flags", "-O1 --enable-mixed-precision-accumulation", "--neuron-auto-cast", "matmult"]
    )
    device.prepare_environment(args, "xla")
    assert os.environ["NEURON_CC_FLAGS"].split() == [
        "--cache_dir=/tmp/cache",
        "--model-type=transformer",
        "--auto-cast=matmult",
        "--auto-cast-type=bf16",
        "-O1",
        "--enable-mixed-precision-accumulation",
    ]
    assert os.environ["PJRT_DEVICE"] == "CPU"  # no torch-neuronx here: the CPU PJRT client


def test_a_finished_run_frees_its_trainer_and_puts_the_sigterm_handler_back(tmp_path):
    """A trainer kept alive past its run keeps, through DDP's reducer, the process group alive until
    interpreter exit, where gloo's teardown can abort a run that finished well."""
    import gc
    import signal

    pytest.importorskip("torch")
    import bert

    from trn_harness import loop

    before = signal.getsignal(signal.SIGTERM)
    argv = ["--device", "cpu", "--model-size", "tiny", "--synthetic", "--steps", "2", "--batch-size", "2",
            "--seq-len", "16", "--eval-every", "0", "--output-dir", str(tmp_path / "out")]  # fmt: skip
    assert loop.main(bert.BertClassification(), bert.build_parser(), argv) == 0
    gc.collect()
    assert signal.getsignal(signal.SIGTERM) is before
    assert loop.Trainer not in set(map(type, gc.get_objects()))
