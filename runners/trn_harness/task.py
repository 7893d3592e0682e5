"""What a runner supplies to the shared training loop: its data, its model, its loss and its metrics."""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from .data import Arrays


@dataclass
class PreparedData:
    train: Arrays
    eval: Arrays | None
    vocab_size: int | None = None
    notes: dict[str, Any] = field(default_factory=dict)


class Task(ABC):
    name: str = ""
    eval_metric: str = ""  # the headline evaluation metric: "accuracy" or "perplexity"

    @abstractmethod
    def prepare_data(self, args: argparse.Namespace) -> PreparedData:
        """Read or generate the data as numpy arrays; raise UsageError on bad input. No torch here."""

    @abstractmethod
    def build_model(self, args: argparse.Namespace, data: PreparedData) -> Any:
        """The model on the CPU, from a preset config or --model-path."""

    def after_move(self, model: Any) -> None:  # noqa: B027  (most models need nothing here)
        """Repair what moving to the device broke (GPT-2's tied weights on XLA)."""

    @abstractmethod
    def loss(self, model: Any, batch: dict[str, Any]) -> Any:
        """Scalar training loss of one batch."""

    @abstractmethod
    def eval_sums(self, model: Any, batch: dict[str, Any]) -> Any:
        """A 1-D tensor of sums over the batch (e.g. loss sum, correct, count) to add up across batches."""

    @abstractmethod
    def eval_metrics(self, sums: list[float]) -> dict[str, float]:
        """Metrics from the summed eval_sums over the whole evaluation set."""

    @abstractmethod
    def flops_per_sample(self, model: Any, args: argparse.Namespace) -> float:
        """Training FLOPs (forward + backward) per sample, for MFU."""

    def tokens_per_sample(self, args: argparse.Namespace) -> int | None:
        return None


def transformer_training_flops(non_embedding_params: int, layers: int, hidden: int, tokens: int) -> float:
    """6·N per token for the matmuls plus 12·L·H·T per token for attention scores (PaLM appendix B)."""
    return 6.0 * non_embedding_params * tokens + 12.0 * layers * hidden * tokens * tokens


def classification_sums(logits: Any, labels: Any) -> Any:
    """[loss sum, correct, count] over a batch."""
    import torch

    logits = logits.float()
    loss_sum = torch.nn.functional.cross_entropy(logits, labels, reduction="sum")
    correct = (logits.argmax(dim=-1) == labels).sum().float()
    count = torch.ones_like(labels, dtype=torch.float32).sum()
    return torch.stack([loss_sum, correct, count])
