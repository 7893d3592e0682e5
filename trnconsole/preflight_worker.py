"""A preflight worker: a checked tensor op on its device, then checked collectives across the torchrun group.

    python -m torch.distributed.run --standalone --nproc_per_node N preflight_worker.py --device auto
    python preflight_worker.py --probe      (what the interpreter has installed; imports nothing heavy)

It runs in the runner's Python, which may not have trnconsole installed, so it is started by path and uses
the standard library and torch only. Each rank prints `TRNCONSOLE_PREFLIGHT {json}` lines on stdout: a
`start` line as each check begins and a `check` line as it ends (so a rank stopped mid-run still says what
it did and where it was), and last one `result` line with every check. A watchdog thread bounds each check:
a hung collective becomes a timeout result naming the collective, then the process leaves. The verdict is in
the result line; the exit status is 1 only when setup failed, so that torchrun stops the ranks still waiting
for this one to join the process group.

TRNCONSOLE_PREFLIGHT_FAULTS (for tests of the verdicts) injects faults, comma-separated:
`corrupt:CHECK@RANK` (that rank's contribution is off by 1000), `stall:CHECK@RANK` (that rank sleeps at the
start of CHECK), `no_reduce_scatter_tensor@RANK` (that rank treats reduce_scatter_tensor as unsupported).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import sys
import threading
import time
from typing import Any

MARKER = "TRNCONSOLE_PREFLIGHT "
FAULTS_ENV = "TRNCONSOLE_PREFLIGHT_FAULTS"
CHECKS = ("device_op", "all_reduce", "all_gather", "reduce_scatter")
COLLECTIVES = CHECKS[1:]
# The process group's own timeout stays above the watchdog's, so the watchdog names the check first; the
# backend's timeout (NCCL's aborts the process) is the backstop.
BACKEND_TIMEOUT_MARGIN_S = 15.0
MATMUL_N = 64
# Relative (Frobenius) error allowed against the float64 CPU reference: loose enough for a compiler that
# casts matmuls to bf16 (about 1e-2 worst case at this size), tight enough to catch a wrong result.
MATMUL_TOLERANCE = 3e-2
CHUNK = 4  # elements each rank contributes to a collective
CORRUPTION = 1000.0
DETAIL_LIMIT = 400
# After a failed setup, time for peers failing the same way to write their own results before this rank's
# exit makes torchrun stop them.
SETUP_FAILURE_GRACE_S = 3.0


def emit(payload: dict[str, Any]) -> None:
    """One marker line in a single write: several ranks share the pipe, and writes under PIPE_BUF bytes
    are not interleaved."""
    os.write(1, (MARKER + json.dumps(payload) + "\n").encode())


def short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 3] + "..."


def probe() -> dict[str, Any]:
    """What this interpreter has, found without importing it (torch takes seconds to import)."""

    def version(module: str, dist: str) -> str | None:
        if importlib.util.find_spec(module) is None:
            return None
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "unknown version"

    return {
        "python": sys.executable,
        "python_version": sys.version.split()[0],
        "torch": version("torch", "torch"),
        "torch_xla": version("torch_xla", "torch-xla"),
        "torch_neuronx": version("torch_neuronx", "torch-neuronx"),
    }


# ---- faults (tests) ----


def parse_faults(text: str, rank: int) -> dict[str, set[str]]:
    """{"corrupt": {checks}, "stall": {checks}, "no_reduce_scatter_tensor": {""}} for this rank."""
    faults: dict[str, set[str]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        what, _, at = item.partition("@")
        if at not in ("*", str(rank)):
            continue
        kind, _, check = what.partition(":")
        faults.setdefault(kind, set()).add(check)
    return faults


# ---- results and the watchdog ----


class Reporter:
    """The rank's checks so far; writes the result line exactly once, from whichever thread gets there."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank = rank
        self.world = world
        self.info: dict[str, Any] = {}
        self.checks: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.sent = False

    def add(
        self, name: str, result: str, detail: str, ms: float | None = None, announce: bool = False
    ) -> None:
        with self.lock:
            if self.sent or name in self.checks:
                return
            self.checks[name] = {"name": name, "result": result, "detail": short(detail), "ms": ms}
            if announce:
                emit({"event": "check", "rank": self.rank, "check": self.checks[name]})

    def skip_rest(self, reason: str) -> None:
        for name in CHECKS:
            self.add(name, "SKIP", reason)

    def finish(self) -> None:
        with self.lock:
            if self.sent:
                return
            self.sent = True
            ordered = [self.checks[n] for n in CHECKS if n in self.checks]
            emit({"event": "result", "rank": self.rank, "world": self.world, **self.info, "checks": ordered})


