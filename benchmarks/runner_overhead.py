"""Runner overhead: the same model and batches stepped by the bundled runner and by a minimal hand-written
loop, on eager CPU and on XLA (CPU PJRT), and on CUDA where there is a GPU (`--devices cuda`), side by side
in one run.

Both loops run in the same process per device, alternately (runner, minimal, runner, ...), so the process-
to-process spread of this machine (allocator state, CPU placement, neighbours: +-15% between identical
processes here) does not land on one side only. Prints the steady-state step time of each, the best-of and
the median paired ratio runner/minimal (goal <= 1.05), and the runner's MFU against a matmul peak measured
in this same run.

    python benchmarks/runner_overhead.py [--runner bert] [--steps 100] [--repeats 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNNERS = Path(__file__).resolve().parents[1] / "runners"
TASKS = {"bert": "BertClassification", "gpt2": "Gpt2CausalLM", "vit": "VitClassification"}

# One process per device: the runner (its real entry point, in-process) and the minimal loop take turns.
# The minimal loop does the same maths per step as the runner (AdamW, gradient clipping, the LR schedule)
# so the difference is the harness itself.
WORKER = """
import io, json, sys, tempfile, time, contextlib
from pathlib import Path
import torch
sys.path.insert(0, {runners!r})
from {runner} import build_parser, {task}
from trn_harness.loop import main

flags, device, warm, repeats = {flags!r}, {device!r}, {warm}, {repeats}
xla = device == "xla"
if xla:
    import torch_xla, torch_xla.core.xla_model as xm, torch_xla.distributed.parallel_loader as pl


def minimal():
    args = build_parser().parse_args(flags)
    task = {task}(); data = task.prepare_data(args); torch.manual_seed(args.seed)
    model = task.build_model(args, data)
    dev = torch_xla.device() if xla else torch.device(device)
    model.to(dev); task.after_move(model); model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    names = list(data.train)
    tensors = torch.utils.data.TensorDataset(*[torch.from_numpy(data.train[n]) for n in names])
    loader = torch.utils.data.DataLoader(tensors, batch_size=args.batch_size, shuffle=True, drop_last=True)
    loader = pl.MpDeviceLoader(loader, dev) if xla else loader
    sync = xm.wait_device_ops if xla else torch.cuda.synchronize if device == "cuda" else (lambda: None)
    i = 0
    while i < args.steps:  # as many epochs as the steps need, as the runner does
        for values in loader:
            if i == warm:
                sync(); start = time.perf_counter()
            if not xla:
                values = [v.to(dev, non_blocking=True) for v in values]
            loss = task.loss(model, dict(zip(names, values)))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step(); opt.zero_grad(set_to_none=True)
            i += 1
            if i == args.steps:
                break
    if xla:
        torch_xla.sync()
    sync()
    return (time.perf_counter() - start) / (args.steps - warm)


def runner():
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        code = main({task}(), build_parser(), [*flags, "--device", device, "--output-dir", out])
        assert code == 0, code
        result = json.loads((Path(out) / "result.json").read_text())
        started = json.loads((Path(out) / "metrics.jsonl").read_text().splitlines()[0])
    result["flops_per_sample"] = started["flops_per_sample"]
    return result


times = {{"runner": [], "minimal": [], "result": None}}
for _ in range(repeats):
    result = runner()
    times["runner"].append(result["avg_step_time_s"])
    times["result"] = result
    times["minimal"].append(minimal())
print(json.dumps(times))
"""


WIDTHS = (8, 15, 16, 12, 13, 8)


def env_for(device: str) -> dict[str, str]:
    env = dict(os.environ, PJRT_DEVICE="CPU", HF_HUB_OFFLINE="1", TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("XLA_USE_BF16", None)
    return env


def measure(runner: str, device: str, flags: list[str], warm: int, repeats: int) -> dict:
    script = WORKER.format(
        runners=str(RUNNERS),
        runner=runner,
        task=TASKS[runner],
        flags=flags,
        device=device,
        warm=warm,
        repeats=repeats,
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env_for(device), check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{device} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=4)
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
        f"{opts.repeats} alternating pairs per device in one process; "
        f"CPU fp32 matmul peak {peak / 1e9:.1f} GFLOP/s"
    )
    header = ("device", "runner s/step", "minimal s/step", "best ratio", "median pair", "MFU")
    print(
        "".join(
            f"{h:<8}" if i == 0 else f"{h:>{w}}" for i, (h, w) in enumerate(zip(header, WIDTHS, strict=True))
        )
    )
    for device in opts.devices.split(","):
        times = measure(opts.runner, device, flags, opts.log_every, opts.repeats)
        runner_times, minimal_times, result = times["runner"], times["minimal"], times["result"]
        best_runner, best_minimal = min(runner_times), min(minimal_times)
        paired = statistics.median(r / m for r, m in zip(runner_times, minimal_times, strict=True))
        # On a GPU the runner's own MFU (its data-sheet peak); elsewhere against the matmul peak here.
        mfu = (
            result["mfu"]
            if device == "cuda"
            else result["flops_per_sample"] * opts.batch_size / best_runner / peak
        )
        print(
            f"{device:<8}{best_runner:>15.4f}{best_minimal:>16.4f}{best_runner / best_minimal:>12.3f}"
            f"{paired:>13.3f}{mfu:>8.4f}"
        )
        print(
            f"{'':<8}runner all: {', '.join(f'{t:.4f}' for t in runner_times)}; "
            f"minimal all: {', '.join(f'{t:.4f}' for t in minimal_times)}"
        )


if __name__ == "__main__":
    main()
