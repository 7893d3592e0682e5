"""Device selection, process-group set-up, precision contexts and the peak FLOP/s used for MFU.

`--device auto` picks Neuron (torch-neuronx importable), then CUDA, then the CPU. XLA without
torch-neuronx runs on the CPU PJRT client, which is how this code path is exercised off Trainium.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

from .config import UsageError, require_torch_xla, torch_neuronx_present
from .ranks import world_size_from_env

# Dense peak FLOP/s (bf16, fp32) of one physical NeuronCore, by version, from the chip figures in
# aws-neuron-sdk about-neuron/arch/neuron-hardware/trainium2.rst (Trainium: 191 BF16 / 48 FP32 TFLOPS over two
# NeuronCore-v2; Trainium2: 667 / 181 TFLOPS over eight NeuronCore-v3). Inferentia2 (inferentia2.rst: 190 /
# 47.5 over two NeuronCore-v2) is within 1% of the Trainium figure, which stands for every NeuronCore-v2.
NEURONCORE_PEAKS = {"v2": (191e12 / 2, 48e12 / 2), "v3": (667e12 / 8, 181e12 / 8)}
# A process on a Trainium2 at Logical NeuronCore config 2 (the default; logical-neuroncore-config.rst) drives
# two physical NeuronCore-v3, which neuron-monitor calls NeuronCore "v3d".
PHYSICAL_CORES = {"v2": 1, "v3": 1, "v3d": 2}
# The console passes the version it read from the host (neuron-ls, the instance type) here.
CORE_VERSION_ENV = "TRNCONSOLE_NEURONCORE_VERSION"
# The Neuron driver's sysfs (aws-neuron-sdk tools/neuron-sys-tools/neuron-sysfs-user-guide.rst): a core's
# own architecture reads "NCv2"; the device's `device_name` / `instance_type` read "Inferentia2" / "Inf2".
# The device's `arch_type` is the device generation (NDv3 on an Inferentia2), not the core's: not read.
NEURON_SYSFS = "/sys/devices/virtual/neuron_device/neuron0"
DMI_PRODUCT = "/sys/devices/virtual/dmi/id/product_name"  # the EC2 instance type, e.g. "trn1.32xlarge"
FAMILY_CORE_VERSION = {"trn1": "v2", "trn1n": "v2", "inf2": "v2", "trn2": "v3", "trn2n": "v3", "trn2u": "v3"}
DEVICE_CORE_VERSION = {"trainium": "v2", "trainium1": "v2", "inferentia2": "v2", "trainium2": "v3"}
GPU_PEAKS = (
    ("H200", 989e12, 67e12),
    ("H100 PCIe", 756e12, 51e12),
    ("H100", 989e12, 67e12),
    ("A100", 312e12, 19.5e12),
    ("L40S", 362e12, 91.6e12),
    ("L4", 121e12, 30.3e12),
    ("V100", 125e12, 15.7e12),
    ("T4", 65e12, 8.1e12),
)
DEFAULT_NEURON_CC_FLAGS = "--model-type=transformer"


@dataclass
class Runtime:
    """Where this process trains, and its place in the process group."""

    kind: str  # "xla", "cuda" or "cpu"
    device: Any  # torch.device
    platform: str  # "neuron", "xla-cpu", "cuda" or "cpu": what the peak FLOP/s refers to
    rank: int
    local_rank: int
    world_size: int

    @property
    def is_xla(self) -> bool:
        return self.kind == "xla"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def end_step(self) -> None:
        """Cut the XLA graph at the optimizer-step boundary (asynchronous: no wait for the device).

        MpDeviceLoader cuts every --batches-per-execution batches; with --grad-accum those cuts can fall
        mid-step, and a log step's live tensors would then make a graph of its own. Cutting here too keeps
        one fixed set of graphs per step.
        """
        if self.is_xla:
            import torch_xla

            torch_xla.sync()

    def sync(self) -> None:
        """Cut the pending XLA graph and wait for the device (or CUDA), so timings and reads are exact."""
        if self.is_xla:
            import torch_xla
            import torch_xla.core.xla_model as xm

            torch_xla.sync()
            xm.wait_device_ops()
        elif self.kind == "cuda":
            import torch

            torch.cuda.synchronize()


def resolve_kind(requested: str) -> str:
    if requested != "auto":
        return requested
    if torch_neuronx_present():
        return "xla"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def prepare_environment(args: argparse.Namespace, kind: str) -> None:
    """Environment the Neuron compiler and runtime read; must run before torch_xla starts its runtime."""
    if kind != "xla":
        return
    on_neuron = torch_neuronx_present()
    os.environ.setdefault("PJRT_DEVICE", "NEURON" if on_neuron else "CPU")
    flags = os.environ.get("NEURON_CC_FLAGS", "").split()
    if not any(f.startswith("--model-type") for f in flags):
        flags.append(DEFAULT_NEURON_CC_FLAGS)
    if args.neuron_auto_cast != "none":
        flags += [f"--auto-cast={args.neuron_auto_cast}", "--auto-cast-type=bf16"]
    flags += args.compiler_flags.split()
    os.environ["NEURON_CC_FLAGS"] = " ".join(flags)
    if on_neuron and args.precision == "bf16":
        os.environ.setdefault("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")


def setup(args: argparse.Namespace) -> Runtime:
    kind = resolve_kind(args.device)
    prepare_environment(args, kind)
    import torch
    import torch.distributed as dist

    world = world_size_from_env()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if kind == "xla":
        return _setup_xla(world, local_rank)
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is visible; pick --device cpu or xla")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    rank = 0
    if world > 1:
        dist.init_process_group("nccl" if kind == "cuda" else "gloo")
        rank = dist.get_rank()
    return Runtime(kind, device, kind, rank, local_rank, world)


def _setup_xla(world: int, local_rank: int) -> Runtime:
    require_torch_xla()
    on_neuron = torch_neuronx_present()
    if world > 1 and not on_neuron:
        raise UsageError(
            "--device xla with more than one process needs Neuron: the CPU PJRT client cannot form an "
            "xla process group; use --device cpu for multi-process runs off Trainium"
        )
    try:
        if on_neuron:
            import torch_neuronx  # noqa: F401  (registers the Neuron PJRT plugin)
        import torch_xla
        import torch_xla.runtime as xr
    except ImportError as exc:
        raise UsageError(
            f"--device xla: torch_xla failed to import ({exc}); "
            "pip install torch-xla (torch-neuronx on trn1) or pick --device cpu|cuda"
        ) from None
    if world > 1:
        import torch.distributed as dist
        import torch_xla.distributed.xla_backend

        dist.init_process_group("xla", init_method="xla://")
    return Runtime(
        "xla",
        torch_xla.device(),
        "neuron" if on_neuron else "xla-cpu",
        xr.global_ordinal(),
        local_rank,
        xr.world_size(),
    )


def shutdown(runtime: Runtime) -> None:
    """Tear the process group down before exit: gloo's threads still running at interpreter exit can abort
    the process (SIGABRT, "terminate called without an active exception") after a run that finished well.
    destroy_process_group only forgets the group; DDP's reducer holds it too, so the finished trainer's
    model (a reference cycle) is collected first and the group's threads are joined here."""
    if not runtime.distributed or runtime.is_xla:
        return
    import gc

    import torch.distributed as dist

    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


