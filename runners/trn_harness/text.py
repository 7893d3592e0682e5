"""Tokenizers: a local model directory's own, or one trained on the fly from the local text.

A trained tokenizer is saved as `tokenizer.json` in the output directory and reused on `--resume`,
so token ids stay the same across a resumed run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import ranks, rundir
from .config import UsageError

SAVED_NAME = "tokenizer.json"
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
GPT2_EOS = "<|endoftext|>"


@dataclass
class TextEncoder:
    """Turns text into fixed-length id arrays, whichever tokenizer sits underneath."""

    tokenizer: Any
    is_transformers: bool
    pad_id: int
    eos_id: int | None

    @property
    def vocab_size(self) -> int:
        if self.is_transformers:
            return len(self.tokenizer)
        return self.tokenizer.get_vocab_size()

    def encode_padded(self, texts: list[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Ids and attention mask, truncated and padded to seq_len (static shapes for XLA)."""
        rows = self.encode(texts, add_special_tokens=True)
        ids = np.full((len(rows), seq_len), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), seq_len), dtype=np.int64)
        for i, row in enumerate(rows):
            row = row[:seq_len]
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return ids, mask

    def encode(self, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
        if self.is_transformers:
            return self.tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)]


def load_or_train(
    kind: str, model_path: str | None, output_dir: Path, texts: list[str], vocab_size: int
) -> TextEncoder:
    """kind is 'wordpiece' (BERT) or 'bpe' (GPT-2)."""
    if model_path:
        return _from_model_dir(Path(model_path))
    from tokenizers import Tokenizer

    saved = output_dir / SAVED_NAME
    if saved.is_file():  # a resumed run keeps its token ids
        tokenizer = Tokenizer.from_file(str(saved))
    else:
        # Trained by rank 0 alone and handed to the others: two processes training WordPiece on the same
        # text number its tokens differently, and every rank must feed the model the same ids.
        def train_and_save() -> str:
            trained = (
                _train_wordpiece(texts, vocab_size) if kind == "wordpiece" else _train_bpe(texts, vocab_size)
            )
            rundir.atomic_write(saved, lambda tmp: trained.save(str(tmp)))
            return trained.to_str()

        tokenizer = Tokenizer.from_str(ranks.made_once("tokenizer", train_and_save, saved))
    if kind == "wordpiece":
        return TextEncoder(tokenizer, False, tokenizer.token_to_id("[PAD]"), tokenizer.token_to_id("[SEP]"))
    eos = tokenizer.token_to_id(GPT2_EOS)
    return TextEncoder(tokenizer, False, eos, eos)


def _from_model_dir(model_dir: Path) -> TextEncoder:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"--model-path {model_dir}: no usable tokenizer there ({str(exc).splitlines()[0]}); "
            "save one with tokenizer.save_pretrained(DIR)"
        ) from None
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos or 0)
    return TextEncoder(tokenizer, True, pad, eos)


def _train_wordpiece(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=BERT_SPECIALS, show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tokenizer


def _train_bpe(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[GPT2_EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer
