"""Preflight checks as data: each check's verdict with its reason, the report and its exit code, the Neuron
visibility verdicts, the compile-cache disk check, and the reading of the workers' result lines.

Nothing here starts a process; the command gathers the facts (workers, neuron-ls) and these functions judge
them, so every verdict can be tested from recorded inputs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
DEVICES = ("auto", "xla", "cuda", "cpu")
WORKER_CHECKS = ("device_op", "all_reduce", "all_gather", "reduce_scatter")
COLLECTIVES = WORKER_CHECKS[1:]
MARKER = "TRNCONSOLE_PREFLIGHT "  # how worker lines start (trnconsole/preflight_worker.py writes them)
DEFAULT_CACHE_DIR = "/var/tmp/neuron-compile-cache"  # the Neuron SDK's default compile cache
DEFAULT_MIN_FREE_GB = 20.0
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the verdict: PASS, FAIL or SKIP, with the reason; ms when the check was timed."""

    name: str
    result: str
    detail: str
    ms: float | None = None


@dataclass(frozen=True)
class RankResult:
    """What one worker said about itself."""

    rank: int
    checks: tuple[Check, ...]
    kind: str | None = None  # "xla", "cuda" or "cpu"
    device: str | None = None  # e.g. "xla:0", "cuda:1"
    platform: str | None = None  # "neuron", "xla-cpu", a GPU's name or "cpu"
    backend: str | None = None  # "gloo", "nccl" or "xla"
    torch: str | None = None
    error: str | None = None


@dataclass
class WorkerOutput:
    """The workers' marker lines, read as they arrive: each rank's result line, and for a rank stopped before
    it wrote one, the checks it finished and the one it last started."""

    results: dict[int, RankResult] = field(default_factory=dict)
    finished: dict[int, dict[str, Check]] = field(default_factory=dict)
    started: dict[int, str] = field(default_factory=dict)
    malformed: int = 0

    def feed(self, line: str) -> bool:
        """Take one output line; False when it is not a worker's marker line."""
        if not line.startswith(MARKER):
            return False
        try:
            payload = json.loads(line[len(MARKER) :])
            rank = int(payload["rank"])
            if payload.get("event") == "start":
                self.started[rank] = str(payload["check"])
            elif payload.get("event") == "check":
                check = _check(payload["check"])
                self.finished.setdefault(rank, {})[check.name] = check
            elif payload.get("event") == "result":
                self.results[rank] = _rank_result(rank, payload)
            else:
                raise ValueError(payload.get("event"))
        except (ValueError, KeyError, TypeError):
            self.malformed += 1
        return True

    def check(self, rank: int, name: str) -> Check | None:
        """The rank's verdict on one check: from its result line, else from the checks it finished."""
        result = self.results.get(rank)
        if result is not None:
            return next((c for c in result.checks if c.name == name), None)
        return self.finished.get(rank, {}).get(name)


def _check(data: dict[str, Any]) -> Check:
    return Check(str(data["name"]), str(data["result"]), str(data.get("detail") or ""), _ms(data.get("ms")))


def _rank_result(rank: int, payload: dict[str, Any]) -> RankResult:
    checks = tuple(_check(c) for c in payload.get("checks") or ())

    def text(key: str) -> str | None:
        value = payload.get(key)
        return None if value is None else str(value)

    return RankResult(
        rank=rank,
        checks=checks,
        kind=text("kind"),
        device=text("device"),
        platform=text("platform"),
        backend=text("backend"),
        torch=text("torch"),
        error=text("error"),
    )


def _ms(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class PreflightReport:
    """Every check in display order, and how the workers ran."""

    checks: tuple[Check, ...]
    device: str  # what was asked: auto, xla, cuda or cpu
    nproc: int
    python: str
    ranks: tuple[RankResult, ...] = ()
    elapsed_s: float | None = None

    @property
    def ok(self) -> bool:
        return all(c.result != FAIL for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def counts(self) -> dict[str, int]:
        return {r: sum(c.result == r for c in self.checks) for r in (PASS, FAIL, SKIP)}

    @property
    def ran_on(self) -> str | None:
        """e.g. "cpu (gloo)" or "neuron (xla)": the first rank that got a device."""
        for rank in self.ranks:
            if rank.platform:
                return f"{rank.platform} ({rank.backend})"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "device": self.device,
            "nproc": self.nproc,
            "python": self.python,
            "ran_on": self.ran_on,
            "elapsed_s": self.elapsed_s,
            "counts": self.counts(),
            "checks": [asdict(c) for c in self.checks],
            "ranks": [
                {
                    **{k: v for k, v in asdict(r).items() if k != "checks"},
                    "checks": [asdict(c) for c in r.checks],
                }
                for r in self.ranks
            ],
        }


# ---- the workers' checks, merged over ranks ----


def merge_worker_checks(
    output: WorkerOutput, nproc: int, why_missing: str, skip_reason: str | None = None
) -> list[Check]:
    """One row per worker check over all ranks: FAIL if any rank failed it or never reported, SKIP if every
    rank skipped it, else PASS; ms is the slowest rank's. `why_missing` says why a rank sent no result
    (torchrun's ending); `skip_reason`, when set, means the workers were not started at all."""
    if skip_reason is not None:
        return [Check("workers", FAIL, skip_reason)] + [
            Check(name, SKIP, "not run: the workers did not start") for name in WORKER_CHECKS
        ]
    rows = [_workers_row(output, nproc, why_missing)]
    for name in WORKER_CHECKS:
        rows.append(_merge_one(name, [(rank, output.check(rank, name)) for rank in range(nproc)], output))
    return rows


def _workers_row(output: WorkerOutput, nproc: int, why_missing: str) -> Check:
    reported = sorted(output.results)
    missing = [r for r in range(nproc) if r not in output.results]
    errors = [(r.rank, str(r.error)) for r in output.results.values() if r.error]
    problems = [by_ranks(errors)] if errors else []
    if missing:
        where = by_ranks(
            [
                (r, f"was in {output.started[r]}" if r in output.started else "never started a check")
                for r in missing
            ]
        )
        problems.append(f"{len(reported)} of {nproc} rank(s) reported ({where}); {why_missing}")
    if problems:
        return Check("workers", FAIL, "; ".join(problems))
    first = output.results[reported[0]]
    platforms = sorted({r.platform or "?" for r in output.results.values()})
    compiled = "; times include XLA graph compilation" if first.kind == "xla" else ""
    on = f"on {', '.join(platforms)} ({first.backend}), torch {first.torch}"
    return Check("workers", PASS, f"{nproc} rank(s) reported, {on}{compiled}")


def _merge_one(name: str, per_rank: list[tuple[int, Check | None]], output: WorkerOutput) -> Check:
    timed = [c.ms for _, c in per_rank if c is not None and c.ms is not None]
    ms = max(timed) if timed else None
    failed = [
        (rank, check.detail if check else "no result" + _was_in(output, rank, name))
        for rank, check in per_rank
        if check is None or check.result == FAIL
    ]
    if failed:
        return Check(name, FAIL, by_ranks(failed), ms)
    if all(c is not None and c.result == SKIP for _, c in per_rank):
        return Check(name, SKIP, by_ranks([(r, c.detail) for r, c in per_rank if c], agreed=True))
    # Ranks that skipped it are named beside those that passed, so a pass on some ranks reads as such.
    ran = [(r, c.detail) for r, c in per_rank if c is not None]
    return Check(name, PASS, by_ranks(ran, agreed=True), ms)


def _was_in(output: WorkerOutput, rank: int, name: str) -> str:
    started = output.started.get(rank)
    if started == name:
        return f" (it was still in {name})"
    return f" (last started {started})" if started else ""


def by_ranks(items: Sequence[tuple[int, str]], agreed: bool = False) -> str:
    """Details grouped by text, each with its ranks ("ranks 0-3, 5: ..."); with agreed, a text every rank
    shares stands alone."""
    groups: dict[str, list[int]] = {}
    for rank, text in items:
        groups.setdefault(text, []).append(rank)
    if agreed and len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{rank_span(ranks)}: {text}" for text, ranks in groups.items())


def rank_span(ranks: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "ranks 0-2, 5"."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = prev = ordered[0]
    for r in [*ordered[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ("rank " if len(ordered) == 1 else "ranks ") + ", ".join(parts)


def torchrun_failure(lines: Sequence[str]) -> str | None:
    """The first failure in torchrun's ChildFailedError summary ("Root Cause (first observed failure)"),
    e.g. "rank 1 failed first (exit code 1)"; None when the lines hold no such summary."""
    try:
        start = max(i for i, line in enumerate(lines) if line.strip().startswith("Root Cause"))
    except ValueError:
        return None
    fields: dict[str, str] = {}
    for line in lines[start + 1 :]:
        found = re.match(r"\s*(rank|exitcode)\s*:\s*(-?\d+)", line)
        if found:
            fields.setdefault(found.group(1), found.group(2))
    if "rank" not in fields or "exitcode" not in fields:
        return None
    code = int(fields["exitcode"])
    if code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exit code {code}"
    return f"rank {fields['rank']} failed first ({how})"


# ---- Neuron visibility ----


@dataclass(frozen=True, slots=True)
class CoreUse:
    """A process neuron-ls lists as holding NeuronCores."""

    pid: int
    command: str
    core_ids: tuple[int, ...]


@dataclass(frozen=True)
class NeuronLs:
    """What `neuron-ls -j` said, reduced to what preflight judges; path None when it is not installed."""

    path: str | None
    devices: int = 0
    cores: int = 0
    busy: tuple[CoreUse, ...] = ()
    problem: str | None = None


def neuron_device_nodes(dev_dir: Path = Path("/dev")) -> list[str]:
    """The Neuron driver's device nodes (/dev/neuron0, /dev/neuron1, ...), sorted by number."""
    try:
        names = [p.name for p in dev_dir.iterdir() if p.name.startswith("neuron") and p.name[6:].isdigit()]
    except OSError:
        return []
    return [str(dev_dir / n) for n in sorted(names, key=lambda n: int(n[6:]))]


def uses_neuron(device: str, device_nodes: Sequence[str], torch_neuronx: str | None) -> bool:
    """Whether this preflight means Neuron: --device auto|xla on a host with the driver or torch-neuronx.
    Missing Neuron pieces fail such a run; elsewhere they are a skip ("not a Neuron host")."""
    return device in ("auto", "xla") and (bool(device_nodes) or torch_neuronx is not None)


def neuron_checks(
    device: str,
    nproc: int,
    device_nodes: Sequence[str],
    neuron_ls: NeuronLs,
    torch_neuronx: str | None,
    python: str,
) -> list[Check]:
    """The driver's device nodes, neuron-ls, and torch-neuronx in the runner's Python. A present piece is
    PASS; a missing one is FAIL (with the fix) when the run means Neuron, else SKIP saying why it does not
    apply and what was seen."""
    wanted = uses_neuron(device, device_nodes, torch_neuronx)
    why_not = f"--device {device} does not use Neuron" if device in ("cpu", "cuda") else "not a Neuron host"

    def missing(name: str, fact: str, fix: str) -> Check:
        return Check(name, FAIL, f"{fact}: {fix}") if wanted else Check(name, SKIP, f"{why_not}: {fact}")

    if device_nodes:
        driver = Check("neuron_driver", PASS, f"{len(device_nodes)} device node(s): {_span(device_nodes)}")
    else:
        driver = missing(
            "neuron_driver",
            "no /dev/neuron* device nodes",
            "the Neuron driver (aws-neuronx-dkms) is not loaded, or this container was started without them "
            "(--device=/dev/neuron0 ...)",
        )
    if torch_neuronx is not None:
        framework = Check("torch_neuronx", PASS, f"torch-neuronx {torch_neuronx} in {python}")
    else:
        framework = missing(
            "torch_neuronx",
            f"torch-neuronx is not installed in {python}",
            "install it there (Neuron SDK 2.31 or older on trn1) or pass --python with the Neuron virtual "
            "environment's interpreter",
        )
    return [driver, _neuron_ls_check(neuron_ls, nproc, wanted, missing), framework]


def _neuron_ls_check(
    neuron_ls: NeuronLs, nproc: int, wanted: bool, missing: Callable[[str, str, str], Check]
) -> Check:
    if neuron_ls.path is None:
        return missing("neuron_ls", "neuron-ls not found", "install aws-neuronx-tools (/opt/aws/neuron/bin)")
    if neuron_ls.problem is not None:
        return missing("neuron_ls", f"{neuron_ls.path} failed", neuron_ls.problem)
    if neuron_ls.cores == 0:
        return missing("neuron_ls", f"{neuron_ls.path} lists no NeuronCores", "check the driver (dmesg)")
    seen = f"{neuron_ls.path}: {neuron_ls.devices} device(s), {neuron_ls.cores} NeuronCore(s)"
    held = sorted({core for use in neuron_ls.busy for core in use.core_ids})
    free = neuron_ls.cores - len(held)
    holders = ", ".join(
        f"pid {u.pid} ({_clip(u.command)}) holds cores {_span([str(c) for c in u.core_ids])}"
        for u in neuron_ls.busy[:3]
    ) + (f" and {len(neuron_ls.busy) - 3} more process(es)" if len(neuron_ls.busy) > 3 else "")
    if wanted and nproc > free:
        if holders:
            return Check(
                "neuron_ls",
                FAIL,
                f"{seen}; only {free} free for --nproc {nproc}: {holders}. "
                "Stop it (trnconsole monitor shows leftovers) or lower --nproc",
            )
        return Check("neuron_ls", FAIL, f"{seen}: fewer than --nproc {nproc}")
    return Check("neuron_ls", PASS, seen + (f"; {holders}" if holders else ""))


def _span(items: Sequence[str]) -> str:
    if len(items) <= 3:
        return ", ".join(items)
    return f"{items[0]} ... {items[-1]}"


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- the compile cache's disk ----


def compile_cache_location(env: Mapping[str, str], override: str | None = None) -> tuple[str, str]:
    """(where the Neuron compile cache lives, what said so). `--cache_dir` in NEURON_CC_FLAGS wins over
    NEURON_COMPILE_CACHE_URL, which wins over the SDK's default; an explicit override wins over all."""
    if override:
        return override, "--cache-dir"
    try:
        flags = shlex.split(env.get("NEURON_CC_FLAGS", ""))
    except ValueError:
        flags = env.get("NEURON_CC_FLAGS", "").split()
    for i, flag in enumerate(flags):
        if flag.startswith("--cache_dir="):
            return flag.split("=", 1)[1], "--cache_dir in NEURON_CC_FLAGS"
        if flag == "--cache_dir" and i + 1 < len(flags):
            return flags[i + 1], "--cache_dir in NEURON_CC_FLAGS"
    url = env.get("NEURON_COMPILE_CACHE_URL", "").strip()
    if url:
        return url, "NEURON_COMPILE_CACHE_URL"
    return DEFAULT_CACHE_DIR, "the Neuron default"


def local_path(location: str) -> Path | None:
    """The local directory of a cache location; None for a remote one (s3:// and other URLs)."""
    if location.startswith("file://"):
        return Path(location[len("file://") :])
    if "://" in location:
        return None
    return Path(location).expanduser()


def disk_check(location: str, source: str, min_free_gb: float) -> Check:
    """Free space where the compile cache lives, against min_free_gb. The directory need not exist yet:
    its nearest existing parent is on the same filesystem."""
    path = local_path(location)
    if path is None:
        return Check("compile_cache_disk", SKIP, f"the compile cache is remote ({location}, from {source})")
    path = path if path.is_absolute() else Path.cwd() / path
    probe = path
    while not os.path.exists(probe) and probe != probe.parent:  # False, not an error, when unreadable
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError as exc:
        return Check("compile_cache_disk", FAIL, f"cannot read free space at {probe}: {exc.strerror}")
    free_gb = usage.free / GIB
    where = f"{path} (from {source})" + ("" if probe == path else f", not created yet: measured at {probe}")
    if not os.access(probe, os.W_OK):
        return Check("compile_cache_disk", FAIL, f"{where} is not writable by this user")
    if free_gb < min_free_gb:
        return Check(
            "compile_cache_disk",
            FAIL,
            f"{free_gb:.1f} GiB free at {where}, below {min_free_gb:g} GiB: free space, or point "
            "NEURON_COMPILE_CACHE_URL (or --cache-dir) at a larger disk",
        )
    return Check("compile_cache_disk", PASS, f"{free_gb:.1f} GiB free at {where}; needs {min_free_gb:g} GiB")


def disk_applies(explicit: bool, platform: str | None, host_is_neuron: bool) -> bool:
    """The compile cache is written only by the Neuron compiler: check its disk when the workers ran on
    Neuron (or did not say, on a Neuron host), or when the user named a cache location."""
    if explicit:
        return True
    if platform is not None:
        return platform == "neuron"
    return host_is_neuron


# ---- the default process count ----


def default_nproc(
    device: str, neuron_ls: NeuronLs, torch_neuronx: str | None, device_nodes: Sequence[str]
) -> int:
    """Every NeuronCore neuron-ls reports when the run means Neuron (a preflight for the whole host), else 2:
    the fewest processes that exercise the collectives."""
    if uses_neuron(device, device_nodes, torch_neuronx) and neuron_ls.cores > 0:
        return neuron_ls.cores
    return 2
