"""What the ranks of one run share before any process group exists: their places, and values made once.

torchrun gives every worker its place (RANK, WORLD_SIZE) and the address of its own key-value store
(MASTER_ADDR/MASTER_PORT, with TORCHELASTIC_USE_AGENT_STORE=True), which is up before the workers start.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from .errors import UsageError

WAIT_S = 1800.0  # rank 0 may train a tokenizer on a large corpus meanwhile
KEY_PREFIX = "trn_harness/"


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, str(default)))
    except ValueError:
        return default


def rank_from_env() -> int:
    """This process's global rank as the launcher set it (0 when not launched by torchrun)."""
    return max(0, _env_int("RANK", 0))


def world_size_from_env() -> int:
    return max(1, _env_int("WORLD_SIZE", 1))


def made_once(key: str, make: Callable[[], str], published: Path, wait_s: float = WAIT_S) -> str:
    """make()'s result, computed by global rank 0 alone and handed to every rank of the run.

    For what each rank cannot compute alike by itself (a tokenizer trained by the `tokenizers` library
    numbers its tokens differently from one process to the next). Under torchrun the value travels through
    the launcher's store; launched by hand with RANK/WORLD_SIZE, the other ranks wait for `published`, the
    file make() writes, which then has to be on a file system they share.
    """
    if world_size_from_env() == 1:
        return make()
    store = _launcher_store(wait_s)
    if rank_from_env() == 0:
        value = make()
        if store is not None:
            store.set(KEY_PREFIX + key, value)
        return value
    if store is not None:
        return store.get(KEY_PREFIX + key).decode("utf-8")
    deadline = time.monotonic() + wait_s
    while not published.is_file():
        if time.monotonic() > deadline:
            raise UsageError(
                f"rank {rank_from_env()}: {published} did not appear within {wait_s:g} s; "
                "put --output-dir on a file system every node shares, or launch with torchrun"
            )
        time.sleep(0.2)
    return published.read_text(encoding="utf-8")


def _launcher_store(wait_s: float):
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_PORT" not in os.environ:
        return None
    from torch.distributed import TCPStore

    return TCPStore(
        os.environ.get("MASTER_ADDR", "127.0.0.1"),
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=wait_s),
    )