class Watchdog:
    """Bounds each phase: past the limit, the phase is recorded as timed out, the result line written and
    the process ended (a thread cannot interrupt a collective that never returns)."""

    def __init__(self, reporter: Reporter, limit_s: float) -> None:
        self.reporter = reporter
        self.limit_s = limit_s
        self.phase: str | None = None
        self.deadline = float("inf")
        self.cond = threading.Condition()
        threading.Thread(target=self._watch, name="preflight-watchdog", daemon=True).start()

    def begin(self, phase: str) -> None:
        emit({"event": "start", "rank": self.reporter.rank, "check": phase})
        with self.cond:
            self.phase, self.deadline = phase, time.monotonic() + self.limit_s
            self.cond.notify()

    def end(self) -> None:
        with self.cond:
            self.phase, self.deadline = None, float("inf")
            self.cond.notify()

    def _watch(self) -> None:
        with self.cond:
            while True:
                left = self.deadline - time.monotonic()
                if self.phase is not None and left <= 0:
                    break
                self.cond.wait(timeout=None if left == float("inf") else left)
            phase = self.phase
        what = "the collective" if phase in COLLECTIVES else "the step"
        if phase == "setup":
            reason = f"setup (device, process group) did not finish within {self.limit_s:g} s"
            self.reporter.info["error"] = reason
            self.reporter.skip_rest(f"not run: {reason}")
            setup_failed(self.reporter)
        else:
            self.reporter.add(
                phase or "?",
                "FAIL",
                f"timed out: {phase} did not complete within {self.limit_s:g} s "
                f"({what} hung; a peer rank may be missing or stuck)",
                self.limit_s * 1000.0,
            )
            self.reporter.skip_rest(f"not run: {phase} timed out before it")
        self.reporter.finish()
        sys.stdout.flush()
        os._exit(0)


def setup_failed(reporter: Reporter) -> None:
    reporter.finish()
    if reporter.world > 1:
        time.sleep(SETUP_FAILURE_GRACE_S)
    sys.stdout.flush()
    os._exit(1)


# ---- the device ----


class Device:
    """Where this rank runs, how to wait for it, and which collective backend it uses."""

    def __init__(self, requested: str, world: int) -> None:
        """Resolves the device kind and imports what it needs (unwatched: imports are slow, not hung)."""
        import torch

        self.world = world
        self.kind = self._resolve(requested, torch)
        self.on_neuron = self.kind == "xla" and importlib.util.find_spec("torch_neuronx") is not None
        self.xla_world: int | None = None
        self.device: Any = None
        self.platform = self.kind
        self.backend = {"xla": "xla", "cuda": "nccl"}.get(self.kind, "gloo")
        if self.kind == "xla":
            # The Neuron PJRT plugin when torch-neuronx is there, else torch_xla's CPU client.
            os.environ.setdefault("PJRT_DEVICE", "NEURON" if self.on_neuron else "CPU")
            if self.on_neuron:
                import torch_neuronx  # noqa: F401  (registers the Neuron PJRT plugin)
            import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)

    def open(self, local_rank: int) -> None:
        """Starts the device (the PJRT client, the CUDA context): the part that can hang on a busy host."""
        import torch

        if self.kind == "xla":
            import torch_xla
            import torch_xla.runtime as xr

            self.device = torch_xla.device()
            self.xla_world = xr.world_size()
            self.platform = "neuron" if self.on_neuron else f"xla-{os.environ['PJRT_DEVICE'].lower()}"
        elif self.kind == "cuda":
            if local_rank >= torch.cuda.device_count():
                raise RuntimeError(
                    f"local rank {local_rank} has no GPU: {torch.cuda.device_count()} CUDA device(s) visible"
                )
            torch.cuda.set_device(local_rank)
            self.device = torch.device("cuda", local_rank)
            self.platform = torch.cuda.get_device_name(local_rank)
        else:
            self.device = torch.device("cpu")

    @staticmethod
    def _resolve(requested: str, torch: Any) -> str:
        if requested != "auto":
            if requested == "xla" and importlib.util.find_spec("torch_xla") is None:
                raise RuntimeError("--device xla: torch_xla is not installed in this Python")
            if requested == "cuda" and not torch.cuda.is_available():
                raise RuntimeError("--device cuda: no CUDA device is visible")
            return requested
        if importlib.util.find_spec("torch_neuronx") is not None:
            return "xla"
        return "cuda" if torch.cuda.is_available() else "cpu"

    def collectives_unavailable(self) -> str | None:
        """Why the xla backend cannot join the workers, when it cannot (None when it can)."""
        if self.kind != "xla" or self.xla_world == self.world:
            return None
        return (
            f"torch_xla's {os.environ.get('PJRT_DEVICE', '?')} PJRT client makes each process a world of its "
            "own: "
            f"xr.world_size() is {self.xla_world} in each of the {self.world} torchrun workers, so the xla "
            "backend cannot form one process group"
        )

    def sync(self) -> None:
        if self.kind == "xla":
            import torch_xla
            import torch_xla.core.xla_model as xm

            torch_xla.sync()
            xm.wait_device_ops()
        elif self.kind == "cuda":
            import torch

            torch.cuda.synchronize()


