"""Local data files and local model directories, on the plain CPU device (fast): nothing is downloaded."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import check_ok, read_events, read_result, run_runner

pytestmark = pytest.mark.slow

QUICK = ["--device", "cpu", "--steps", "3", "--log-every", "1", "--batch-size", "4"]


def write_reviews(path, n=48):
    good, bad = "great fast solid love it works", "broken slow awful refund poor"
    rows = [f'"{(good if i % 2 else bad)} item {i}",{i % 2}' for i in range(n)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")


def test_bert_trains_on_a_csv_with_a_tokenizer_trained_on_the_fly(tmp_path):
    data = tmp_path / "reviews.csv"
    write_reviews(data)
    out = tmp_path / "out"
    check_ok(run_runner("bert", "--data", str(data), "--seq-len", "16", *QUICK, "--output-dir", str(out)))
    assert (out / "tokenizer.json").is_file()
    result = read_result(out)
    assert result["status"] == "completed" and "eval_accuracy" in result


def test_bert_reads_jsonl_with_named_columns(tmp_path):
    data = tmp_path / "reviews.jsonl"
    data.write_text("".join(f'{{"review": "text number {i}", "stars": {i % 3}}}\n' for i in range(40)))
    out = tmp_path / "out"
    proc = run_runner(
        "bert",
        "--data",
        str(data),
        "--text-column",
        "review",
        "--label-column",
        "stars",
        "--num-labels",
        "3",
        "--seq-len",
        "8",
        *QUICK,
        "--output-dir",
        str(out),
    )
    check_ok(proc)
    assert read_result(out)["step"] == 3


def test_gpt2_trains_on_plain_text(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n\n".join(f"Paragraph {i}: the trainium chip trains models quickly." for i in range(80))
    )
    out = tmp_path / "out"
    check_ok(run_runner("gpt2", "--data", str(corpus), "--seq-len", "16", *QUICK, "--output-dir", str(out)))
    assert read_result(out)["eval_perplexity"] > 1


def test_vit_trains_on_an_image_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label, name in enumerate(["cats", "dogs"]):
        (tmp_path / "images" / name).mkdir(parents=True)
        for i in range(12):
            pixels = rng.integers(0, 255, size=(40, 48, 3), dtype=np.uint8) // (label + 1)
            Image.fromarray(pixels).save(tmp_path / "images" / name / f"{i}.png")
    out = tmp_path / "out"
    proc = run_runner(
        "vit",
        "--data",
        str(tmp_path / "images"),
        "--num-labels",
        "2",
        "--eval-fraction",
        "0.2",
        *QUICK,
        "--output-dir",
        str(out),
    )
    check_ok(proc)
    assert read_result(out)["status"] == "completed"


def test_vit_trains_on_an_npz_resized_to_the_model(tmp_path):
    data = tmp_path / "images.npz"
    rng = np.random.default_rng(0)
    np.savez(
        data, images=rng.integers(0, 255, size=(24, 20, 20, 3), dtype=np.uint8), labels=np.arange(24) % 3
    )
    out = tmp_path / "out"
    check_ok(run_runner("vit", "--data", str(data), "--num-labels", "3", *QUICK, "--output-dir", str(out)))
    started = next(e for e in read_events(out) if e["kind"] == "status")
    assert started["device"] == "cpu"


def test_bert_from_a_local_hugging_face_directory(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    data = tmp_path / "reviews.csv"
    write_reviews(data)
    raw = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(
        ["great fast solid broken slow awful item"] * 10,
        trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )
    model_dir = tmp_path / "tiny-bert"
    cfg = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=2,
    )
    BertForSequenceClassification(cfg).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "out"
    proc = run_runner(
        "bert",
        "--model-path",
        str(model_dir),
        "--data",
        str(data),
        "--seq-len",
        "16",
        *QUICK,
        "--output-dir",
        str(out),
    )
    check_ok(proc)
    started = next(e for e in read_events(out) if e["kind"] == "status")
    assert started["model_path"] == str(model_dir)
    assert started["params"] == sum(p.numel() for p in BertForSequenceClassification(cfg).parameters())
    assert not (out / "tokenizer.json").exists()  # the directory's own tokenizer was used


def test_sigterm_stops_cleanly_with_a_result(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from conftest import RUNNERS, runner_env

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(RUNNERS / "bert.py"),
            "--synthetic",
            "--device",
            "cpu",
            "--steps",
            "100000",
            "--log-every",
            "1",
            "--output-dir",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=runner_env(),
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (
        (out / "metrics.jsonl").exists() and '"kind": "step"' in (out / "metrics.jsonl").read_text()
    ):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    result = read_result(out)
    assert result["status"] == "stopped" and 0 < result["step"] < 100000
    assert read_events(out)[-1]["state"] == "stopped"


@pytest.mark.parametrize("precision", ["bf16", "autocast-bf16"])
def test_low_precision_modes_train(precision, tmp_path):
    import torch

    out = tmp_path / "out"
    proc = run_runner(
        "vit",
        "--synthetic",
        "--precision",
        precision,
        "--save-every",
        "3",
        *QUICK,
        "--output-dir",
        str(out),
        XLA_USE_BF16="1",
    )
    check_ok(proc)
    assert "XLA_USE_BF16/XLA_DOWNCAST_BF16 are deprecated" in proc.stderr
    result = read_result(out)
    assert result["precision"] == precision and result["final_loss"] == result["final_loss"]  # not NaN
    state = torch.load(out / "checkpoints" / "step_00000003.pt", map_location="cpu", weights_only=True)
    weight = state["model"]["classifier.weight"]
    assert weight.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