def autocast(runtime: Runtime, precision: str) -> contextlib.AbstractContextManager:
    if precision != "autocast-bf16":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=runtime.kind, dtype=torch.bfloat16)


def peak_flops_per_device(runtime: Runtime, low_precision: bool) -> tuple[float, str]:
    """(peak FLOP/s of one device, where the figure comes from)."""
    bf16_index = 0 if low_precision else 1
    if runtime.platform == "neuron":
        version, found_by = neuroncore_version()
        if version is None:
            return neuroncore_peak("v2", low_precision), "NeuronCore version not found: NeuronCore-v2 assumed"
        return neuroncore_peak(version, low_precision), f"NeuronCore-{version} data sheet ({found_by})"
    if runtime.platform == "cuda":
        import torch

        name = torch.cuda.get_device_name(runtime.device)
        for key, bf16, fp32 in GPU_PEAKS:
            if key in name:
                return (bf16, fp32)[bf16_index], f"{name} data sheet"
        return measure_matmul_flops(runtime.device, low_precision), f"{name} matmul measured at start"
    import torch

    return measure_matmul_flops(torch.device("cpu"), low_precision), "CPU matmul measured at start"


def neuroncore_peak(version: str, low_precision: bool) -> float:
    """Peak FLOP/s of one process's NeuronCore: the physical core's figure times the cores it drives."""
    physical = "v3" if version.startswith("v3") else "v2"
    return NEURONCORE_PEAKS[physical][0 if low_precision else 1] * PHYSICAL_CORES.get(version, 1)


