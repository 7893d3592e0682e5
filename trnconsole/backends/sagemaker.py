"""SageMaker training jobs: the run's source uploaded to S3, started with CreateTrainingJob, watched through
DescribeTrainingJob and the job's CloudWatch streams, stopped with StopTrainingJob.

boto3 is imported only by the functions that call AWS (through `aws.aws_client` and `aws.call`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..core.errors import UsageError
from ..core.parsers import MetricRegex
from ..core.spec import FALSE_WORDS, TRUE_WORDS, RunSpec
from ..core.store import RunRecord
from . import options as opts
from .aws import aws_client, call, one_line
from .base import RUN_DIR_ENV, Backend, RunStatus, Submission
from .cloudwatch import LogFollower
from .package import Source, package_source, sagemaker_neuron_image

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
CHECKPOINT_PATH = "/opt/ml/checkpoints"  # SageMaker syncs it to CheckpointConfig.S3Uri while the job runs
DEFAULT_INSTANCE_TYPE = "ml.trn1.2xlarge"
DEFAULT_MAX_RUNTIME_S = 86400
DEFAULT_VOLUME_GB = 100
MAX_JOB_NAME = 63
# SageMaker's own limits, checked before anything is uploaded.
MAX_METRIC_DEFINITIONS = 40
MAX_METRIC_REGEX = 500
MAX_HYPERPARAMETERS = 100
MAX_HYPERPARAMETER_KEY = 256
MAX_HYPERPARAMETER_VALUE = 2500
CONSOLE_HYPERPARAMETERS = 10  # the sagemaker_* ones, and a bundled runner's output-dir, resume and data
TRAIN_CHANNEL_PATH = "/opt/ml/input/data/train"  # where SageMaker puts the train channel's files

ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+")
INSTANCE_TYPE = re.compile(r"ml\.[a-z0-9-]+\.[a-z0-9]+")
REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
EXIT_CODE = re.compile(r"ExitCode:?\s+(-?\d+)")

# Every numeric field our runners print on their LOG line (runners/trn_harness: outputs.log_line, fed by
# loop.py's step and eval reports), as SageMaker metric name -> the field's name on the line.
LOG_FIELDS = {
    "loss": "step_loss",
    "learning_rate": "learning_rate",
    "throughput": "throughput",
    "step_time_s": "step_time_s",
    "tokens_per_s": "tokens_per_s",
    "mfu": "mfu",
    "grad_norm": "grad_norm",
    "eval_loss": "eval_loss",
    "eval_accuracy": "eval_accuracy",
    "eval_perplexity": "eval_perplexity",
}
# Each field on the line follows a space, so a plain space before the name tells step_loss from eval_loss
# in any regex dialect. "nan" is not captured: SageMaker's metrics are numbers.
NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

ENDED = {"Completed": "completed", "Failed": "failed", "Stopped": "stopped"}
STATES = {"InProgress": "running", "Stopping": "stopping", **ENDED}
# Why SageMaker itself ended a job that nobody stopped, by secondary status.
LIMIT_REASONS = {
    "MaxRuntimeExceeded": "the job ran past --max-runtime; raise it",
    "MaxWaitTimeExceeded": "spot capacity and the run took longer than --max-wait; raise it",
}


def log_metric_definitions() -> list[dict[str, str]]:
    return [{"Name": name, "Regex": f" {field} : {NUMBER}"} for name, field in LOG_FIELDS.items()]


def job_name(spec: RunSpec, run_id: str) -> str:
    """A valid, recognisable training job name: the run's name (or runner) then its id, at most 63 of
    [a-zA-Z0-9-], starting and ending with a letter or digit."""
    base = spec.name or spec.runner_label.removesuffix(".py")
    base = re.sub(r"[^a-zA-Z0-9]+", "-", base).strip("-") or "trnconsole"
    base = base[: MAX_JOB_NAME - len(run_id) - 1].rstrip("-")
    return f"{base}-{run_id}"


def hyperparameter(value: str | bool) -> str:
    """A value as SageMaker's training toolkit will hand it to the script.

    The toolkit json-decodes each hyperparameter and passes str() of the result, so a number goes bare
    ("16") only when that gives back exactly what was typed; anything else is a JSON string, as the
    SageMaker Python SDK encodes it. A switch is `true` (the toolkit passes `--flag True`).
    """
    if value is True:
        return "true"
    text = str(value)
    try:
        decoded = json.loads(text)
    except ValueError:
        decoded = None
    if isinstance(decoded, (int, float)) and not isinstance(decoded, bool) and str(decoded) == text:
        return text
    return json.dumps(text)


def split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


@dataclass(frozen=True)
class Settings:
    """The SageMaker options of a spec, checked and with their defaults."""

    s3_prefix: str  # s3://bucket/prefix, no trailing slash
    role: str
    region: str | None
    profile: str | None
    instance_type: str
    instance_count: int
    image: str | None
    spot: bool
    max_runtime: int
    max_wait: int | None
    volume_gb: int
    checkpoint_s3: str | None
    compile_cache: str | None
    neuron_cc_flags: str | None
    source_dir: str | None
    data_s3: str | None
    metrics: tuple[MetricRegex, ...]


def read_settings(spec: RunSpec) -> Settings:
    """The spec's options as a SageMaker job takes them; UsageError (one line, naming the option) for
    anything SageMaker would refuse or the job could not do. No network calls."""
    options = spec.backend_options
    s3_prefix = _s3_uri(
        opts.require("sagemaker", options, "s3_prefix", "s3://my-bucket/trnconsole"), "s3_prefix"
    )
    role = opts.require("sagemaker", options, "role", "arn:aws:iam::123456789012:role/SageMakerTraining")
    if not ROLE_ARN.fullmatch(role):
        raise UsageError(
            f"--role {role}: not an IAM role ARN; pass one like "
            "arn:aws:iam::123456789012:role/SageMakerTraining"
        )
    region = _text(options, "region")
    if region and not REGION.fullmatch(region):
        raise UsageError(f"--region {region}: not an AWS region name; pass one like us-west-2")
    instance_type = _text(options, "instance_type") or DEFAULT_INSTANCE_TYPE
    if not INSTANCE_TYPE.fullmatch(instance_type):
        raise UsageError(
            f"--instance-type {instance_type}: not a SageMaker instance type; they start with ml., "
            f"e.g. {DEFAULT_INSTANCE_TYPE} or ml.trn1.32xlarge"
        )
    instance_count = opts.int_option(options, "instance_count", spec.nnodes, minimum=1)
    if spec.nnodes > 1 and instance_count != spec.nnodes:
        raise UsageError(
            f"--instance-count {instance_count}: differs from --nnodes {spec.nnodes}; SageMaker runs one "
            "node per instance, so give one of them"
        )
    spot_text = _text(options, "spot") or "false"
    if spot_text.lower() not in (*TRUE_WORDS, *FALSE_WORDS):
        raise UsageError(f"--spot {spot_text}: use true or false")
    spot = opts.switch_option(options, "spot")
    max_runtime = opts.int_option(options, "max_runtime", DEFAULT_MAX_RUNTIME_S, minimum=1)
    max_wait = None
    if spot:
        max_wait = opts.int_option(options, "max_wait", 2 * max_runtime, minimum=1)
        if max_wait < max_runtime:
            raise UsageError(
                f"--max-wait {max_wait}: must be at least --max-runtime ({max_runtime} s), since it counts "
                "the wait for spot capacity plus the run"
            )
    elif _text(options, "max_wait"):
        raise UsageError("--max-wait: only with --spot true (it bounds the wait for spot capacity)")
    if spec.extra_args:
        raise UsageError(
            f"-- {' '.join(spec.extra_args)}: SageMaker passes the script only hyperparameters; "
            "use --set key=value instead"
        )
    checkpoint_s3 = _text(options, "checkpoint_s3")
    data_s3 = _text(options, "data_s3")
    _check_hyperparameters(spec)
    metrics = tuple(MetricRegex.from_spec(item) for item in spec.metrics)
    _check_metrics(metrics)
    return Settings(
        s3_prefix=s3_prefix,
        role=role,
        region=region,
        profile=_text(options, "profile"),
        instance_type=instance_type,
        instance_count=instance_count,
        image=_text(options, "image"),
        spot=spot,
        max_runtime=max_runtime,
        max_wait=max_wait,
        volume_gb=opts.int_option(options, "volume_gb", DEFAULT_VOLUME_GB, minimum=1),
        checkpoint_s3=_s3_uri(checkpoint_s3, "checkpoint_s3") if checkpoint_s3 else None,
        compile_cache=_text(options, "compile_cache"),
        neuron_cc_flags=_text(options, "neuron_cc_flags"),
        source_dir=_text(options, "source_dir"),
        data_s3=_s3_uri(data_s3, "data_s3") if data_s3 else None,
        metrics=metrics,
    )


def _text(options: Mapping[str, str], key: str) -> str | None:
    return (options.get(key) or "").strip() or None


def _s3_uri(value: str, key: str) -> str:
    bucket, _ = split_s3(value)
    if not value.startswith("s3://") or not BUCKET.fullmatch(bucket):
        raise UsageError(
            f"--{key.replace('_', '-')} {value}: expected s3://bucket/prefix, e.g. s3://my-bucket/runs"
        )
    return value.rstrip("/")


def _check_hyperparameters(spec: RunSpec) -> None:
    if len(spec.flags) + CONSOLE_HYPERPARAMETERS > MAX_HYPERPARAMETERS:
        raise UsageError(
            f"--set: {len(spec.flags)} values; SageMaker takes {MAX_HYPERPARAMETERS} hyperparameters and "
            f"{CONSOLE_HYPERPARAMETERS} are the console's; pass the rest in a config file"
        )
    for key, value in spec.flags.items():
        if len(key) > MAX_HYPERPARAMETER_KEY or len(hyperparameter(value)) > MAX_HYPERPARAMETER_VALUE:
            raise UsageError(
                f"--set {key}: longer than SageMaker takes ({MAX_HYPERPARAMETER_KEY} characters for a name, "
                f"{MAX_HYPERPARAMETER_VALUE} for a value); pass it in a file instead"
            )


def _check_metrics(metrics: tuple[MetricRegex, ...]) -> None:
    room = MAX_METRIC_DEFINITIONS - len(LOG_FIELDS)
    added = {m.name for m in metrics} - set(LOG_FIELDS)  # a user metric named like ours replaces it
    if len(added) > room:
        raise UsageError(
            f"--metric: {len(added)} given; SageMaker takes {MAX_METRIC_DEFINITIONS} metric definitions and "
            f"{len(LOG_FIELDS)} are the console's, so keep at most {room}"
        )
    for metric in metrics:
        if len(metric.pattern.pattern) > MAX_METRIC_REGEX:
            raise UsageError(
                f"--metric {metric.name}=...: the regex is longer than the {MAX_METRIC_REGEX} characters "
                "SageMaker takes; shorten it"
            )


def _seconds(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None


def _utc(value: Any) -> str:
    return (
        value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if isinstance(value, datetime) else "-"
    )


class SageMakerBackend(Backend):
    name = "sagemaker"
    remote = True
    options = frozenset(opts.SAGEMAKER)

    def __init__(self, factory: Callable[[str, str | None, str | None], Any] = aws_client) -> None:
        """`factory(service, region, profile)` makes the boto3 clients; one client per service, region and
        profile is kept for the life of this object."""
        self._factory = factory
        self._clients: dict[tuple[str, str | None, str | None], Any] = {}

    def _client(self, service: str, region: str | None, profile: str | None) -> Any:
        key = (service, region, profile)
        client = self._clients.get(key)
        if client is None:
            client = self._factory(service, region, profile)
            self._clients[key] = client
            # The same client serves the region it resolved to, which is what the handle records.
            self._clients[(service, client.meta.region_name, profile)] = client
        return client

    def _job_client(self, record: RunRecord) -> tuple[Any, str]:
        handle = record.handle or {}
        return self._client("sagemaker", handle.get("region"), handle.get("profile")), handle["job_name"]

    # ---- check and submit ----

    def check(self, spec: RunSpec) -> None:
        read_settings(spec)

    def submit(self, record: RunRecord) -> Submission:
        from botocore.exceptions import ClientError

        spec = record.spec
        settings = read_settings(spec)
        sagemaker = self._client("sagemaker", settings.region, settings.profile)
        region = sagemaker.meta.region_name
        source = package_source(spec, settings.source_dir)
        source_uri = f"{settings.s3_prefix}/source/{source.sha256}/sourcedir.tar.gz"
        self._upload(self._client("s3", region, settings.profile), source, source_uri, settings.s3_prefix)
        name = job_name(spec, record.id)
        request = training_job_request(record, settings, name, region, source, source_uri)
        try:
            call(
                sagemaker.create_training_job,
                action="sagemaker:CreateTrainingJob",
                passthrough=("ResourceInUse",),
                **request,
            )
        except ClientError:
            # A create retried after its first attempt went through finds its own job: that is success.
            if self._describe(sagemaker, name).get("HyperParameters") != request["HyperParameters"]:
                raise UsageError(
                    f"training job {name}: the name is taken by another job; launch the run again"
                ) from None
        handle = {
            "job_name": name,
            "region": region,
            "profile": settings.profile,
            "instance_type": settings.instance_type,
            "instance_count": settings.instance_count,
            "spot": settings.spot,
            "source": source_uri,
            "output": request["OutputDataConfig"]["S3OutputPath"],
            "checkpoints": request["CheckpointConfig"]["S3Uri"],
        }
        return Submission(handle=handle, started_at=time.time())

    def _upload(self, s3: Any, source: Source, uri: str, s3_prefix: str) -> None:
        """Put the tarball at its content-addressed key, unless an earlier launch already did."""
        from botocore.exceptions import ClientError

        bucket, key = split_s3(uri)
        try:
            call(
                s3.head_object,
                action="s3:HeadObject",
                passthrough=("404", "403", "NoSuchKey", "NotFound"),
                Bucket=bucket,
                Key=key,
            )
            return
        except ClientError:
            pass  # absent, or not ours to look at: a PUT says which
        try:
            call(
                s3.put_object,
                action="s3:PutObject",
                passthrough=("NoSuchBucket",),
                Bucket=bucket,
                Key=key,
                Body=source.tarball,
                ContentType="application/gzip",
            )
        except ClientError:
            raise UsageError(
                f"--s3-prefix {s3_prefix}: bucket {bucket} does not exist; create it "
                f"(aws s3 mb s3://{bucket}) or pass another"
            ) from None

    # ---- status ----

    def _describe(self, sagemaker: Any, name: str) -> dict[str, Any]:
        """The job's description; {} when SageMaker no longer knows the job."""
        from botocore.exceptions import ClientError

        try:
            return call(
                sagemaker.describe_training_job,
                action="sagemaker:DescribeTrainingJob",
                passthrough=("ValidationException", "ResourceNotFound"),
                TrainingJobName=name,
            )
        except ClientError as exc:
            error = exc.response.get("Error", {})
            message = one_line(str(error.get("Message", "")))
            if "not found" in message.lower() or "could not find" in message.lower():
                return {}
            raise UsageError(
                f"AWS sagemaker:DescribeTrainingJob failed: {error.get('Code')}: {message}"
            ) from None

    def status(self, record: RunRecord) -> RunStatus:
        sagemaker, name = self._job_client(record)
        job = self._describe(sagemaker, name)
        if not job:
            return RunStatus(
                "lost",
                ended_at=time.time(),
                message=f"SageMaker has no training job {name} in {sagemaker.meta.region_name}",
            )
        state = STATES.get(job.get("TrainingJobStatus", ""), "running")
        reason = one_line(str(job.get("FailureReason") or "")) or None
        exit_code = None
        if state == "completed":
            exit_code = 0
        elif state == "failed" and reason:
            found = EXIT_CODE.search(reason)
            exit_code = int(found.group(1)) if found else None
        secondary = job.get("SecondaryStatus")
        if state == "stopped" and secondary in LIMIT_REASONS:
            reason = f"{secondary}: {LIMIT_REASONS[secondary]}"
        ended_at = None
        if state in ENDED.values():
            ended_at = (
                _seconds(job.get("TrainingEndTime")) or _seconds(job.get("LastModifiedTime")) or time.time()
            )
        return RunStatus(
            state,
            exit_code=exit_code,
            ended_at=ended_at,
            message=reason if state != "completed" else None,
            detail=job_detail(job, record.spec),
        )

    # ---- logs ----

    def logs(self, record: RunRecord, cursor: dict[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
        """The job's CloudWatch lines, every host's, with SageMaker's status changes among them.

        The cursor keeps each stream's token and the transitions already shown (their count and the last
        one's message, which SageMaker rewrites while the status stays), so a new backend object given it
        repeats nothing and loses nothing.
        """
        cursor = cursor or {}
        sagemaker, name = self._job_client(record)
        handle = record.handle or {}
        job = self._describe(sagemaker, name)
        shown = int(cursor.get("transitions", 0))
        message = cursor.get("message")
        new: list[tuple[str, str]] = []
        transitions = job.get("SecondaryStatusTransitions") or []
        for index, transition in enumerate(transitions):
            status = str(transition.get("Status", ""))
            text = one_line(str(transition.get("StatusMessage") or ""))
            if index >= shown:
                when = transition.get("StartTime")
            elif index == shown - 1 and text != message:
                when = job.get("LastModifiedTime")  # the same status with news: as of the job's last change
            else:
                continue
            new.append((status, f"[sagemaker] {_utc(when)} {status}" + (f" - {text}" if text else "")))
        if transitions:
            shown, message = len(transitions), one_line(str(transitions[-1].get("StatusMessage") or ""))
        # Every host writes a new stream each time its container starts, which is in the Training phase: once
        # at first, and again after each restart (a spot job's, after an interruption).
        starts = max(1, sum(1 for transition in transitions if transition.get("Status") == "Training"))
        follower = LogFollower(
            self._client("logs", handle.get("region"), handle.get("profile")),
            LOG_GROUP,
            f"{name}/",
            cursor=cursor.get("streams"),
            expected_streams=int(handle.get("instance_count") or 1) * starts,
        )
        lines, streams = follower.poll()
        # The containers write only while the job is Training: status lines up to the last new Training
        # one come before this poll's log lines, the later ones (Uploading, Completed, ...) after them.
        split = max((i + 1 for i, (status, _) in enumerate(new) if status == "Training"), default=0)
        before, after = [line for _, line in new[:split]], [line for _, line in new[split:]]
        return [*before, *lines, *after], {"streams": streams, "transitions": shown, "message": message}

    # ---- stop ----

    def stop(self, record: RunRecord, grace_s: float = 15.0) -> RunStatus:
        """StopTrainingJob; SageMaker gives the job 120 s after SIGTERM whatever grace_s says, and reports
        Stopped later. A job that already ended only reports how it ended."""
        from botocore.exceptions import ClientError

        now = self.status(record)
        if now.state != "running":
            return now
        sagemaker, name = self._job_client(record)
        try:
            call(
                sagemaker.stop_training_job,
                action="sagemaker:StopTrainingJob",
                passthrough=("ValidationException",),
                TrainingJobName=name,
            )
        except ClientError:
            return self.status(record)  # it ended between the two calls
        return RunStatus("stopping", detail=now.detail)


def training_job_request(
    record: RunRecord, settings: Settings, name: str, region: str, source: Source, source_uri: str
) -> dict[str, Any]:
    """The CreateTrainingJob parameters of a run."""
    spec = record.spec
    run_prefix = f"{settings.s3_prefix}/{record.id}"
    hyperparameters = {
        "sagemaker_program": json.dumps(source.entry_point),
        "sagemaker_submit_directory": json.dumps(source_uri),
        "sagemaker_region": json.dumps(region),
        "sagemaker_container_log_level": "20",
        "sagemaker_job_name": json.dumps(name),
        "sagemaker_torch_distributed_enabled": "true",
        "sagemaker_instance_type": json.dumps(settings.instance_type),
    }
    for key, value in spec.flags.items():
        if value is not False:  # an unset switch is left out, as on a local command line
            hyperparameters[key.replace("_", "-") if spec.bundled else key] = hyperparameter(value)
    if spec.bundled:
        # The runner writes metrics, TensorBoard and checkpoints where SageMaker syncs them to S3 as they
        # come, so what a job wrote is safe before it ends.
        hyperparameters["output-dir"] = json.dumps(CHECKPOINT_PATH)
        if settings.spot and "resume" not in spec.flags:
            # SageMaker restarts an interrupted spot job with that directory restored: carry on from it.
            hyperparameters["resume"] = json.dumps("auto")
        if settings.data_s3 and "data" not in spec.flags:
            hyperparameters["data"] = json.dumps(TRAIN_CHANNEL_PATH)
    metrics = {d["Name"]: d for d in log_metric_definitions()}
    metrics.update({m.name: {"Name": m.name, "Regex": m.pattern.pattern} for m in settings.metrics})
    environment = {
        **spec.env,
        "NEURON_PROCESS_TAG": record.id,
        "TRNCONSOLE_RUN_ID": record.id,
        RUN_DIR_ENV: CHECKPOINT_PATH,  # the bundled runners' --output-dir, synced to S3 as it is written
        "NEURON_COMPILE_CACHE_URL": settings.compile_cache or f"{settings.s3_prefix}/neuron-compile-cache",
    }
    if settings.neuron_cc_flags:
        environment["NEURON_CC_FLAGS"] = settings.neuron_cc_flags
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": settings.max_runtime}
    if settings.max_wait is not None:
        stopping["MaxWaitTimeInSeconds"] = settings.max_wait
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": settings.role,
        "AlgorithmSpecification": {
            "TrainingImage": settings.image or sagemaker_neuron_image(region),
            "TrainingInputMode": "File",
            "MetricDefinitions": list(metrics.values()),
        },
        "HyperParameters": hyperparameters,
        "Environment": environment,
        "OutputDataConfig": {"S3OutputPath": f"{run_prefix}/output"},
        "CheckpointConfig": {
            "S3Uri": settings.checkpoint_s3 or f"{run_prefix}/checkpoints",
            "LocalPath": CHECKPOINT_PATH,
        },
        "ResourceConfig": {
            "InstanceType": settings.instance_type,
            "InstanceCount": settings.instance_count,
            "VolumeSizeInGB": settings.volume_gb,
        },
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": settings.spot,
        "Tags": [{"Key": "trnconsole-run-id", "Value": record.id}],
    }
    if settings.data_s3:
        request["InputDataConfig"] = [
            {
                "ChannelName": "train",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": settings.data_s3,
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
            }
        ]
    return request


def job_detail(job: Mapping[str, Any], spec: RunSpec) -> dict[str, Any]:
    """What DescribeTrainingJob says worth showing beside the run, as plain JSON."""
    resources = job.get("ResourceConfig") or {}
    training = job.get("TrainingTimeInSeconds")
    billable = job.get("BillableTimeInSeconds")
    processes = (
        "torchrun by SageMaker's training toolkit: one worker per NeuronCore (or GPU) of each instance"
    )
    if spec.nproc > 1:
        processes += f"; --nproc {spec.nproc} is not used"
    detail: dict[str, Any] = {
        "job_name": job.get("TrainingJobName"),
        "status": job.get("TrainingJobStatus"),
        "secondary_status": job.get("SecondaryStatus"),
        "transitions": [
            {
                "status": t.get("Status"),
                "start": _seconds(t.get("StartTime")),
                "end": _seconds(t.get("EndTime")),
                "message": one_line(str(t.get("StatusMessage") or "")),
            }
            for t in job.get("SecondaryStatusTransitions") or []
        ],
        "instance_type": resources.get("InstanceType"),
        "instance_count": resources.get("InstanceCount"),
        "spot": bool(job.get("EnableManagedSpotTraining")),
        "processes": processes,
        "training_start": _seconds(job.get("TrainingStartTime")),
        "training_end": _seconds(job.get("TrainingEndTime")),
        "training_seconds": training,
        "billable_seconds": billable,
        "model_artifacts": (job.get("ModelArtifacts") or {}).get("S3ModelArtifacts"),
        "final_metrics": {m["MetricName"]: m["Value"] for m in job.get("FinalMetricDataList") or []},
    }
    if training and billable:
        detail["spot_savings"] = round(1.0 - billable / training, 4)
    return detail
