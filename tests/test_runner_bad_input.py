"""Bad input gets one line naming the problem and the fix, exit code 2, and no run output."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import RUNNERS, run_runner


def assert_usage_error(proc, *expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("runner", ["bert", "gpt2", "vit"])
def test_unknown_flag_suggests_the_nearest(runner, tmp_path):
    proc = run_runner(runner, "--synthetic", "--bach-size", "8", "--output-dir", str(tmp_path))
    assert_usage_error(proc, "unknown flag --bach-size", "did you mean --batch-size?")


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--batch-size", "0", "must be a positive integer, got '0'"),
        ("--batch-size", "eight", "must be a positive integer, got 'eight'"),
        ("--steps", "-5", "must be a positive integer, got '-5'"),
        ("--steps", "1.5", "must be a positive integer"),
        ("--precision", "fp16", "invalid choice: 'fp16'"),
    ],
)
def test_bad_values_name_the_flag(flag, value, message, tmp_path):
    proc = run_runner("bert", "--synthetic", flag, value, "--output-dir", str(tmp_path))
    assert_usage_error(proc, flag, message)


def test_no_data_source_says_how_to_give_one(tmp_path):
    assert_usage_error(run_runner("gpt2", "--output-dir", str(tmp_path)), "pass --synthetic or --data PATH")


def test_missing_data_file(tmp_path):
    proc = run_runner("bert", "--data", str(tmp_path / "nope.csv"), "--output-dir", str(tmp_path / "out"))
    assert_usage_error(proc, "--data", "nope.csv", "no such file")


def test_malformed_jsonl_line_is_named(tmp_path):
    data = tmp_path / "reviews.jsonl"
    data.write_text('{"text": "fine", "label": 1}\n{"text": "broken", "label": \n')
    proc = run_runner("bert", "--data", str(data), "--output-dir", str(tmp_path / "out"))
    assert_usage_error(proc, "reviews.jsonl line 2", "not valid JSON")


def test_missing_column_names_the_flag_to_fix_it(tmp_path):
    data = tmp_path / "reviews.csv"
    data.write_text("review,stars\ngreat,1\n")
    proc = run_runner("bert", "--data", str(data), "--output-dir", str(tmp_path / "out"))
    assert_usage_error(proc, "no column 'text'", "--text-column")


def test_label_out_of_range(tmp_path):
    data = tmp_path / "reviews.csv"
    data.write_text("text,label\n" + "".join(f"review {i},{i % 2}\n" for i in range(20)) + "five stars,5\n")
    proc = run_runner("bert", "--data", str(data), "--num-labels", "2", "--output-dir", str(tmp_path / "out"))
    assert_usage_error(proc, "label 5", "out of range for --num-labels 2")


def test_label_that_is_not_a_class_id(tmp_path):
    data = tmp_path / "reviews.csv"
    data.write_text("text,label\ngreat,positive\n")
    proc = run_runner("bert", "--data", str(data), "--output-dir", str(tmp_path / "out"))
    assert_usage_error(proc, "label 'positive'", "not an integer class id")


def test_npz_label_out_of_range(tmp_path):
    data = tmp_path / "images.npz"
    np.savez(data, images=np.zeros((20, 8, 8, 3), dtype=np.uint8), labels=np.arange(20))
    proc = run_runner("vit", "--data", str(data), "--num-labels", "10", "--output-dir", str(tmp_path / "out"))
    assert_usage_error(proc, "label 10", "out of range for --num-labels 10")


def test_data_smaller_than_one_batch(tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text("a short text about trainium.\n\nanother one.\n")
    proc = run_runner(
        "gpt2",
        "--data",
        str(data),
        "--seq-len",
        "4",
        "--batch-size",
        "64",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert_usage_error(proc, "fewer than one batch", "--batch-size")


def test_device_xla_without_torch_xla(tmp_path):
    # A torch_xla that fails to import, as on a host without it (or with a broken install).
    shadow = tmp_path / "shadow" / "torch_xla"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named torch_xla')\n")
    proc = run_runner(
        "bert",
        "--synthetic",
        "--device",
        "xla",
        "--output-dir",
        str(tmp_path / "out"),
        PYTHONPATH=str(shadow.parent),
    )
    assert_usage_error(proc, "--device xla", "torch_xla", "pip install torch-xla")
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def test_resume_from_a_missing_checkpoint(tmp_path):
    proc = run_runner(
        "vit", "--synthetic", "--resume", str(tmp_path / "gone.pt"), "--output-dir", str(tmp_path)
    )
    assert_usage_error(proc, "--resume", "gone.pt")


@pytest.mark.parametrize("runner", ["bert", "gpt2", "vit"])
def test_flags_json_lists_every_flag_with_type_and_default(runner):
    proc = run_runner(runner, "--flags-json")
    assert proc.returncode == 0, proc.stderr
    flags = {f["name"]: f for f in json.loads(proc.stdout)}
    assert flags["batch_size"]["type"] == "int"
    assert flags["batch_size"]["constraint"] == "positive"
    assert flags["warmup_steps"]["constraint"] == "non_negative"
    assert flags["eval_fraction"] == dict(flags["eval_fraction"], type="float", constraint="fraction")
    assert flags["seed"]["constraint"] is None
    assert flags["lr"]["type"] == "float"
    assert flags["synthetic"]["type"] == "switch"
    assert flags["precision"]["choices"] == ["fp32", "bf16", "autocast-bf16"]
    assert flags["device"]["default"] == "auto"
    assert ("seq_len" in flags) == (runner != "vit")
    assert ("image_size" in flags) == (runner == "vit")


def test_runner_scripts_never_import_trnconsole():
    imports = re.compile(r"^\s*(from|import)\s+trnconsole\b", re.MULTILINE)
    for path in RUNNERS.rglob("*.py"):
        assert not imports.search(path.read_text()), path


def test_argument_errors_come_before_importing_torch(tmp_path):
    # -X importtime lists every module imported; an argument error must not pay for torch.
    proc = run_runner(
        "bert", "--synthetic", "--steps", "0", "--output-dir", str(tmp_path), PYTHONPROFILEIMPORTTIME="1"
    )
    assert proc.returncode == 2
    assert not re.search(r"\|\s+torch$", proc.stderr, re.MULTILINE)


def test_resuming_a_run_already_at_its_steps_is_refused_and_keeps_its_result(tmp_path):
    ok = run_runner(
        "bert",
        "--synthetic",
        "--device",
        "cpu",
        "--steps",
        "4",
        "--log-every",
        "2",
        "--save-every",
        "4",
        "--output-dir",
        str(tmp_path),
    )
    assert ok.returncode == 0, ok.stderr
    before = (tmp_path / "result.json").read_text()
    again = run_runner(
        "bert",
        "--synthetic",
        "--device",
        "cpu",
        "--steps",
        "3",
        "--resume",
        "auto",
        "--output-dir",
        str(tmp_path),
    )
    assert_usage_error(again, "--resume", "checkpoint is at step 4", "raise --steps")
    assert (tmp_path / "result.json").read_text() == before
