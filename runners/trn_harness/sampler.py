"""A seeded epoch sampler that shards across ranks and can start mid-epoch (for --resume)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class ShardedEpochSampler(Sampler[int]):
    """Shuffles with seed + epoch, gives each rank an equal shard, and skips the batches already done."""

    def __init__(self, size: int, rank: int, world_size: int, seed: int, shuffle: bool = True) -> None:
        self.size = size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.skip = 0

    def set_epoch(self, epoch: int, skip_samples: int = 0) -> None:
        self.epoch = epoch
        self.skip = skip_samples

    @property
    def shard_size(self) -> int:
        return self.size // self.world_size

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=generator)
        else:
            order = torch.arange(self.size)
        shard = order[self.rank :: self.world_size][: self.shard_size]
        return iter(shard[self.skip :].tolist())

    def __len__(self) -> int:
        return self.shard_size - self.skip
