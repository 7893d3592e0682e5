"""Any script watched for real, end to end: `trnconsole launch SCRIPT`, then `show --json`. A real Hugging
Face Trainer run (the installed transformers: 5.x here, 4.x on Python 3.10), and recordings of the other
libraries (tests/data/logs) replayed byte for byte, in uneven pieces, through the local backend."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_cli_local import launched_id, ok
from test_real_logs import LOGS, close, losses_by_step, recording
from test_script_tensorboard import run_cli

REPO = Path(__file__).resolve().parents[1]
HF_TRAINER = REPO / "tests" / "logsources" / "hf_trainer.py"

REPLAY = """
import random, sys, time
data = open(sys.argv[1], "rb").read()
rng = random.Random(0)
at = 0
while at < len(data):  # uneven pieces: a bar's frames cut anywhere, as a real pipe delivers them
    size = rng.randint(1, 400)
    sys.stdout.buffer.write(data[at : at + size])
    sys.stdout.buffer.flush()
    at += size
    time.sleep(0.002)
"""


def launch_and_show(home: Path, work: Path, script: Path, *script_args: str) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    # USE_TORCH_XLA=0: transformers and accelerate move to torch-xla's device wherever it is installed.
    out = ok(
        run_cli(home, "launch", str(script), "--follow", "--", *script_args, cwd=work, USE_TORCH_XLA="0")
    )
    return json.loads(ok(run_cli(home, "show", launched_id(out), "--json", cwd=work)))["summary"]


@pytest.mark.smoke
@pytest.mark.slow
def test_a_trainer_run_without_a_bar_takes_its_steps_from_its_trainer_state(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    summary = launch_and_show(
        tmp_path / "home",
        tmp_path / "work",
        HF_TRAINER,
        "--no-tqdm",
        "--output-dir",
        "out",
        "--state-json",
        "out/trainer_state.json",  # where trainer.save_state() puts it
    )
    state = json.loads((tmp_path / "work" / "out" / "trainer_state.json").read_text())
    history = [h for h in state["log_history"] if "loss" in h]
    assert (summary["step"], summary["total_steps"]) == (state["global_step"], state["max_steps"])
    assert summary["step_source"] == "trainer_state"
    assert close(summary["final_loss"], history[-1]["loss"])
    assert close(
        summary["eval"]["loss"], [h for h in state["log_history"] if "eval_loss" in h][-1]["eval_loss"]
    )
    reported = state["log_history"][-1]
    assert close(summary["reported"]["runtime_s"], reported["train_runtime"])
    assert close(summary["reported"]["loss"], reported["train_loss"])
    assert summary["malformed_lines"] == 0


@pytest.mark.slow
def test_a_trainer_run_with_its_bar_has_each_logged_loss_at_its_own_step(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    summary = launch_and_show(
        tmp_path / "home", tmp_path / "work", HF_TRAINER, "--state-json", str(tmp_path / "state.json")
    )
    state = json.loads((tmp_path / "state.json").read_text())
    assert (summary["step"], summary["total_steps"], summary["step_source"]) == (40, 40, "bar")
    assert summary["throughput"]["unit"] == "it/s"
    assert summary["series"]["loss"]["count"] == len([h for h in state["log_history"] if "loss" in h])
    assert close(summary["final_loss"], [h for h in state["log_history"] if "loss" in h][-1]["loss"])


REPLAYED = [
    "transformers-5.23.0_trainer_tqdm",
    "transformers-4.57.6_trainer_tqdm_pty",
    "pytorch-lightning-2.6.6_fit_default_rich_pty",
    "pytorch-lightning-2.6.6_fit_tqdm",
    "accelerate-1.15.0_loop_torchrun2",
    "tqdm-4.70.1_loop_write",
    "aws-neuron-sdk-docs-81ce03ae_dp-bert-phase1_trn1-32xlarge",
    "aws-neuron-sdk-docs-81ce03ae_mnist-mlp_trn1-32xlarge_torchrun2",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", REPLAYED)
def test_a_recording_replayed_by_a_launched_script_shows_the_figures_its_library_recorded(
    tmp_path: Path, name: str
) -> None:
    script = tmp_path / "replay.py"
    script.write_text(REPLAY)
    truth_path = LOGS / f"{name}.truth.json"
    _, truth = recording(truth_path)
    summary = launch_and_show(tmp_path / "home", tmp_path / "work", script, str(LOGS / f"{name}.txt"))
    assert summary["malformed_lines"] == 0
    if "final_step" in truth:
        assert summary["step"] == truth["final_step"]
    if truth.get("bar"):
        assert summary["total_steps"] == truth["total_steps"]
    expected = losses_by_step(truth)
    if expected:
        assert any(close(summary["final_loss"], want) for want in expected[max(expected)])
    for library_name, ours in (("train_throughput_iter_per_sec", "it_per_s"), ("final_loss", "loss")):
        if library_name in (truth.get("summary") or {}):
            assert math.isclose(summary["reported"][ours], truth["summary"][library_name], rel_tol=5e-3)


LIVE = {
    "lightning-default-bar": ("lightning_fit.py", "pytorch_lightning"),
    "lightning-tqdm-bar": ("lightning_fit.py", "pytorch_lightning", "--progress-bar", "tqdm"),
    "accelerate": ("accelerate_loop.py", "accelerate"),
    "tqdm-write": ("tqdm_loop.py", "tqdm", "--mode", "write"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", LIVE, ids=list(LIVE))
def test_a_library_run_live_shows_the_figures_the_library_recorded(tmp_path: Path, case: str) -> None:
    script, module, *flags = LIVE[case]
    pytest.importorskip(module)
    truth_path = tmp_path / "truth.json"
    summary = launch_and_show(
        tmp_path / "home", tmp_path / "work", HF_TRAINER.parent / script, *flags, "--truth", str(truth_path)
    )
    truth = json.loads(truth_path.read_text())
    assert summary["malformed_lines"] == 0
    assert (summary["step"], summary["total_steps"]) == (truth["final_step"], truth["total_steps"])
    expected = losses_by_step(truth)
    assert any(close(summary["final_loss"], want) for want in expected[max(expected)])
    if truth.get("evals"):
        assert summary["eval"], summary


def test_a_scripts_flags_reach_it_whole_even_those_that_abbreviate_torchruns(tmp_path: Path) -> None:
    script = tmp_path / "argv.py"
    script.write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    args = ["--logs", "out", "--max", "3", "--nproc_per_node", "9", "--", "x"]
    out = ok(run_cli(home, "launch", str(script), "--follow", "--", *args, cwd=work))
    log = ok(run_cli(home, "logs", launched_id(out), cwd=work))
    assert json.dumps(args) in log
