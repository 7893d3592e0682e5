"""A plain DistributedDataParallel loop on the CPU (gloo) for recording torchrun's own output.

Meant to run under `python -m torch.distributed.run --nproc_per_node 2 ...` with `--tee`, `--redirects`,
`--log-dir` or `--local-ranks-filter`: every rank prints its local loss each `--print-every` steps, rank 0
also prints the all-reduced mean and drives a tqdm bar. Rank 0 gathers what each rank printed into `--truth`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--print-every", type=int, default=5)
    parser.add_argument("--no-tqdm", action="store_true")
    parser.add_argument(
        "--step-seconds", type=float, default=0.05, help="sleep per step, so the ranks' lines are spaced"
    )
    parser.add_argument("--truth", type=Path, default=None, help="write the ground truth JSON here")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from tqdm import tqdm

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)
    weights = torch.linspace(-1, 1, 8)

    print(f"rank {rank}/{world} (local rank {os.environ.get('LOCAL_RANK')}) starting", flush=True)
    bar = tqdm(total=args.steps, disable=args.no_tqdm or rank != 0)
    mine: list[dict] = []
    means: list[dict] = []
    for step in range(1, args.steps + 1):
        x = torch.randn(16, 8, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), x @ weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bar.update(1)
        if step % args.print_every == 0:
            local = loss.item()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            mean = mean.item() / world
            print(f"rank {rank} step {step} loss {local:.4f}", flush=True)
            mine.append({"step": step, "loss": local})
            if rank == 0:
                bar.write(f"step {step}/{args.steps} mean loss {mean:.4f}")
                means.append({"step": step, "loss": mean})
        time.sleep(args.step_seconds)
    bar.close()
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine)
    dist.barrier()  # all ranks leave together: a rank tearing gloo down early can abort the other one's exit
    dist.destroy_process_group()

    if args.truth and rank == 0:
        truth = {
            "library": "torch",
            "version": torch.__version__,
            "source": "values the script printed (mean: all-reduced over ranks), kept by the script",
            "total_steps": args.steps,
            "final_step": args.steps,
            "steps": means,
            "per_rank": {str(r): lines for r, lines in enumerate(gathered)},
        }
        if not args.no_tqdm:
            truth["bar"] = {"total": args.steps, "unit": "it"}
        args.truth.parent.mkdir(parents=True, exist_ok=True)
        args.truth.write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
