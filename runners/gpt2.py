#!/usr/bin/env python
"""GPT-2 causal language modelling (as in training GPT-2 on review text) on Trainium, a GPU or the CPU.

torchrun --nproc_per_node 2 gpt2.py --synthetic --steps 200 --seq-len 128 --output-dir out
python gpt2.py --data corpus.txt --model-size small --precision bf16
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from trn_harness import config, data, text
from trn_harness.loop import main
from trn_harness.task import PreparedData, Task, transformer_training_flops

PRESETS = {  # "base" is the 124M-parameter gpt2
    "tiny": dict(n_layer=2, n_embd=128, n_head=2, vocab_size=2048, n_positions=256),
    "small": dict(n_layer=6, n_embd=512, n_head=8, vocab_size=50257, n_positions=1024),
    "base": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
}


class Gpt2CausalLM(Task):
    name = "gpt2"
    eval_metric = "perplexity"

    def prepare_data(self, args: argparse.Namespace) -> PreparedData:
        if args.synthetic:
            vocab = config.model_dir_config(args).get("vocab_size") or PRESETS[args.model_size]["vocab_size"]
            n_eval = max(128, args.batch_size * 4)
            make = data.synthetic_language_text
            return PreparedData(
                make(args.synthetic_samples, args.seq_len, vocab, args.seed),
                make(n_eval, args.seq_len, vocab, args.seed + 1),
                vocab,
                {"eos_token_id": vocab - 1},
            )
        documents = data.read_text_corpus(Path(args.data))
        encoder = text.load_or_train(
            "bpe", args.model_path, Path(args.output_dir), documents, PRESETS[args.model_size]["vocab_size"]
        )
        train = self._blocks(encoder, documents, args.seq_len, args.data)
        notes = {"eos_token_id": encoder.eos_id}
        if args.eval_data:
            held_out = self._blocks(
                encoder, data.read_text_corpus(Path(args.eval_data)), args.seq_len, args.eval_data
            )
            return PreparedData(train, held_out, encoder.vocab_size, notes)
        train, held_out = data.hold_out(train, args.eval_fraction, args.seed)
        return PreparedData(train, held_out, encoder.vocab_size, notes)

    @staticmethod
    def _blocks(encoder: text.TextEncoder, documents: list[str], seq_len: int, source: str) -> data.Arrays:
        """Documents joined with end-of-text tokens and cut into full seq_len blocks (the rest is dropped)."""
        stream: list[int] = []
        for ids in encoder.encode(documents, add_special_tokens=False):
            stream.extend(ids)
            if encoder.eos_id is not None:
                stream.append(encoder.eos_id)
        n_blocks = len(stream) // seq_len
        if n_blocks == 0:
            raise config.UsageError(
                f"--data {source}: {len(stream)} tokens, fewer than one --seq-len {seq_len} block; "
                "add text or lower --seq-len"
            )
        ids = np.asarray(stream[: n_blocks * seq_len], dtype=np.int64).reshape(n_blocks, seq_len)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}

    def build_model(self, args: argparse.Namespace, prepared: PreparedData) -> Any:
        import transformers
        from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

        transformers.logging.set_verbosity_error()
        if args.model_path:
            return AutoModelForCausalLM.from_pretrained(args.model_path, local_files_only=True)
        preset = dict(PRESETS[args.model_size], vocab_size=prepared.vocab_size)
        preset["n_positions"] = max(preset["n_positions"], args.seq_len)
        eos = prepared.notes["eos_token_id"]
        return GPT2LMHeadModel(GPT2Config(**preset, bos_token_id=eos, eos_token_id=eos))

    def after_move(self, model: Any) -> None:
        # Moving to an XLA device gives the LM head its own copy of the embedding matrix; tie them again
        # before the optimizer sees the parameters, or they train apart.
        model.tie_weights()

    def loss(self, model: Any, batch: dict[str, Any]) -> Any:
        ids = batch["input_ids"]
        return model(input_ids=ids, attention_mask=batch["attention_mask"], labels=ids).loss

    def eval_sums(self, model: Any, batch: dict[str, Any]) -> Any:
        import torch

        ids = batch["input_ids"]
        logits = model(input_ids=ids, attention_mask=batch["attention_mask"]).logits.float()
        shifted = logits[:, :-1].reshape(-1, logits.shape[-1])
        targets = ids[:, 1:].reshape(-1)
        loss_sum = torch.nn.functional.cross_entropy(shifted, targets, reduction="sum")
        count = torch.ones_like(targets, dtype=torch.float32).sum()
        return torch.stack([loss_sum, count])

    def eval_metrics(self, sums: list[float]) -> dict[str, float]:
        loss = sums[0] / sums[1]
        return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}

    def flops_per_sample(self, model: Any, args: argparse.Namespace) -> float:
        cfg = model.config
        embeddings = sum(p.numel() for p in model.transformer.wte.parameters()) + sum(
            p.numel() for p in model.transformer.wpe.parameters()
        )
        body = sum(p.numel() for p in model.parameters()) - embeddings
        lm_head = cfg.vocab_size * cfg.n_embd  # the tied head is a matmul even though its weights are shared
        return transformer_training_flops(body + lm_head, cfg.n_layer, cfg.n_embd, args.seq_len)

    def tokens_per_sample(self, args: argparse.Namespace) -> int:
        return args.seq_len


def build_parser() -> config.RunnerArgumentParser:
    defaults = config.RunnerDefaults(
        lr_by_size={"tiny": 1e-3, "small": 3e-4, "base": 6e-5}, batch_size=8, seq_len=128, num_labels=None
    )
    return config.build_parser("gpt2.py", __doc__.splitlines()[0], defaults)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
    sys.exit(main(Gpt2CausalLM(), build_parser()))
