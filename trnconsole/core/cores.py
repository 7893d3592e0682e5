"""NeuronCore ranges: parse and format NEURON_RT_VISIBLE_CORES, pick the lowest free contiguous range for a
run, check a range the user chose, and say who holds which cores. Pure: the caller gathers the holders."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import UsageError

ENV_VAR = "NEURON_RT_VISIBLE_CORES"


def given(field: str, text: str) -> str:
    """How the user wrote it: `--cores 0-3`, `--env NEURON_RT_VISIBLE_CORES=0-3`."""
    return f"{field}={text}" if field.endswith(ENV_VAR) else f"{field} {text}"


@dataclass(frozen=True)
class Holder:
    """Someone holding NeuronCores: one of our runs ("run 3f2a9c1e") or a process neuron-ls lists."""

    label: str  # e.g. "run 3f2a9c1e (running)" or "pid 4242 (python3 train.py)"
    cores: tuple[int, ...]


def parse_cores(text: str, field: str) -> tuple[int, ...]:
    """`0-3,8` (the runtime's syntax: an index, a range or a comma-separated list) as sorted core ids."""
    found: set[int] = set()
    example = f"{given(field, '0-3')} (a range), {given(field, '4')} (one core) or {given(field, '0-1,4-5')}"
    if not text.strip():
        raise UsageError(f"{field}: empty; give NeuronCore ids, e.g. {example}")
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise UsageError(f"{given(field, text)}: not a list of NeuronCore ids; e.g. {example}") from None
        if low < 0 or high < low:
            raise UsageError(
                f"{given(field, text)}: {part.strip()} is not a range low-high of ids >= 0; e.g. {example}"
            )
        found.update(range(low, high + 1))
    return tuple(sorted(found))


def format_cores(cores: Iterable[int]) -> str:
    """Sorted ids as the runtime reads them: runs of consecutive ids as `a-b`, a lone id as `a`."""
    ids = sorted(set(cores))
    parts: list[str] = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[i - 1] + 1:
            low, high = ids[start], ids[i - 1]
            parts.append(str(low) if low == high else f"{low}-{high}")
            start = i
    return ",".join(parts)


def held(holders: Iterable[Holder]) -> set[int]:
    return {core for holder in holders for core in holder.cores}


def pick_range(host_cores: Sequence[int], taken: set[int], count: int) -> tuple[int, ...] | None:
    """The lowest run of `count` consecutive core ids that the host has and nobody holds; None if none."""
    present = set(host_cores)
    for start in sorted(present):
        wanted = range(start, start + count)
        if all(core in present and core not in taken for core in wanted):
            return tuple(wanted)
    return None


def ranges_that_fit(host_cores: Sequence[int], taken: set[int], count: int) -> int:
    """How many runs of `count` cores could start now, each given the lowest free range in turn."""
    taken = set(taken)
    fits = 0
    while (found := pick_range(host_cores, taken, count)) is not None:
        taken.update(found)
        fits += 1
    return fits


def describe(holders: Iterable[Holder]) -> str:
    """`cores 0-3: run 3f2a9c1e (running); cores 4-5: pid 4242 (python3 train.py)`."""
    parts = [f"cores {format_cores(h.cores)}: {h.label}" for h in holders if h.cores]
    return "; ".join(parts) or "nobody"


def check_core_count(requested: Sequence[int], field: str, nproc: int) -> None:
    """One core per process: UsageError naming both ways out otherwise."""
    if len(requested) != nproc:
        raise UsageError(
            f"{given(field, format_cores(requested))}: {len(requested)} NeuronCore(s) for --nproc {nproc}; "
            f"give {nproc} core(s) (one per process) or change --nproc to {len(requested)}"
        )


def allocate(
    requested: tuple[int, ...] | None,
    field: str,
    nproc: int,
    host_cores: Sequence[int],
    holders: Sequence[Holder],
) -> tuple[int, ...]:
    """The cores a new run of `nproc` processes gets: the user's own (checked), else the lowest free range.

    UsageError, naming the field and the way out, when the user's range does not fit or no range is free.
    """
    taken = held(holders)
    host = format_cores(host_cores)
    if requested is not None:
        text = format_cores(requested)
        check_core_count(requested, field, nproc)
        outside = [c for c in requested if c not in set(host_cores)]
        if outside:
            raise UsageError(
                f"{given(field, text)}: this host has NeuronCores {host} only (core {format_cores(outside)} "
                "does not exist); pick cores in that range"
            )
        clash = [h for h in holders if set(h.cores) & set(requested)]
        if clash:
            free = pick_range(host_cores, taken, nproc)
            hint = f"e.g. {given(field, format_cores(free))}" if free else "none is free now"
            raise UsageError(
                f"{given(field, text)}: already held ({describe(clash)}); pick free cores ({hint}) or leave "
                f"{field} out to be given a free range"
            )
        return requested
    found = pick_range(host_cores, taken, nproc)
    if found is None:
        raise UsageError(
            f"--nproc {nproc}: no {nproc} free contiguous NeuronCores on this host (cores {host}); "
            f"held: {describe(holders)}; stop one of them or wait for it to end"
        )
    return found
