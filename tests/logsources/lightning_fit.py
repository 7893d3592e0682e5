"""A tiny PyTorch Lightning fit with its progress bar, recorded as a parser fixture.

Lightning's default bar is `RichProgressBar` when `rich` is installed (trnconsole installs it) and
`TQDMProgressBar` otherwise; `--progress-bar tqdm` asks for the TQDM one explicitly. The module logs
`train_loss` every step and `val_loss` / `val_acc` per validation run, all with `prog_bar=True`, so they
appear in the bar. A `CSVLogger` keeps what Lightning logged; its `metrics.csv` (copied with `--metrics-csv`)
becomes the ground truth (`--truth`). Runs alone or under torchrun (`--devices 2` picks DDP on the CPU).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import tempfile
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--log-every",
        type=int,
        default=1,
        help="Trainer(log_every_n_steps=...): 1 keeps every value the bar shows",
    )
    parser.add_argument("--devices", type=int, default=1, help="2 under torchrun --nproc_per_node 2")
    parser.add_argument(
        "--progress-bar",
        choices=("default", "tqdm"),
        default="default",
        help="default: Lightning's own choice",
    )
    parser.add_argument("--no-model-summary", action="store_true")
    parser.add_argument("--work-dir", type=Path, default=None, help="CSVLogger directory; default: temporary")
    parser.add_argument(
        "--metrics-csv", type=Path, default=None, help="copy the CSVLogger's metrics.csv here"
    )
    parser.add_argument("--truth", type=Path, default=None, help="write the ground truth JSON here")
    return parser.parse_args()


def number(text: str) -> float | int | None:
    if text == "":
        return None
    value = float(text)
    return int(value) if value.is_integer() and "." not in text and "e" not in text else value


def truth_from_metrics(rows: list[dict[str, str]], version: str, max_steps: int, final_step: int) -> dict:
    """Training rows carry `train_loss`, validation rows `val_loss`; `step` is as the CSVLogger wrote it.

    Lightning writes the step a value was logged at counting from 0: the first batch's loss has step 0."""
    steps, evals = [], []
    for row in rows:
        values = {k: number(v) for k, v in row.items() if v != ""}
        if "train_loss" in values:
            steps.append({"step": values["step"], "epoch": values["epoch"], "loss": values["train_loss"]})
        if "val_loss" in values:
            evals.append(values)
    truth: dict = {
        "library": "pytorch-lightning",
        "version": version,
        "source": "metrics.csv from CSVLogger",
        "names": {"loss": "train_loss"},  # what the module logged (and the bar shows) as the training loss
        "total_steps": max_steps,
        "final_step": final_step,
        "steps": steps,
        "evals": evals,
    }
    return truth


def run(args: argparse.Namespace, scratch: Path) -> None:
    os.environ["USE_TORCH_XLA"] = "0"
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.callbacks import TQDMProgressBar
    from pytorch_lightning.loggers import CSVLogger
    from torch.utils.data import DataLoader, TensorDataset

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            logits = self.net(x)
            self.log("val_loss", torch.nn.functional.cross_entropy(logits, y), prog_bar=True, sync_dist=True)
            self.log("val_acc", (logits.argmax(dim=-1) == y).float().mean(), prog_bar=True, sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    pl.seed_everything(0)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(args.samples, 16, generator=gen)
    y = (x[:, :4].sum(dim=1) > 0).long()
    split = args.samples * 3 // 4
    train = DataLoader(TensorDataset(x[:split], y[:split]), batch_size=args.batch_size, shuffle=True)
    val = DataLoader(TensorDataset(x[split:], y[split:]), batch_size=args.batch_size)

    work_dir = args.work_dir or scratch
    logger = CSVLogger(save_dir=str(work_dir), name="", version="")
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        logger=logger,
        callbacks=[TQDMProgressBar()] if args.progress_bar == "tqdm" else None,
        log_every_n_steps=args.log_every,
        enable_checkpointing=False,
        enable_model_summary=not args.no_model_summary,
        deterministic=True,
    )
    trainer.fit(Classifier(), train, val)
    if trainer.global_rank != 0:
        return
    metrics = Path(logger.log_dir) / "metrics.csv"
    if args.metrics_csv:
        args.metrics_csv.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(metrics, args.metrics_csv)
    if args.truth:
        with metrics.open(newline="") as f:
            rows = list(csv.DictReader(f))
        truth = truth_from_metrics(
            rows, pl.__version__, trainer.estimated_stepping_batches, trainer.global_step
        )
        bar = trainer.progress_bar_callback
        truth["bar"] = {
            "kind": type(bar).__name__,
            "total": bar.total_train_batches,
            "unit": "it",
            "val_total": int(sum(trainer.num_val_batches)),
        }
        args.truth.parent.mkdir(parents=True, exist_ok=True)
        args.truth.write_text(json.dumps(truth, indent=1) + "\n")


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="lightning_fit_") as scratch:
        run(args, Path(scratch))


if __name__ == "__main__":
    main()
