"""Flag sweeps: a grid of runner-flag values expanded into variants, and the table of their results
(throughput, speed-up against the first variant, final loss, compile count) — the optimisation table of a
tuning session, made automatic."""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError

MAX_VARIANTS = 256


def parse_grid(items: Iterable[str]) -> list[tuple[str, list[str]]]:
    """`--grid key=v1,v2` items, in order; UsageError naming the item on a mistake."""
    grid: list[tuple[str, list[str]]] = []
    seen: set[str] = set()
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        choices = [v.strip() for v in values.split(",")]
        if not sep or not key or any(not v for v in choices):
            raise UsageError(f"--grid {item!r}: expected key=v1,v2,..., e.g. --grid batch_size=8,16")
        if key in seen:
            raise UsageError(f"--grid {key}: given twice; put all its values in one --grid {key}=v1,v2")
        if len(set(choices)) != len(choices):
            raise UsageError(f"--grid {item!r}: a value is repeated")
        seen.add(key)
        grid.append((key, choices))
    if not grid:
        raise UsageError("sweep: no --grid given; e.g. --grid batch_size=8,16 --grid precision=fp32,bf16")
    return grid


def expand(grid: Sequence[tuple[str, Sequence[str]]]) -> list[dict[str, str]]:
    """Every combination, the first key varying slowest (the order a person reads the table in)."""
    keys = [k for k, _ in grid]
    variants = [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in grid))]
    if len(variants) > MAX_VARIANTS:
        raise UsageError(f"--grid: {len(variants)} variants; at most {MAX_VARIANTS} in one sweep")
    return variants


def variant_label(variant: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in variant.items())


@dataclass
class Sweep:
    """One sweep's plan and the runs started for it, kept as JSON beside the run store."""

    id: str
    runner: str
    grid: list[tuple[str, list[str]]]
    sets: list[str]
    created_at: float
    runs: list[str | None] = field(default_factory=list)  # run id per variant; None until launched

    @property
    def variants(self) -> list[dict[str, str]]:
        return expand(self.grid)

    @classmethod
    def new(cls, runner: str, grid: list[tuple[str, list[str]]], sets: Sequence[str]) -> Sweep:
        count = len(expand(grid))
        return cls(secrets.token_hex(3), runner, grid, list(sets), time.time(), [None] * count)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "runner": self.runner,
            "grid": [[k, v] for k, v in self.grid],
            "sets": self.sets,
            "created_at": self.created_at,
            "runs": self.runs,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sweep:
        grid = [(str(k), [str(x) for x in v]) for k, v in data["grid"]]
        return cls(
            data["id"], data["runner"], grid, list(data["sets"]), data["created_at"], list(data["runs"])
        )

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f"{self.id}.json.tmp"
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        tmp.replace(directory / f"{self.id}.json")


def load_sweeps(directory: Path) -> list[Sweep]:
    """Every saved sweep, newest first; unreadable files are skipped."""
    sweeps = []
    for path in directory.glob("*.json"):
        try:
            sweeps.append(Sweep.from_json(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(sweeps, key=lambda s: s.created_at, reverse=True)


def sweep_rows(
    variants: Sequence[Mapping[str, str]], summaries: Sequence[Mapping[str, Any] | None]
) -> list[dict[str, Any]]:
    """One row per variant: its flags, status, throughput, speed-up against the first variant, final loss
    and compile count (None where the variant has not run or did not report it)."""
    base = summaries[0].get("avg_samples_per_s") if summaries and summaries[0] else None
    rows = []
    for variant, summary in zip(variants, summaries, strict=True):
        s = summary or {}
        speed = s.get("avg_samples_per_s") or s.get("last_samples_per_s")
        rows.append(
            {
                "variant": dict(variant),
                "run": s.get("id"),
                "status": s.get("status") or "pending",
                "samples_per_s": speed,
                "speedup": speed / base if speed and base else None,
                "final_loss": s.get("final_loss"),
                "compile_count": s.get("compile_count"),
                "wall_time_s": s.get("wall_time_s"),
            }
        )
    return rows