def normalize_core_version(text: str | None, lnc: str | None = None) -> str | None:
    """ "v2", "v3" or "v3d" from the spellings in use ("NCv2", "NC_v3d", "v3"); v3 at LNC 2 is "v3d"."""
    word = (text or "").strip().lower().replace("_", "").removeprefix("nc")
    if word not in ("v2", "v3", "v3d"):
        return None
    if word == "v3" and (lnc or "2").strip() == "2":
        return "v3d"
    return word


def version_from_names(*names: str | None, lnc: str | None = None) -> str | None:
    """The core version an instance type ("trn1n.32xlarge", "Trn2") or device name ("Inferentia2") implies."""
    for name in names:
        word = (name or "").strip().lower()
        version = FAMILY_CORE_VERSION.get(word.split(".")[0]) or DEVICE_CORE_VERSION.get(word)
        if version:
            return normalize_core_version(version, lnc)
    return None


def neuroncore_version(
    environ: dict[str, str] | None = None, sysfs: str = NEURON_SYSFS, dmi: str = DMI_PRODUCT
) -> tuple[str | None, str]:
    """(the NeuronCore version this process runs on, how it was found), found at run time from: the console's
    hint; the driver's sysfs (the core's arch_type, then the device's names); NEURON_PLATFORM_TARGET_OVERRIDE
    (the compiler target the Neuron frameworks honour, e.g. trn2); the EC2 instance type in DMI."""
    env = os.environ if environ is None else environ
    lnc = env.get("NEURON_LOGICAL_NC_CONFIG")
    hinted = normalize_core_version(env.get(CORE_VERSION_ENV), lnc)
    if hinted:
        return hinted, f"{CORE_VERSION_ENV}"
    core_arch = _read(f"{sysfs}/neuron_core0/info/architecture/arch_type")
    version = normalize_core_version(core_arch, lnc)
    if version:
        return version, "Neuron driver sysfs"
    device = [_read(f"{sysfs}/info/architecture/{name}") for name in ("device_name", "instance_type")]
    version = version_from_names(*device, lnc=lnc)
    if version:
        return version, "Neuron driver sysfs"
    version = version_from_names(env.get("NEURON_PLATFORM_TARGET_OVERRIDE"), lnc=lnc)
    if version:
        return version, "NEURON_PLATFORM_TARGET_OVERRIDE"
    version = version_from_names(_read(dmi), lnc=lnc)
    if version:
        return version, "instance type"
    return None, "not found"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip() or None
    except OSError:
        return None


def measure_matmul_flops(device: Any, low_precision: bool, seconds: float = 0.3) -> float:
    """Best achieved FLOP/s of a square matmul, the practical peak of a CPU or an unlisted GPU."""
    import torch

    dtype = torch.bfloat16 if low_precision else torch.float32
    n = 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        (a @ b).sum().item()
        best = max(best, 2 * n**3 / (time.perf_counter() - start))
    return best
