#!/usr/bin/env python
"""ViT image classification (as in fine-tuning vit-base-patch16-224) on Trainium, a GPU or the CPU.

torchrun --nproc_per_node 2 vit.py --synthetic --steps 200 --batch-size 16 --output-dir out
python vit.py --data images/ --num-labels 10 --model-size base --precision bf16
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from trn_harness import config, data
from trn_harness.loop import main
from trn_harness.task import PreparedData, Task, classification_sums, transformer_training_flops

PRESETS = {  # "base" is vit-base-patch16-224, "small" is ViT-S/16
    "tiny": dict(
        image_size=32,
        patch_size=8,
        num_hidden_layers=2,
        hidden_size=128,
        num_attention_heads=2,
        intermediate_size=512,
    ),
    "small": dict(
        image_size=224,
        patch_size=16,
        num_hidden_layers=12,
        hidden_size=384,
        num_attention_heads=6,
        intermediate_size=1536,
    ),
    "base": dict(
        image_size=224,
        patch_size=16,
        num_hidden_layers=12,
        hidden_size=768,
        num_attention_heads=12,
        intermediate_size=3072,
    ),
}


class VitClassification(Task):
    name = "vit"
    eval_metric = "accuracy"

    def prepare_data(self, args: argparse.Namespace) -> PreparedData:
        size = args.image_size = image_size(args)
        self.input_dtype = "bfloat16" if args.precision == "bf16" else "float32"
        if args.synthetic:
            n_eval = max(256, args.batch_size * 4)
            return PreparedData(
                data.synthetic_images(args.synthetic_samples, size, args.num_labels, args.seed),
                data.synthetic_images(n_eval, size, args.num_labels, args.seed + 1),
            )
        train, classes = data.read_images(Path(args.data), size, args.num_labels)
        if args.eval_data:
            held_out, _ = data.read_images(Path(args.eval_data), size, args.num_labels)
            return PreparedData(train, held_out, notes={"classes": classes})
        train, held_out = data.hold_out(train, args.eval_fraction, args.seed)
        return PreparedData(train, held_out, notes={"classes": classes})

    def build_model(self, args: argparse.Namespace, prepared: PreparedData) -> Any:
        import transformers
        from transformers import AutoModelForImageClassification, ViTConfig, ViTForImageClassification

        transformers.logging.set_verbosity_error()
        if args.model_path:
            return AutoModelForImageClassification.from_pretrained(
                args.model_path,
                num_labels=args.num_labels,
                local_files_only=True,
                ignore_mismatched_sizes=True,
            )
        preset = dict(PRESETS[args.model_size], image_size=args.image_size)
        return ViTForImageClassification(ViTConfig(**preset, num_labels=args.num_labels))

    def _pixels(self, batch: dict[str, Any]) -> Any:
        import torch

        return batch["pixel_values"].to(getattr(torch, self.input_dtype))

    def loss(self, model: Any, batch: dict[str, Any]) -> Any:
        return model(pixel_values=self._pixels(batch), labels=batch["labels"]).loss

    def eval_sums(self, model: Any, batch: dict[str, Any]) -> Any:
        return classification_sums(model(pixel_values=self._pixels(batch)).logits, batch["labels"])

    def eval_metrics(self, sums: list[float]) -> dict[str, float]:
        return {"loss": sums[0] / sums[2], "accuracy": sums[1] / sums[2]}

    def flops_per_sample(self, model: Any, args: argparse.Namespace) -> float:
        cfg = model.config
        tokens = (cfg.image_size // cfg.patch_size) ** 2 + 1
        embeddings = model.vit.embeddings
        positional = embeddings.position_embeddings.numel() + embeddings.cls_token.numel()
        body = sum(p.numel() for p in model.parameters()) - positional
        return transformer_training_flops(body, cfg.num_hidden_layers, cfg.hidden_size, tokens)


def image_size(args: argparse.Namespace) -> int:
    """--image-size, else the local model's own, else the preset's."""
    if args.image_size:
        return args.image_size
    if args.model_path:
        return config.model_dir_config(args).get("image_size", 224)
    return PRESETS[args.model_size]["image_size"]


def build_parser() -> config.RunnerArgumentParser:
    defaults = config.RunnerDefaults(
        lr_by_size={"tiny": 1e-3, "small": 1e-4, "base": 1e-4},
        batch_size=16,
        seq_len=None,
        images=True,
        num_labels=10,
    )
    return config.build_parser("vit.py", __doc__.splitlines()[0], defaults)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
    sys.exit(main(VitClassification(), build_parser()))
