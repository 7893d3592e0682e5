"""What a remote job runs: the job's source as a reproducible `sourcedir.tar.gz`, its argv, and a small
stdlib-only bootstrap that unpacks the source in the container and starts torchrun there.

SageMaker unpacks the tarball itself (its training toolkit runs torchrun); Batch and Kubernetes run
`python -c BOOTSTRAP ...`, so no shell ever sees a user's flags.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from ..core.spec import RunSpec
from ..resources import runners_dir

MAX_SOURCE_BYTES = 64 << 20  # a script's directory larger than this is almost surely not just source
SKIPPED_DIRS = frozenset(
    {"__pycache__", ".git", ".hg", ".venv", "venv", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
)
SKIPPED_SUFFIXES = (".pyc", ".pyo")
# Public images of the PyTorch Neuron training container for torch-neuronx 2.9 (Neuron SDK 2.28), as the
# AWS Deep Learning Containers list them; `--image` overrides.
NEURON_TRAINING_TAG = "pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.28.0-ubuntu24.04"
PUBLIC_NEURON_IMAGE = f"public.ecr.aws/neuron/{NEURON_TRAINING_TAG}"
DLC_ACCOUNT = "763104351884"


def sagemaker_neuron_image(region: str) -> str:
    return f"{DLC_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{NEURON_TRAINING_TAG}"


@dataclass(frozen=True)
class Source:
    """A packaged source directory: the tarball, its digest, and the entry point inside it."""

    tarball: bytes
    sha256: str
    entry_point: str  # relative path of the script inside the tarball, e.g. "bert.py"


def package_source(spec: RunSpec, source_dir: str | None = None) -> Source:
    """The bundled runners (for bert/gpt2/vit) or the script's directory, packaged reproducibly:
    same files, same bytes, same digest, so an unchanged source is uploaded once."""
    if spec.bundled:
        root, entry = runners_dir(), f"{spec.runner}.py"
    else:
        script = Path(spec.runner)
        root = Path(source_dir).expanduser().resolve() if source_dir else script.parent
        if not root.is_dir():
            raise UsageError(f"--source-dir {source_dir}: not a directory")
        try:
            entry = script.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            raise UsageError(
                f"--source-dir {root}: does not contain the script {script}; pass the directory that holds it"
            ) from None
    files = _source_files(root)
    buffer = io.BytesIO()
    # gzip with mtime 0 and sorted, owner-less entries: the digest depends on the files only.
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for path in files:
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o755 if path.stat().st_mode & 0o100 else 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    tarball = buffer.getvalue()
    return Source(tarball=tarball, sha256=hashlib.sha256(tarball).hexdigest(), entry_point=entry)


def _source_files(root: Path) -> list[Path]:
    files: list[Path] = []
    total = 0
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(part in SKIPPED_DIRS for part in parts) or not path.is_file() or path.is_symlink():
            continue
        if path.suffix in SKIPPED_SUFFIXES:
            continue
        total += path.stat().st_size
        if total > MAX_SOURCE_BYTES:
            raise UsageError(
                f"--source-dir {root}: more than {MAX_SOURCE_BYTES >> 20} MiB of files; pass a directory "
                "holding only the training code (data goes to S3 or a shared volume)"
            )
        files.append(path)
    return files


def script_args(spec: RunSpec, output_dir: str | None) -> list[str]:
    """The runner's argv after the script: its flags, the console-owned output directory for a bundled
    runner, then the extra arguments."""
    args = spec.runner_args()
    if spec.bundled and output_dir:
        cut = len(args) - len(spec.extra_args)
        args = [*args[:cut], "--output-dir", output_dir, *args[cut:]]
    return args


# Runs in the job's container with only the standard library (and boto3 for an s3:// source, which the
# Neuron training images carry): fetch and unpack the source, then exec torchrun with the entry point.
# argv: SOURCE NPROC NNODES -- ENTRY ARGS...   Multi-node placement comes from the platform:
# Kubernetes indexed Jobs (JOB_COMPLETION_INDEX, TRNCONSOLE_MASTER_ADDR set by the console) or AWS Batch
# multi-node jobs (AWS_BATCH_JOB_NODE_INDEX, AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS).
BOOTSTRAP = r"""
import io, os, sys, tarfile, tempfile
def placement(env):
    rank = env.get("JOB_COMPLETION_INDEX") or env.get("AWS_BATCH_JOB_NODE_INDEX") or "0"
    master = env.get("TRNCONSOLE_MASTER_ADDR") or env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS")
    return int(rank), master or "127.0.0.1"
def main(argv):
    source, nproc, nnodes = argv[0], int(argv[1]), int(argv[2])
    rest = argv[argv.index("--") + 1:]
    if source.startswith("s3://"):
        import boto3
        bucket, _, key = source[5:].partition("/")
        data = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    else:
        with open(source, "rb") as f:
            data = f.read()
    work = tempfile.mkdtemp(prefix="trnconsole-source-")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(work, filter="data")
        else:
            tar.extractall(work)
    os.chdir(work)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=%d" % nproc]
    if nnodes > 1:
        rank, master = placement(os.environ)
        port = os.environ.get("TRNCONSOLE_MASTER_PORT", "29500")
        cmd += ["--nnodes=%d" % nnodes, "--node_rank=%d" % rank]
        cmd += ["--master_addr=" + master, "--master_port=" + port]
    print("trnconsole bootstrap: " + " ".join(cmd[2:] + rest[:1]), flush=True)
    # "--": torchrun's parser would take a script flag that abbreviates one of its own (--logs) as its.
    os.execv(sys.executable, cmd + ["--"] + rest)
if __name__ == "__main__":
    main(sys.argv[1:])
"""


def bootstrap_command(
    source: str, spec: RunSpec, entry_point: str, output_dir: str | None, python: str = "python"
) -> list[str]:
    """The container's argv: the bootstrap, then the entry point and its arguments as separate items."""
    return [
        python,
        "-c",
        BOOTSTRAP,
        source,
        str(spec.nproc),
        str(spec.nnodes),
        "--",
        entry_point,
        *script_args(spec, output_dir),
    ]