# ---- the checks ----


def check_device_op(dev: Device, rank: int, corrupt: bool) -> tuple[str, str]:
    import torch

    gen = torch.Generator().manual_seed(1234 + rank)
    a = torch.randn(MATMUL_N, MATMUL_N, generator=gen)
    b = torch.randn(MATMUL_N, MATMUL_N, generator=gen)
    reference = a.double() @ b.double()
    out = a.to(dev.device) @ b.to(dev.device)
    if corrupt:
        out = out + CORRUPTION
    dev.sync()
    got = out.cpu().double()
    where = f"{MATMUL_N}x{MATMUL_N} fp32 matmul on {dev.device.type}"
    if not torch.isfinite(got).all():
        return "FAIL", f"{where}: result has NaN/inf"
    error = float((got - reference).norm() / reference.norm())
    if error > MATMUL_TOLERANCE:
        return (
            "FAIL",
            f"{where}: relative error {error:.3g} against the CPU reference (limit {MATMUL_TOLERANCE:g})",
        )
    # The error to one digit, so that ranks agreeing within rounding show one line.
    return "PASS", f"{where} matches the CPU reference (relative error ~{error:.0e})"


def _values(tensor: Any) -> list[float]:
    return [round(float(v), 6) for v in tensor.cpu().flatten().tolist()]


def _mismatch(got: list[float], expected: list[float]) -> str:
    return f"got {_brief(got)}, expected {_brief(expected)}"


def _brief(values: list[float]) -> str:
    shown = ", ".join(f"{v:g}" for v in values[:8])
    return f"[{shown}{', ...' if len(values) > 8 else ''}]"


def check_all_reduce(dev: Device, dist: Any, rank: int, world: int, corrupt: bool) -> tuple[str, str]:
    import torch

    contribution = float(rank + 1) + (CORRUPTION if corrupt else 0.0)
    tensor = torch.full((CHUNK,), contribution, device=dev.device)
    dist.all_reduce(tensor)
    got = _values(tensor)
    expected = [world * (world + 1) / 2] * CHUNK
    if got != expected:
        return "FAIL", f"sum of rank+1: {_mismatch(got, expected)}"
    return "PASS", f"sum of rank+1 over {world} rank(s) = {expected[0]:g} everywhere"


def check_all_gather(dev: Device, dist: Any, rank: int, world: int, corrupt: bool) -> tuple[str, str]:
    import torch

    mine = torch.full((CHUNK,), float(rank) + (CORRUPTION if corrupt else 0.0), device=dev.device)
    gathered = [torch.zeros(CHUNK, device=dev.device) for _ in range(world)]
    dist.all_gather(gathered, mine)
    got = [_values(t) for t in gathered]
    for source, values in enumerate(got):
        if values != [float(source)] * CHUNK:
            return (
                "FAIL",
                f"slot {source} (rank {source}'s tensor): {_mismatch(values, [float(source)] * CHUNK)}",
            )
    return "PASS", f"every rank's tensor arrived in rank order ({world} slot(s))"


def check_reduce_scatter(
    dev: Device, dist: Any, rank: int, world: int, corrupt: bool, unsupported: bool
) -> tuple[str, str]:
    """Slot j of rank r's input holds (r+1)*(j+1), so rank r must end with (j=r) (r+1)*N(N+1)/2."""
    import torch

    scale = float(rank + 1) + (CORRUPTION if corrupt else 0.0)
    slots = torch.arange(1, world + 1, dtype=torch.float32).repeat_interleave(CHUNK) * scale
    source = slots.to(dev.device)
    out = torch.zeros(CHUNK, device=dev.device)
    note = ""
    try:
        if unsupported:
            raise RuntimeError(f"Process group {dev.backend} does not support reduce_scatter_tensor (fault)")
        dist.reduce_scatter_tensor(out, source)
    except (RuntimeError, NotImplementedError) as exc:
        if not backend_lacks(exc):
            raise
        # What the backend lacks, checked through the same maths: all_reduce, then this rank's slice.
        reduced = source.clone()
        dist.all_reduce(reduced)
        out = reduced[rank * CHUNK : (rank + 1) * CHUNK]
        note = (
            f"{dev.backend} lacks reduce_scatter_tensor ({short(str(exc))[:120]}); "
            "checked the equivalent all_reduce + slice instead: "
        )
    got = _values(out)
    expected = [float(rank + 1) * world * (world + 1) / 2] * CHUNK
    if got != expected:
        return "FAIL", f"{note}this rank's reduced slice: {_mismatch(got, expected)}"
    return "PASS", f"{note}each rank got its reduced slice ({world} slot(s))"


