"""A plain PyTorch loop driven by a real `tqdm` bar, recorded as a parser fixture.

Three shapes users write: a bar over the loader with `set_postfix(loss=...)` (`--mode postfix`), the same
with `tqdm.write(...)` lines between frames (`--mode write`), and a nested epoch bar over per-epoch bars that
disappear when done (`--mode nested`, `leave=False`). `--truth` receives every value given to `set_postfix`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=("postfix", "write", "nested"), default="postfix")
    parser.add_argument("--steps", type=int, default=40, help="batches per epoch")
    parser.add_argument("--epochs", type=int, default=1, help="only --mode nested uses more than one")
    parser.add_argument("--write-every", type=int, default=10, help="--mode write: a tqdm.write line every N")
    parser.add_argument(
        "--step-seconds", type=float, default=0.02, help="sleep per step, so frames are spaced as in a run"
    )
    parser.add_argument("--truth", type=Path, default=None, help="write the ground truth JSON here")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    import time

    import torch
    import tqdm as tqdm_module
    from torch.utils.data import DataLoader, TensorDataset
    from tqdm import tqdm

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(args.steps * 16, 8)
    y = x @ torch.linspace(-1, 1, 8) + 0.1 * torch.randn(len(x))
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    steps: list[dict] = []
    written: list[str] = []
    epochs = args.epochs if args.mode == "nested" else 1
    outer = tqdm(range(epochs), desc="epochs", unit="epoch") if args.mode == "nested" else None
    global_step = 0
    for epoch in range(epochs):
        bar = tqdm(
            loader,
            total=len(loader),
            desc=f"epoch {epoch}" if outer is not None else None,
            leave=outer is None,
        )
        epoch_loss = 0.0
        for batch_x, batch_y in bar:
            loss = torch.nn.functional.mse_loss(model(batch_x).squeeze(-1), batch_y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            global_step += 1
            value = loss.item()
            epoch_loss += value
            bar.set_postfix(loss=value)
            # bar.n is updated after the body, so the step shown with this postfix is n + 1.
            steps.append({"step": global_step, "epoch": epoch, "loss": value, "bar_n": bar.n + 1})
            if args.mode == "write" and global_step % args.write_every == 0:
                line = f"step {global_step}: loss {value:.4f}"
                tqdm.write(line)
                written.append(line)
            time.sleep(args.step_seconds)
        bar.close()
        if outer is not None:
            mean = epoch_loss / len(loader)
            outer.set_postfix(mean_loss=mean)
            outer.update(1)
            steps[-1]["epoch_mean_loss"] = mean
    if outer is not None:
        outer.close()

    if args.truth:
        truth: dict = {
            "library": "tqdm",
            "version": tqdm_module.__version__,
            "source": "values passed to set_postfix, kept by the script",
            "total_steps": global_step,
            "final_step": global_step,
            "steps": steps,
            "bar": {"total": len(loader), "unit": "it"},
        }
        if outer is not None:
            truth["outer_bar"] = {"total": epochs, "unit": "epoch", "desc": "epochs"}
        if written:
            truth["written_lines"] = written
        args.truth.parent.mkdir(parents=True, exist_ok=True)
        args.truth.write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
