"""Each runner on real torch-xla (the CPU PJRT client): learning, no recompilation after warm-up, outputs,
resume, and checkpoints that load with plain torch.load into a CPU model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import RUNNERS, check_ok, read_events, read_result, run_runner, runner_env

pytestmark = pytest.mark.slow

FIRST_STEPS, RESUMED_STEPS, EVAL_EVERY, SAVE_EVERY, LOG_EVERY = 32, 40, 8, 16, 4
COMMON = [
    "--synthetic",
    "--device",
    "xla",
    "--synthetic-samples",
    "512",
    "--lr-schedule",
    "constant",
    "--log-every",
    str(LOG_EVERY),
    "--eval-every",
    str(EVAL_EVERY),
    "--save-every",
    str(SAVE_EVERY),
]
# One runner also accumulates gradients over several device-loader batches per execution.
EXTRA = {"vit": ["--grad-accum", "2", "--batches-per-execution", "2"]}
LOG_LINE = re.compile(
    r"^LOG \w{3} \w{3} +\d+ [\d:]+ \d{4} - \((\d+), (\d+)\) step_loss : ([\d.]+) learning_rate : ([\d.e+-]+) "
    r"throughput : ([\d.]+)"
)


@dataclass
class XlaRun:
    runner: str
    output_dir: Path
    first: subprocess.CompletedProcess
    resumed: subprocess.CompletedProcess

    def events(self) -> list[dict]:
        return read_events(self.output_dir)

    def runs(self) -> list[list[dict]]:
        """The events of each process run, split at their 'started' status events."""
        split: list[list[dict]] = []
        for event in self.events():
            if event["kind"] == "status" and event["state"] == "started":
                split.append([])
            split[-1].append(event)
        return split


@pytest.fixture(scope="module", params=["bert", "gpt2", "vit"])
def xla_run(request, tmp_path_factory) -> XlaRun:
    out = tmp_path_factory.mktemp(f"xla-{request.param}")
    flags = [*COMMON, *EXTRA.get(request.param, []), "--output-dir", str(out)]
    first = run_runner(request.param, *flags, "--steps", str(FIRST_STEPS))
    check_ok(first)
    resumed = run_runner(request.param, *flags, "--steps", str(RESUMED_STEPS), "--resume", "auto")
    check_ok(resumed)
    return XlaRun(request.param, out, first, resumed)


@pytest.mark.smoke
def test_loss_falls_on_synthetic_data(xla_run):
    losses = [e["loss"] for e in xla_run.runs()[0] if e["kind"] == "step"]
    assert len(losses) == FIRST_STEPS // LOG_EVERY
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 * 0.97, losses
    evals = [e["loss"] for e in xla_run.events() if e["kind"] == "eval"]
    assert evals[-1] < evals[0], evals


@pytest.mark.smoke
def test_no_graph_compiles_after_warm_up(xla_run):
    for run in xla_run.runs():
        start = run[0]["step"]
        compiles = [e for e in run if e["kind"] == "compile"]
        assert compiles, "torch_xla reported no compilation at all"
        assert not [e for e in compiles if e["after_warmup"]], compiles
        first_eval = min(e["step"] for e in run if e["kind"] == "eval")
        for event in compiles:
            if event["phase"] == "train":
                assert event["step"] - start <= 3, event
            else:
                assert event["phase"] == "eval" and event["step"] == first_eval, event
    assert read_result(xla_run.output_dir)["compiles_after_warmup"] == 0


@pytest.mark.smoke
def test_outputs_are_well_formed(xla_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = xla_run.events()
    for event in events:
        assert {"t", "kind", "step"} <= set(event), event
    result = read_result(xla_run.output_dir)
    assert result["status"] == "completed" and result["step"] == RESUMED_STEPS
    for key in (
        "final_loss",
        "avg_samples_per_s",
        "peak_samples_per_s",
        "mfu",
        "compile_count",
        "compile_seconds",
        "wall_time_s",
    ):
        assert isinstance(result[key], (int, float)) and result[key] >= 0, key
    assert 0 < result["mfu"] < 1
    metric = "perplexity" if xla_run.runner == "gpt2" else "accuracy"
    assert f"eval_{metric}" in result

    log_steps = [int(m.group(2)) for m in map(LOG_LINE.match, xla_run.first.stdout.splitlines()) if m]
    assert log_steps == list(range(LOG_EVERY, FIRST_STEPS + 1, LOG_EVERY)), xla_run.first.stdout

    tb = EventAccumulator(str(xla_run.output_dir / "tb"))
    tb.Reload()
    assert {"train/loss", "train/samples_per_s", "train/mfu", f"eval/{metric}"} <= set(tb.Tags()["scalars"])
    tb_steps = [s.step for s in tb.Scalars("train/loss")]
    assert tb_steps == list(range(LOG_EVERY, RESUMED_STEPS + 1, LOG_EVERY))


@pytest.mark.smoke
def test_resume_continues_the_step_count(xla_run):
    _, resumed = xla_run.runs()
    assert resumed[0]["step"] == FIRST_STEPS
    assert resumed[0]["resumed_from"].endswith(f"step_{FIRST_STEPS:08d}.pt")
    steps = [e["step"] for e in resumed if e["kind"] == "step"]
    assert steps == list(range(FIRST_STEPS + LOG_EVERY, RESUMED_STEPS + 1, LOG_EVERY))
    assert f"resuming at step {FIRST_STEPS}" in xla_run.resumed.stdout


CHECK_CHECKPOINT = """
import json, sys, torch
sys.path.insert(0, {runners!r})
from {runner} import build_parser, {task}
import torch_xla
args = build_parser().parse_args({args!r})
task = {task}()
data = task.prepare_data(args)
state = torch.load({path!r}, map_location="cpu", weights_only=True)
def build():
    model = task.build_model(args, data)
    model.load_state_dict(state["model"])
    return model.eval()