def backend_lacks(exc: BaseException) -> bool:
    """Whether a collective failed because the backend does not implement it (e.g. older gloo's
    "ProcessGroupGloo does not support reduce_scatter"), rather than because it ran and broke."""
    return isinstance(exc, NotImplementedError) or "does not support" in str(exc)


# ---- main ----


def run(args: argparse.Namespace) -> None:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    faults = parse_faults(os.environ.get(FAULTS_ENV, ""), rank)
    reporter = Reporter(rank, world)
    watchdog = Watchdog(reporter, args.check_timeout)

    def enter(phase: str) -> None:
        watchdog.begin(phase)
        if phase in faults.get("stall", ()):
            time.sleep(10 * 24 * 3600)

    try:
        import torch
        import torch.distributed as dist

        dev = Device(args.device, world)
        reporter.info.update(kind=dev.kind, backend=dev.backend, torch=torch.__version__)
        enter("setup")
        dev.open(local_rank)
        reporter.info.update(device=str(dev.device), platform=dev.platform)
        skip_collectives = dev.collectives_unavailable()
        if skip_collectives is None:
            if dev.backend == "xla":
                dist.init_process_group("xla", init_method="xla://", timeout=_timeout(args.check_timeout))
            else:
                dist.init_process_group(dev.backend, timeout=_timeout(args.check_timeout))
        watchdog.end()
    except Exception as exc:
        watchdog.end()
        reporter.info["error"] = f"setup failed: {type(exc).__name__}: {short(str(exc))}"
        reporter.skip_rest("not run: setup failed")
        setup_failed(reporter)

    corrupt = faults.get("corrupt", set())
    steps: list[tuple[str, Any]] = [
        ("device_op", lambda: check_device_op(dev, rank, "device_op" in corrupt)),
        ("all_reduce", lambda: check_all_reduce(dev, dist, rank, world, "all_reduce" in corrupt)),
        ("all_gather", lambda: check_all_gather(dev, dist, rank, world, "all_gather" in corrupt)),
        (
            "reduce_scatter",
            lambda: check_reduce_scatter(
                dev, dist, rank, world, "reduce_scatter" in corrupt, "no_reduce_scatter_tensor" in faults
            ),
        ),
    ]
    broken: str | None = None
    for name, step in steps:
        if name in COLLECTIVES and skip_collectives:
            reporter.add(name, "FAIL" if dev.on_neuron else "SKIP", skip_collectives)
            continue
        if broken:
            reporter.add(name, "SKIP", f"not run: the process group broke in {broken}")
            continue
        enter(name)
        start = time.perf_counter()
        try:
            result, detail = step()
            dev.sync()
        except Exception as exc:
            result, detail = "FAIL", f"{type(exc).__name__}: {exc}"
            if name in COLLECTIVES:
                broken = name
        watchdog.end()
        reporter.add(name, result, detail, round((time.perf_counter() - start) * 1000.0, 3), announce=True)
    reporter.finish()
    if broken:
        # A broken group cannot be torn down cleanly; its threads could abort the process at exit, and
        # torchrun would then kill ranks that are still writing their results.
        sys.stdout.flush()
        os._exit(0)
    if dist.is_initialized() and dev.backend != "xla":
        # gloo's threads still alive at interpreter exit can abort the process after a good run.
        dist.destroy_process_group()


def _timeout(check_timeout_s: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=check_timeout_s + BACKEND_TIMEOUT_MARGIN_S)


def _forget_script_dir() -> None:
    """Run by path, this file puts trnconsole/ first on sys.path, where its sibling modules and packages
    (core, ui, ...) could shadow what torch imports; nothing of trnconsole is wanted here."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "xla", "cuda", "cpu"), default="auto")
    parser.add_argument("--check-timeout", type=float, default=120.0, help="seconds each check may take")
    parser.add_argument("--probe", action="store_true", help="print what this Python has installed, as JSON")
    args = parser.parse_args(argv)
    _forget_script_dir()
    if args.probe:
        print(json.dumps(probe()))
        return 0
    run(args)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
