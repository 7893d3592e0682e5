"""Learning-rate factor per optimizer step: linear warm-up, then linear, cosine or constant decay.

The factor never reaches exactly 0: on XLA a literal 0 is a special scalar that compiles its own graph,
so a schedule ending at 0 would recompile on the last step.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def lr_factor(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """factor(step) for step = 0, 1, ... (the number of optimizer steps already taken)."""
    decay_steps = max(1, total_steps - warmup_steps)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if schedule == "constant":
            return 1.0
        remaining = max(1, total_steps - step) / decay_steps
        if schedule == "linear":
            return remaining
        return max(0.5 * (1 + math.cos(math.pi * (1 - remaining))), 1e-3 * remaining)

    return factor
