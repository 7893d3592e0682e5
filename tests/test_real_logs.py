"""Every recording in tests/data/logs (real output of real libraries; see its README for each one's origin)
read into a run's figures, checked against what the library itself recorded: a Trainer's trainer_state.json,
Lightning's CSVLogger, the values a script gave tqdm or accelerate's tracker, a sample's own printed text."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from trnconsole.core.hf_state import read_trainer_state
from trnconsole.core.metrics import RunMetrics

LOGS = Path(__file__).parent / "data" / "logs"
TRUTHS = sorted(LOGS.glob("*.truth.json"))
# Lightning's CSVLogger counts steps from 0; its bar counts the batches done.
STEP_OFFSET = {"pytorch-lightning": 1}
EVAL_PREFIXES = ("eval_", "val_")


def recording(truth_path: Path) -> tuple[str, dict[str, Any]]:
    name = truth_path.name.removesuffix(".truth.json")
    rank_files = sorted((LOGS / f"{name}.logdir").glob("*/attempt_0/0/std*.log"))
    if rank_files:  # torchrun --log-dir: each rank's stdout.log and stderr.log; rank 0's are read
        text = "".join(path.read_bytes().decode("utf-8", errors="replace") for path in rank_files)
        return text, json.loads(truth_path.read_text())
    text_path = LOGS / f"{name}.txt"
    if not text_path.exists():
        text_path = LOGS / f"{name}.stdout.txt"  # stdout and stderr kept apart: the log dicts are on stdout
    # bytes, not read_text: universal newlines would turn a bar's \r frames into lines
    return text_path.read_bytes().decode("utf-8", errors="replace"), json.loads(truth_path.read_text())


def read(truth_path: Path) -> tuple[RunMetrics, dict[str, Any], bool]:
    """The recording read as the console reads a run's log, its truth, and whether it holds a bar."""
    text, truth = recording(truth_path)
    metrics = RunMetrics()
    state = read_trainer_state(
        truth_path.with_name(truth_path.name.replace(".truth.json", ".trainer_state.json"))
    )
    if state is not None and "%|" not in text:
        metrics.steps_per_epoch = state.steps_per_epoch  # no bar: what the service takes from the state file
    metrics.feed_log_lines(text.split("\n"))
    metrics.settle()
    return metrics, truth, "%|" in text or "•" in text


def close(a: float, b: float) -> bool:
    """Equal as printed: the Trainer prints 4 significant digits, Lightning 3 decimals."""
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=5e-3, abs_tol=1e-3)


def losses_by_step(truth: dict[str, Any]) -> dict[int, list[float]]:
    """Every loss the library recorded at each step as the log shows it: the step's mean and each rank's."""
    offset = STEP_OFFSET.get(truth["library"], 0)
    found: dict[int, list[float]] = {}
    entries = list(truth.get("steps") or [])
    for rank_entries in (truth.get("per_rank") or {}).values():
        entries += rank_entries
    # Steps done before each epoch: a bar made anew per epoch counts from 0 (tqdm_loop.py --mode nested).
    before_epoch: dict[int, int] = {}
    for entry in entries:
        if "bar_n" in entry:
            epoch = entry.get("epoch", 0)
            before_epoch[epoch] = min(before_epoch.get(epoch, entry["step"]), entry["step"] - 1)
    for entry in entries:
        loss = entry.get("loss", entry.get("train_loss"))
        if loss is None:
            continue
        found.setdefault(entry["step"] + offset, []).append(loss)
        if "bar_n" in entry:
            # set_postfix during step s draws the count of steps done, s - 1 where the bar kept up, else the
            # count the bar last drew (kept as bar.n + 1 by tqdm_loop.py)
            found.setdefault(entry["step"] - 1, []).append(loss)
            found.setdefault(before_epoch[entry.get("epoch", 0)] + entry["bar_n"] - 1, []).append(loss)
    return found


@pytest.mark.parametrize("truth_path", TRUTHS, ids=lambda p: p.name.removesuffix(".truth.json"))
def test_a_recording_reads_into_the_figures_its_library_recorded(truth_path: Path) -> None:
    metrics, truth, has_bar = read(truth_path)
    summary = metrics.summary()
    assert summary["malformed_lines"] == 0

    if "final_step" in truth:
        assert summary["step"] == truth["final_step"]
    if truth.get("bar") and has_bar:
        assert summary["total_steps"] == truth["total_steps"]
        assert summary["throughput"]["unit"] == f"{truth['bar']['unit']}/s"

    expected = losses_by_step(truth)
    if expected:
        xs, ys, _, _ = metrics.series["loss"].points()
        # RichProgressBar draws from its own thread: a frame may pair the count with the batch before's loss.
        lag = 1 if "•" in recording(truth_path)[0] else 0
        for x, y in zip(xs, ys, strict=True):
            wanted = [v for step in range(int(x) - lag, int(x) + 1) for v in expected.get(step, ())]
            assert any(close(y, want) for want in wanted), (x, y, wanted)
        final = max(expected)
        assert any(close(summary["final_loss"], want) for want in expected[final])

    if truth.get("evals"):
        last = {}
        for name, value in truth["evals"][-1].items():
            if name in ("step", "epoch"):
                continue
            for prefix in EVAL_PREFIXES:
                name = name.removeprefix(prefix)
            last[{"runtime": "runtime_s", "samples_per_second": "samples_per_s"}.get(name, name)] = value
        shown = {name: value for name, value in summary["eval"].items() if name in last}
        assert shown, (summary["eval"], last)
        assert all(close(value, last[name]) for name, value in shown.items()), (shown, last)

    reported = truth.get("summary") or {}
    for library_name, ours in (
        ("train_runtime", "runtime_s"),
        ("train_samples_per_second", "samples_per_s"),
        ("train_loss", "loss"),
        ("train_throughput_iter_per_sec", "it_per_s"),
        ("final_loss", "loss"),
    ):
        if library_name in reported:
            assert close(summary["reported"][ours], reported[library_name]), library_name


def test_the_corpus_holds_every_library_the_console_reads() -> None:
    libraries = {json.loads(path.read_text())["library"].split()[0] for path in TRUTHS}
    assert {"transformers", "accelerate", "pytorch-lightning", "tqdm", "torch"} <= libraries
    assert any(name.startswith("aws-neuron") for name in libraries)
