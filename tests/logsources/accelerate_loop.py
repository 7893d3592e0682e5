"""A plain Hugging Face accelerate training loop, recorded as a parser fixture.

`Accelerator()` prepares a small MLP, its optimizer and loaders; `accelerator.print` writes a loss line every
`--print-every` steps and an evaluation line per epoch; a tqdm bar runs on the local main process only.
`accelerator.log` sends the same figures to a tracker of accelerate's `GeneralTracker` kind that keeps them,
and that record becomes the ground truth (`--truth`). Runs alone or under torchrun / `accelerate launch`.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=320)
    parser.add_argument("--batch-size", type=int, default=16, help="per process")
    parser.add_argument("--print-every", type=int, default=5)
    parser.add_argument("--no-tqdm", action="store_true")
    parser.add_argument("--truth", type=Path, default=None, help="write the ground truth JSON here")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # accelerate moves everything to XLA whenever torch-xla is installed, unless told not to.
    os.environ["USE_TORCH_XLA"] = "0"
    import accelerate
    import torch
    from accelerate import Accelerator
    from accelerate.tracking import GeneralTracker
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader, TensorDataset
    from tqdm.auto import tqdm

    class KeepingTracker(GeneralTracker):
        """Keeps every `accelerator.log` call, as a tracker receives it (main process only)."""

        name = "keeping"
        requires_logging_directory = False

        def __init__(self) -> None:
            super().__init__()
            self.records: list[dict] = []

        @property
        def tracker(self) -> list[dict]:
            return self.records

        def store_init_configuration(self, values: dict) -> None:
            self.config = dict(values)

        def log(self, values: dict, step: int | None = None, **kwargs) -> None:
            self.records.append({"step": step, **values})

    keeper = KeepingTracker()
    # cpu=True: without it accelerate finds no accelerator and leaves each rank of a launch to train alone.
    accelerator = Accelerator(cpu=True, log_with=keeper)
    accelerator.init_trackers(
        "accelerate_loop", config={"epochs": args.epochs, "batch_size": args.batch_size}
    )
    set_seed(0)
    torch.set_num_threads(1)

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(args.samples, 16, generator=gen)
    y = (x[:, :4].sum(dim=1) > 0).long()
    train = TensorDataset(x[: args.samples * 3 // 4], y[: args.samples * 3 // 4])
    val = TensorDataset(x[args.samples * 3 // 4 :], y[args.samples * 3 // 4 :])
    train_loader = DataLoader(train, batch_size=args.batch_size, shuffle=True, generator=gen)
    val_loader = DataLoader(val, batch_size=args.batch_size)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer, train_loader, val_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader
    )
    total = args.epochs * len(train_loader)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=total)

    accelerator.print(f"training on {accelerator.num_processes} process(es), {total} steps")
    progress = tqdm(range(total), disable=args.no_tqdm or not accelerator.is_local_main_process)
    step = 0
    for epoch in range(args.epochs):
        model.train()
        for batch_x, batch_y in train_loader:
            loss = torch.nn.functional.cross_entropy(model(batch_x), batch_y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            progress.update(1)
            if step % args.print_every == 0:
                mean = accelerator.reduce(loss.detach(), reduction="mean").item()
                lr = scheduler.get_last_lr()[0]
                accelerator.print(f"epoch {epoch} step {step}: loss {mean:.4f} lr {lr:.2e}")
                accelerator.log({"train_loss": mean, "learning_rate": lr, "epoch": epoch}, step=step)
        model.eval()
        correct = seen = 0
        val_loss = 0.0
        for batch_x, batch_y in val_loader:
            with torch.no_grad():
                logits = model(batch_x)
            logits, labels = accelerator.gather_for_metrics((logits, batch_y))
            val_loss += torch.nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(dim=-1) == labels).sum().item()
            seen += len(labels)
        metrics = {"eval_loss": val_loss / seen, "accuracy": correct / seen}
        accelerator.print(f"epoch {epoch}:", metrics)
        accelerator.log({**metrics, "epoch": epoch}, step=step)
    progress.close()
    accelerator.end_training()

    if args.truth and accelerator.is_main_process:
        steps = [
            {
                "step": r["step"],
                "loss": r["train_loss"],
                "learning_rate": r["learning_rate"],
                "epoch": r["epoch"],
            }
            for r in keeper.records
            if "train_loss" in r
        ]
        evals = [r for r in keeper.records if "eval_loss" in r]
        truth: dict = {
            "library": "accelerate",
            "version": accelerate.__version__,
            "source": "accelerator.log calls, as a GeneralTracker received them",
            "names": {"loss": "train_loss"},  # the tracker's name; the printed line says "loss"
            "total_steps": total,
            "final_step": step,
            "steps": steps,
            "evals": evals,
        }
        if not args.no_tqdm:
            truth["bar"] = {"total": total, "unit": "it"}
        args.truth.parent.mkdir(parents=True, exist_ok=True)
        args.truth.write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
