#!/usr/bin/env python
"""BERT sequence classification (as in fine-tuning BERT on product reviews) on Trainium, a GPU or the CPU.

torchrun --nproc_per_node 2 bert.py --synthetic --steps 200 --batch-size 8 --output-dir out
python bert.py --data reviews.csv --text-column review --label-column stars --num-labels 5
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from trn_harness import config, data, text
from trn_harness.loop import main
from trn_harness.task import PreparedData, Task, classification_sums, transformer_training_flops

PRESETS = {  # "base" is bert-base-uncased; "small" is the published BERT-Small (L4/H512)
    "tiny": dict(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512, vocab_size=2048
    ),
    "small": dict(
        num_hidden_layers=4, hidden_size=512, num_attention_heads=8, intermediate_size=2048, vocab_size=30522
    ),
    "base": dict(
        num_hidden_layers=12,
        hidden_size=768,
        num_attention_heads=12,
        intermediate_size=3072,
        vocab_size=30522,
    ),
}


def add_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--text-column", default="text", help="text column of a CSV/TSV/JSONL --data file")
    group.add_argument("--label-column", default="label", help="label column (integer class ids)")


class BertClassification(Task):
    name = "bert"
    eval_metric = "accuracy"

    def prepare_data(self, args: argparse.Namespace) -> PreparedData:
        if args.synthetic:
            vocab = config.model_dir_config(args).get("vocab_size") or PRESETS[args.model_size]["vocab_size"]
            n_eval = max(256, args.batch_size * 4)
            make = data.synthetic_classification_text
            return PreparedData(
                make(args.synthetic_samples, args.seq_len, vocab, args.num_labels, args.seed),
                make(n_eval, args.seq_len, vocab, args.num_labels, args.seed + 1),
                vocab,
            )
        texts, raw = data.read_text_label_file(Path(args.data), args.text_column, args.label_column)
        labels = data.label_ids(raw, args.num_labels, Path(args.data))
        eval_texts = eval_labels = None
        if args.eval_data:
            eval_texts, eval_raw = data.read_text_label_file(
                Path(args.eval_data), args.text_column, args.label_column
            )
            eval_labels = data.label_ids(eval_raw, args.num_labels, Path(args.eval_data))
        encoder = text.load_or_train(
            "wordpiece", args.model_path, Path(args.output_dir), texts, PRESETS[args.model_size]["vocab_size"]
        )

        def encode(texts: list[str], labels: Any) -> data.Arrays:
            ids, mask = encoder.encode_padded(texts, args.seq_len)
            return {"input_ids": ids, "attention_mask": mask, "labels": labels}

        train = encode(texts, labels)
        if eval_texts is not None:
            return PreparedData(train, encode(eval_texts, eval_labels), encoder.vocab_size)
        train, held_out = data.hold_out(train, args.eval_fraction, args.seed)
        return PreparedData(train, held_out, encoder.vocab_size)

    def build_model(self, args: argparse.Namespace, prepared: PreparedData) -> Any:
        import transformers
        from transformers import AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification

        transformers.logging.set_verbosity_error()
        if args.model_path:
            return AutoModelForSequenceClassification.from_pretrained(
                args.model_path,
                num_labels=args.num_labels,
                local_files_only=True,
                ignore_mismatched_sizes=True,
            )
        preset = dict(PRESETS[args.model_size], vocab_size=prepared.vocab_size)
        cfg = BertConfig(**preset, num_labels=args.num_labels, max_position_embeddings=max(512, args.seq_len))
        return BertForSequenceClassification(cfg)

    def loss(self, model: Any, batch: dict[str, Any]) -> Any:
        return model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).loss

    def eval_sums(self, model: Any, batch: dict[str, Any]) -> Any:
        return classification_sums(
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits,
            batch["labels"],
        )

    def eval_metrics(self, sums: list[float]) -> dict[str, float]:
        return {"loss": sums[0] / sums[2], "accuracy": sums[1] / sums[2]}

    def flops_per_sample(self, model: Any, args: argparse.Namespace) -> float:
        embeddings = sum(p.numel() for p in model.bert.embeddings.parameters())
        body = sum(p.numel() for p in model.parameters()) - embeddings
        cfg = model.config
        return transformer_training_flops(body, cfg.num_hidden_layers, cfg.hidden_size, args.seq_len)

    def tokens_per_sample(self, args: argparse.Namespace) -> int:
        return args.seq_len


def build_parser() -> config.RunnerArgumentParser:
    defaults = config.RunnerDefaults(
        lr_by_size={"tiny": 1e-3, "small": 3e-4, "base": 5e-5}, batch_size=8, seq_len=128, num_labels=2
    )
    return config.build_parser("bert.py", __doc__.splitlines()[0], defaults, add_flags)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
    sys.exit(main(BertClassification(), build_parser()))
