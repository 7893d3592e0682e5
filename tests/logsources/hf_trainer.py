"""A tiny Hugging Face Trainer fine-tune whose console output is recorded as a parser fixture.

A two-layer BERT built from its config classifies random token sequences; nothing is downloaded. After
training, rank 0 writes the Trainer's own `trainer_state.json` and, from its `log_history`, the ground truth
(`--truth`) that a parser's reading of the printed log is checked against.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

# Set before transformers is imported: it reads them once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

SEQ_LEN = 16
VOCAB = 100


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-samples", type=int, default=160)
    parser.add_argument("--eval-samples", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8, help="per device")
    parser.add_argument("--logging-steps", type=int, default=5)
    parser.add_argument("--eval-steps", type=int, default=10)
    parser.add_argument("--no-tqdm", action="store_true", help="disable_tqdm=True: plain printed dicts")
    parser.add_argument(
        "--xla",
        action="store_true",
        help="let the Trainer find torch-xla (with PJRT_DEVICE=CPU it trains on XLA's CPU device)",
    )
    parser.add_argument("--optim", default=None, help="TrainingArguments.optim; default: the library's own")
    parser.add_argument(
        "--tensorboard-dir", type=Path, default=None, help="report_to='tensorboard', event files written here"
    )
    parser.add_argument("--output-dir", type=Path, default=None, help="default: a temporary directory")
    parser.add_argument("--truth", type=Path, default=None, help="write the ground truth JSON here")
    parser.add_argument("--state-json", type=Path, default=None, help="copy trainer_state.json here")
    return parser.parse_args()


def make_dataset(n: int, seed: int) -> list[dict]:
    """Random sequences; the label says whether low token ids outnumber high ones, which a model can learn."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (n, SEQ_LEN), generator=gen)
    labels = ((ids < VOCAB // 2).sum(dim=1) > SEQ_LEN // 2).long()
    mask = torch.ones(SEQ_LEN, dtype=torch.long)
    return [{"input_ids": ids[i], "attention_mask": mask, "labels": labels[i]} for i in range(n)]


def accuracy(eval_pred) -> dict[str, float]:
    logits, labels = eval_pred
    return {"accuracy": float((logits.argmax(axis=-1) == labels).mean())}


def truth_from_state(state, with_bar: bool) -> dict:
    """The shape every recording's `.truth.json` shares, filled from `TrainerState.log_history`."""
    import transformers

    steps, evals, summary = [], [], {}
    for entry in state.log_history:
        if "loss" in entry:
            steps.append(entry)
        elif "eval_loss" in entry:
            evals.append(entry)
        elif "train_runtime" in entry:
            summary = entry
    truth = {
        "library": "transformers",
        "version": transformers.__version__,
        "source": "trainer_state.json log_history",
        "total_steps": state.max_steps,
        "final_step": state.global_step,
        "steps": steps,
        "evals": evals,
        "summary": summary,
    }
    if with_bar:
        truth["bar"] = {"total": state.max_steps, "unit": "it"}
    return truth


def run(args: argparse.Namespace, scratch: Path) -> None:
    # transformers and accelerate move the model to XLA whenever torch-xla is installed, unless told not to.
    os.environ["USE_TORCH_XLA"] = "1" if args.xla else "0"
    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

    torch.set_num_threads(1)
    set_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=SEQ_LEN,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    output_dir = args.output_dir or scratch
    options: dict = {}
    if args.optim:
        options["optim"] = args.optim
    if args.tensorboard_dir:
        import transformers

        if int(transformers.__version__.split(".")[0]) >= 5:
            # transformers 5 takes the event directory from the environment only.
            os.environ["TENSORBOARD_LOGGING_DIR"] = str(args.tensorboard_dir)
        else:
            options["logging_dir"] = str(args.tensorboard_dir)
    training_args = TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=5e-4,
        warmup_steps=4,
        logging_steps=args.logging_steps,
        eval_strategy="steps",
        eval_steps=args.eval_steps,
        save_strategy="no",
        report_to="tensorboard" if args.tensorboard_dir else "none",
        disable_tqdm=args.no_tqdm,
        seed=0,
        dataloader_num_workers=0,
        # On a machine without an accelerator only use_cpu=True makes a torchrun launch one DDP job (gloo);
        # without it each rank trains alone. With --xla the Trainer is left to pick the XLA device.
        use_cpu=not args.xla,
        **options,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=make_dataset(args.train_samples, seed=1),
        eval_dataset=make_dataset(args.eval_samples, seed=2),
        compute_metrics=accuracy,
    )
    trainer.train()
    if not trainer.is_world_process_zero():
        return
    if args.state_json:
        args.state_json.parent.mkdir(parents=True, exist_ok=True)
        trainer.state.save_to_json(str(args.state_json))
    if args.truth:
        truth = truth_from_state(trainer.state, with_bar=not args.no_tqdm)
        args.truth.parent.mkdir(parents=True, exist_ok=True)
        args.truth.write_text(json.dumps(truth, indent=1) + "\n")


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="hf_trainer_") as scratch:
        run(args, Path(scratch))


if __name__ == "__main__":
    main()
