"""Runner overhead: the same model and batches stepped by the bundled runner and by a minimal hand-written
loop, on eager CPU and on XLA (CPU PJRT), side by side in one run.

Prints the steady-state step time of each, the ratio runner/minimal (goal <= 1.05), and the runner's MFU
against a matmul peak measured in this same run.

    python benchmarks/runner_overhead.py [--runner bert] [--steps 60] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNNERS = Path(__file__).resolve().parents[1] / "runners"
TASKS = {"bert": "BertClassification", "gpt2": "Gpt2CausalLM", "vit": "VitClassification"}

# The minimal loop: the same task's data and model, no harness. It does the same maths per step as the
# runner (AdamW, gradient clipping, the LR schedule) so the difference is the harness itself.
MINIMAL = """
import sys, time, torch
sys.path.insert(0, {runners!r})
from {runner} import build_parser, {task}
args = build_parser().parse_args({args!r})
task = {task}(); data = task.prepare_data(args); torch.manual_seed(args.seed)
model = task.build_model(args, data)
xla = {device!r} == "xla"
if xla:
    import torch_xla, torch_xla.core.xla_model as xm, torch_xla.distributed.parallel_loader as pl
dev = torch_xla.device() if xla else torch.device("cpu")
model.to(dev); task.after_move(model); model.train()
opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
names = list(data.train)
tensors = torch.utils.data.TensorDataset(*[torch.from_numpy(data.train[n]) for n in names])
loader = torch.utils.data.DataLoader(tensors, batch_size=args.batch_size, shuffle=True, drop_last=True)
loader = pl.MpDeviceLoader(loader, dev) if xla else loader
sync = xm.wait_device_ops if xla else (lambda: None)
for i, values in enumerate(loader):
    if i == {warm}:
        sync(); start = time.perf_counter()
    loss = task.loss(model, dict(zip(names, values)))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step(); opt.zero_grad(set_to_none=True)
    if i + 1 == args.steps:
        break
if xla:
    torch_xla.sync()
sync(); print((time.perf_counter() - start) / (args.steps - {warm}))
"""


def env_for(device: str) -> dict[str, str]:
    env = dict(os.environ, PJRT_DEVICE="CPU", HF_HUB_OFFLINE="1", TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("XLA_USE_BF16", None)
    return env


def runner_step_time(runner: str, device: str, flags: list[str], out: Path) -> tuple[float, dict]:
    cmd = [
        sys.executable,
        str(RUNNERS / f"{runner}.py"),
        *flags,
        "--device",
        device,
        "--output-dir",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, env=env_for(device))
    result = json.loads((out / "result.json").read_text())
    started = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    return result["avg_step_time_s"], {**result, "flops_per_sample": started["flops_per_sample"]}


def minimal_step_time(runner: str, device: str, flags: list[str], warm: int) -> float:
    script = MINIMAL.format(
        runners=str(RUNNERS), runner=runner, task=TASKS[runner], args=flags, device=device, warm=warm
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True, env=env_for(device)
    )
    return float(proc.stdout.strip().splitlines()[-1])


def matmul_peak() -> float:
    import torch

    n, best = 1024, 0.0
    a, b = torch.randn(n, n), torch.randn(n, n)
    deadline = time.perf_counter() + 1.0
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        (a @ b).sum().item()
        best = max(best, 2 * n**3 / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runner", choices=sorted(TASKS), default="bert")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--devices", default="cpu,xla")
    opts = parser.parse_args()
    flags = [
        "--synthetic",
        "--steps",
        str(opts.steps),
        "--batch-size",
        str(opts.batch_size),
        "--log-every",
        str(opts.log_every),
        "--lr-schedule",
        "constant",
        "--synthetic-samples",
        "2048",
    ]
    peak = matmul_peak()
    print(
        f"{opts.runner} tiny, batch {opts.batch_size}, {opts.steps} steps (first {opts.log_every} excluded), "
        f"best of {opts.repeats}; CPU fp32 matmul peak {peak / 1e9:.1f} GFLOP/s"
    )
    print(f"{'device':<8}{'runner s/step':>15}{'minimal s/step':>16}{'ratio':>8}{'runner MFU':>12}")
    for device in opts.devices.split(","):
        runner_times, minimal_times, results = [], [], []
        for _ in range(opts.repeats):  # interleaved, so drift in machine load hits both alike
            with tempfile.TemporaryDirectory() as tmp:
                seconds, result = runner_step_time(opts.runner, device, flags, Path(tmp))
            runner_times.append(seconds)
            results.append(result)
            minimal_times.append(minimal_step_time(opts.runner, device, flags, opts.log_every))
        best_runner, best_minimal = min(runner_times), min(minimal_times)
        result = results[runner_times.index(best_runner)]
        mfu = result["flops_per_sample"] * result["avg_samples_per_s"] / peak
        ratio = best_runner / best_minimal
        print(f"{device:<8}{best_runner:>15.4f}{best_minimal:>16.4f}{ratio:>8.3f}{mfu:>12.4f}")
        paired = [r / m for r, m in zip(runner_times, minimal_times, strict=True)]
        print(
            f"{'':<8}runner all: {', '.join(f'{t:.4f}' for t in runner_times)}; "
            f"minimal all: {', '.join(f'{t:.4f}' for t in minimal_times)}; "
            f"median ratio {statistics.median(runner_times) / statistics.median(minimal_times):.3f}; "
            f"median of paired ratios {statistics.median(paired):.3f}"
        )


if __name__ == "__main__":
    main()
