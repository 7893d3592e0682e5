"""The options of each remote backend (`spec.backend_options`), with their help, in one light module.

The CLI, the launch form and the backends' own checks read these tables; nothing here imports boto3 or
kubernetes. Values are kept as the user typed them (strings); each backend converts and checks its own.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.errors import UsageError

COMPILE_CACHE = (
    "NEURON_COMPILE_CACHE_URL of the job (sagemaker default: <s3_prefix>/neuron-compile-cache; "
    "k8s default with --pvc: /shared/neuron-compile-cache)"
)
AWS = {
    "region": "AWS region (default: the AWS configuration's)",
    "profile": "AWS profile (default: AWS_PROFILE or the default profile)",
}
SAGEMAKER = {
    **AWS,
    "s3_prefix": "s3://bucket/prefix for the source, checkpoints and outputs (required)",
    "role": "ARN of the IAM role the training job runs as (required)",
    "instance_type": "ml.trn1.2xlarge (default), ml.trn1.32xlarge, ml.trn1n.32xlarge, ml.p4d.24xlarge, …",
    "instance_count": "instances (default: --nnodes)",
    "image": "training image (default: the PyTorch Neuron training container for torch-neuronx 2.9)",
    "spot": "true: managed spot training",
    "max_wait": "spot only: seconds to wait for capacity and run (default: twice max_runtime)",
    "max_runtime": "seconds before SageMaker stops the job (default 86400)",
    "checkpoint_s3": "S3 URI the checkpoints sync to (default: <s3_prefix>/<run>/checkpoints)",
    "compile_cache": COMPILE_CACHE,
    "neuron_cc_flags": "NEURON_CC_FLAGS of the job, e.g. --model-type=transformer",
    "volume_gb": "EBS volume per instance in GB (default 100)",
    "source_dir": "a script's directory to package (default: the script's own directory)",
    "data_s3": "S3 training data, given to the job as the train channel",
}
BATCH = {
    **AWS,
    "job_queue": "AWS Batch job queue (required)",
    "s3_prefix": "s3://bucket/prefix the job's source is uploaded to (required)",
    "job_definition": "an existing job definition (name or name:revision) instead of registering one",
    "image": "container image (default: the public PyTorch Neuron training image for torch-neuronx 2.9)",
    "neuron_devices": "Neuron devices per node (default: --nproc / 2, at least 1; 0 for none)",
    "efa": "EFA interfaces per node (default 0; 8 on trn1.32xlarge, 16 on trn1n.32xlarge)",
    "vcpus": "vCPUs per node (default 4)",
    "memory_mib": "memory per node in MiB (default 16384)",
    "attempts": "Batch retry strategy attempts, 1-10 (default 3)",
    "resubmit": "resubmissions by the console after a transient failure (default 3)",
    "job_role": "ARN of the IAM role the container runs as",
    "instance_type": "the instance type the compute environment runs (for cost figures), e.g. trn1.32xlarge",
    "compile_cache": COMPILE_CACHE,
    "neuron_cc_flags": "NEURON_CC_FLAGS of the job",
    "source_dir": "a script's directory to package (default: the script's own directory)",
}
K8S = {
    "namespace": "namespace (default: the kubeconfig context's, else default)",
    "context": "kubeconfig context (default: the current one)",
    "kubeconfig": "kubeconfig file (default: KUBECONFIG or ~/.kube/config)",
    "image": "container image (default: the public PyTorch Neuron training image for torch-neuronx 2.9)",
    "neuron_devices": "aws.amazon.com/neuron devices per pod (default: --nproc / 2, at least 1; 0 for none)",
    "efa": "vpc.amazonaws.com/efa interfaces per pod (default 0)",
    "pvc": "a shared volume claim (FSx) mounted at /shared for data, outputs and the compile cache",
    "scheduler": "volcano to gang-schedule the pods with Volcano (default: the cluster's scheduler)",
    "cpu": "CPU request per pod (default 4)",
    "memory": "memory request per pod (default 16Gi)",
    "service_account": "service account of the pods",
    "instance_type": "the nodes' instance type (for cost figures), e.g. trn1.32xlarge",
    "compile_cache": COMPILE_CACHE,
    "neuron_cc_flags": "NEURON_CC_FLAGS of the job",
    "source_dir": "a script's directory to package (default: the script's own directory)",
}
BY_BACKEND: dict[str, dict[str, str]] = {"local": {}, "sagemaker": SAGEMAKER, "batch": BATCH, "k8s": K8S}
SWITCHES = frozenset({"spot"})
TRUE_WORDS = ("true", "1", "yes", "on")


def check_options(backend: str, options: Mapping[str, str]) -> None:
    """Refuse an option the chosen backend does not take, naming where it belongs."""
    known = BY_BACKEND.get(backend, {})
    for key in options:
        if key in known:
            continue
        owners = [name for name, table in BY_BACKEND.items() if key in table]
        where = f"it is for --backend {' or '.join(owners)}" if owners else "no backend takes it"
        option = "--" + key.replace("_", "-")
        raise UsageError(f"{option}: not an option of --backend {backend}; {where}")


def require(backend: str, options: Mapping[str, str], key: str, example: str) -> str:
    value = (options.get(key) or "").strip()
    if not value:
        raise UsageError(f"--{key.replace('_', '-')}: required with --backend {backend}, e.g. {example}")
    return value


def int_option(options: Mapping[str, str], key: str, default: int, minimum: int = 0) -> int:
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"--{key.replace('_', '-')} {raw}: not a whole number") from None
    if value < minimum:
        raise UsageError(f"--{key.replace('_', '-')} {raw}: must be at least {minimum}")
    return value


def switch_option(options: Mapping[str, str], key: str) -> bool:
    return str(options.get(key, "")).strip().lower() in TRUE_WORDS


def neuron_devices(options: Mapping[str, str], nproc: int) -> int:
    """Neuron devices per node: asked for, or enough for nproc workers (a trn1 device has 2 NeuronCores)."""
    return int_option(options, "neuron_devices", max(1, (nproc + 1) // 2))


def config_defaults(backend: str, config: Mapping[str, object]) -> dict[str, str]:
    """A backend's defaults from config.toml's `[backends.<name>]` table (e.g. role, s3_prefix, job_queue),
    so they need not be typed at every launch; options given on the command line win."""
    backends = config.get("backends")
    table = backends.get(backend) if isinstance(backends, Mapping) else None
    if not isinstance(table, Mapping):
        return {}
    known = BY_BACKEND.get(backend, {})
    defaults: dict[str, str] = {}
    for key, value in table.items():
        if key not in known:
            raise UsageError(
                f"config.toml [backends.{backend}] {key}: not an option of this backend; "
                f"use one of {', '.join(sorted(known))}"
            )
        defaults[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return defaults