inputs = {{k: torch.from_numpy(v[:4]) for k, v in data.eval.items() if k != "labels"}}
cpu = build()
xla = build().to(torch_xla.device())
task.after_move(xla)
with torch.no_grad():
    cpu_logits = cpu(**inputs).logits
    xla_logits = xla(**{{k: v.to(torch_xla.device()) for k, v in inputs.items()}}).logits.cpu()
out = {{"max_diff": (cpu_logits - xla_logits).abs().max().item(), "scale": cpu_logits.abs().max().item()}}
if {runner!r} == "gpt2":
    out["cpu_tied"] = cpu.lm_head.weight is cpu.transformer.wte.weight
    out["xla_tied"] = xla.lm_head.weight is xla.transformer.wte.weight
    saved = state["model"]
    out["saved_equal"] = torch.equal(saved["lm_head.weight"], saved["transformer.wte.weight"])
print(json.dumps(out))
"""
TASKS = {"bert": "BertClassification", "gpt2": "Gpt2CausalLM", "vit": "VitClassification"}


@pytest.mark.smoke
def test_xla_checkpoint_loads_into_a_plain_cpu_model_with_the_same_logits(xla_run):
    path = xla_run.output_dir / "checkpoints" / f"step_{FIRST_STEPS:08d}.pt"
    script = CHECK_CHECKPOINT.format(
        runners=str(RUNNERS),
        runner=xla_run.runner,
        task=TASKS[xla_run.runner],
        path=str(path),
        args=["--synthetic", "--synthetic-samples", "512", "--output-dir", str(xla_run.output_dir)],
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=runner_env(), timeout=300
    )
    check_ok(proc)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["max_diff"] <= 1e-4 * max(1.0, out["scale"]), out
    if xla_run.runner == "gpt2":
        # Trained on XLA with the re-tie in place, the LM head and the embedding are still one matrix.
        assert out == out | {"cpu_tied": True, "xla_tied": True, "saved_equal": True}, out
