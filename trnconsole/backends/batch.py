"""AWS Batch jobs: the source uploaded to S3, a job definition registered for the run (or the user's own), the
job submitted to a queue and followed through its states and its CloudWatch logs, and transient failures
(a reclaimed host, a registry timeout) resubmitted by the console with backoff.

boto3 and botocore are imported inside the calls that use them: importing this module stays light.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.spec import RunSpec
from ..core.store import RunRecord
from . import options as opts
from .aws import aws_client, backoff_s, call, one_line
from .base import RUN_DIR_ENV, Backend, RunStatus, Submission
from .cloudwatch import LogFollower
from .package import PUBLIC_NEURON_IMAGE, Source, bootstrap_command, package_source

LOG_GROUP = "/aws/batch/job"
STOP_REASON = "stopped from trnconsole"
ENDED = ("SUCCEEDED", "FAILED")
DEFAULT_VCPUS = 4
DEFAULT_MEMORY_MIB = 16384
DEFAULT_ATTEMPTS = 3
DEFAULT_RESUBMIT = 3
MAX_ATTEMPTS = 10  # AWS Batch's own limit on retryStrategy.attempts
MAX_NEURON_DEVICES = 16  # trn1.32xlarge, trn1n.32xlarge and trn2.48xlarge each have 16
MIN_MEMORY_MIB = 512
RESUBMIT_BASE_S = 30.0
RESUBMIT_CAP_S = 15 * 60.0
DESCRIBE_LIMIT = 100  # job ids per DescribeJobs request
NOT_FOUND = ("404", "NoSuchKey", "NotFound")
S3_URI = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?$")
NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")

# Batch's own retries: a job whose instance went away is tried again at once, anything else ends the job.
RETRY_STRATEGY_RULES = (
    {"onStatusReason": "Host EC2*", "action": "RETRY"},
    {"onReason": "*", "action": "EXIT"},
)

# Failures that say nothing about the job itself, so the console submits it again after a pause. Batch
# reports them in the job's statusReason or its container's reason.
TRANSIENT_REASONS = (
    # The instance went away under the job: a Spot reclaim, a scale-in or a hardware retirement. Batch
    # retries these itself; the console takes over once the job's own attempts are spent.
    re.compile(r"^Host EC2\b"),
    # A Spot interruption worded by ECS rather than Batch ("Your Spot Task was interrupted.").
    re.compile(r"\bspot\b.*\binterrupt", re.IGNORECASE),
    # ECS could not set the task up (network interface, log driver, secrets): control-plane trouble at the
    # start, before any of the job's code ran.
    re.compile(r"ResourceInitializationError"),
    # The registry was slow or throttled the pull; a missing image or a refused pull fails the same way
    # again and is left out.
    re.compile(
        r"CannotPullContainerError.*(timeout|timed out|deadline exceeded|toomanyrequests|rate exceeded|"
        r"throttl|connection reset)",
        re.IGNORECASE,
    ),
    # The host's Docker daemon was too slow to create or start the container.
    re.compile(r"DockerTimeoutError"),
)

ClientFactory = Callable[..., Any]


@dataclass(frozen=True)
class Settings:
    """The Batch options of a spec, checked and converted."""

    region: str | None
    profile: str | None
    job_queue: str
    bucket: str
    prefix: str
    job_definition: str | None
    image: str
    neuron_devices: int
    efa: int
    vcpus: int
    memory_mib: int
    attempts: int
    resubmit: int
    job_role: str | None
    compile_cache: str | None
    neuron_cc_flags: str | None
    source_dir: str | None
    # Whether --vcpus or --memory-mib was given, so a user's own job definition keeps its resources otherwise.
    resources_given: bool

    def source_uri(self, sha256: str) -> str:
        key = "/".join(part for part in (self.prefix, "source", sha256, "sourcedir.tar.gz") if part)
        return f"s3://{self.bucket}/{key}"


def settings(spec: RunSpec) -> Settings:
    """The spec's Batch options, or a one-line UsageError naming the option at fault."""
    options = spec.backend_options
    job_queue = opts.require("batch", options, "job_queue", "--job-queue trn1-queue")
    s3_prefix = opts.require("batch", options, "s3_prefix", "--s3-prefix s3://my-bucket/trnconsole")
    match = S3_URI.match(s3_prefix)
    if not match:
        raise UsageError(
            f"--s3-prefix {s3_prefix}: expected s3://bucket/prefix, e.g. s3://my-bucket/trnconsole"
        )
    given = options.get("neuron_devices") not in (None, "")
    devices = opts.neuron_devices(options, spec.nproc)
    if devices > MAX_NEURON_DEVICES:
        if given:
            raise UsageError(
                f"--neuron-devices {devices}: a node has at most {MAX_NEURON_DEVICES} Neuron devices "
                "(2 NeuronCores each on trn1); count devices, not cores"
            )
        raise UsageError(
            f"--neuron-devices: --nproc {spec.nproc} asks for {devices} Neuron devices by default, more than "
            f"a node has ({MAX_NEURON_DEVICES}); set --neuron-devices to the node's device count"
        )
    attempts = opts.int_option(options, "attempts", DEFAULT_ATTEMPTS, minimum=1)
    if attempts > MAX_ATTEMPTS:
        raise UsageError(f"--attempts {attempts}: AWS Batch allows 1 to {MAX_ATTEMPTS} attempts")
    job_role = _text(options, "job_role")
    if job_role and not job_role.startswith("arn:"):
        raise UsageError(
            f"--job-role {job_role}: expected an IAM role ARN, e.g. arn:aws:iam::123456789012:role/trn-batch"
        )
    return Settings(
        region=_text(options, "region"),
        profile=_text(options, "profile"),
        job_queue=job_queue,
        bucket=match.group(1),
        prefix=(match.group(2) or "").strip("/"),
        job_definition=_text(options, "job_definition"),
        image=_text(options, "image") or PUBLIC_NEURON_IMAGE,
        neuron_devices=devices,
        efa=opts.int_option(options, "efa", 0),
        vcpus=opts.int_option(options, "vcpus", DEFAULT_VCPUS, minimum=1),
        memory_mib=opts.int_option(options, "memory_mib", DEFAULT_MEMORY_MIB, minimum=MIN_MEMORY_MIB),
        attempts=attempts,
        resubmit=opts.int_option(options, "resubmit", DEFAULT_RESUBMIT),
        job_role=job_role,
        compile_cache=_text(options, "compile_cache"),
        neuron_cc_flags=_text(options, "neuron_cc_flags"),
        source_dir=_text(options, "source_dir"),
        resources_given=any(options.get(key) not in (None, "") for key in ("vcpus", "memory_mib")),
    )


def _text(options: dict[str, str], key: str) -> str | None:
    return (options.get(key) or "").strip() or None


def job_name(record: RunRecord) -> str:
    """`trnconsole-<name or runner>-<run id>`, in the letters Batch accepts for job and definition names."""
    label = NAME_UNSAFE.sub("-", record.spec.name or record.spec.runner_label).strip("-_")[:60]
    return f"trnconsole-{label or 'run'}-{record.id}"


def environment(record: RunRecord, s: Settings) -> list[dict[str, str]]:
    """The job's environment: the user's, the Neuron options, and the tag that matches it to its run."""
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}  # lines reach CloudWatch as they are printed
    if s.efa:
        # The collectives go over EFA with device RDMA; fork safety because dataloader workers fork.
        env.update(FI_PROVIDER="efa", FI_EFA_USE_DEVICE_RDMA="1", FI_EFA_FORK_SAFE="1")
    env.update(record.spec.env)
    if s.neuron_cc_flags:
        env["NEURON_CC_FLAGS"] = s.neuron_cc_flags
    if s.compile_cache:
        env["NEURON_COMPILE_CACHE_URL"] = s.compile_cache
    env.update(NEURON_PROCESS_TAG=record.id, TRNCONSOLE_RUN_ID=record.id)
    env[RUN_DIR_ENV] = output_dir(record)
    # Batch drops empty values; leaving them out keeps what was sent equal to what runs.
    return [{"name": k, "value": v} for k, v in sorted(env.items()) if v != ""]


def resources(s: Settings) -> list[dict[str, str]]:
    return [{"type": "VCPU", "value": str(s.vcpus)}, {"type": "MEMORY", "value": str(s.memory_mib)}]


def output_dir(record: RunRecord) -> str:
    """Where the job writes its outputs, inside the container (a bundled runner's --output-dir)."""
    return f"/tmp/trnconsole/{record.id}"


def command(record: RunRecord, source_uri: str, entry_point: str) -> list[str]:
    return bootstrap_command(source_uri, record.spec, entry_point, output_dir=output_dir(record))


def container_properties(record: RunRecord, s: Settings, source_uri: str, entry_point: str) -> dict[str, Any]:
    """One node's container: the bootstrap argv, resources, devices and environment."""
    devices = [_device(f"/dev/neuron{i}") for i in range(s.neuron_devices)]
    devices += [_device(f"/dev/infiniband/uverbs{i}") for i in range(s.efa)]
    # Docker's default 64 MiB /dev/shm is too small for PyTorch dataloader workers.
    linux: dict[str, Any] = {"sharedMemorySize": s.memory_mib // 4}
    props: dict[str, Any] = {
        "image": s.image,
        "command": command(record, source_uri, entry_point),
        "resourceRequirements": resources(s),
        "environment": environment(record, s),
        "linuxParameters": linux,
    }
    if devices:
        linux["devices"] = devices
        # The Neuron runtime and EFA pin host memory for DMA; the default locked-memory limit is too small.
        props["ulimits"] = [{"name": "memlock", "softLimit": -1, "hardLimit": -1}]
    if s.job_role:
        props["jobRoleArn"] = s.job_role
    return props


def _device(path: str) -> dict[str, Any]:
    return {"hostPath": path, "containerPath": path, "permissions": ["READ", "WRITE"]}


def retry_strategy(s: Settings) -> dict[str, Any]:
    return {"attempts": s.attempts, "evaluateOnExit": [dict(rule) for rule in RETRY_STRATEGY_RULES]}


def tags(record: RunRecord) -> dict[str, str]:
    label = NAME_UNSAFE.sub("-", record.spec.runner_label)[:200]
    return {"trnconsole:run-id": record.id, "trnconsole:runner": label}


def job_definition_request(
    record: RunRecord, s: Settings, source_uri: str, entry_point: str
) -> dict[str, Any]:
    """register_job_definition's arguments: a container job for one node, a multi-node one otherwise."""
    container = container_properties(record, s, source_uri, entry_point)
    request: dict[str, Any] = {
        "jobDefinitionName": job_name(record),
        "platformCapabilities": ["EC2"],
        "retryStrategy": retry_strategy(s),
        "propagateTags": True,
        "tags": tags(record),
    }
    nnodes = record.spec.nnodes
    if nnodes == 1:
        request.update(type="container", containerProperties=container)
    else:
        request.update(
            type="multinode",
            nodeProperties={
                "numNodes": nnodes,
                "mainNode": 0,
                "nodeRangeProperties": [{"targetNodes": "0:", "container": container}],
            },
        )
    return request


def failure_reasons(job: dict[str, Any]) -> list[str]:
    """What Batch and ECS said about the job's end, most general first, without repeats."""
    latest = (job.get("attempts") or [{}])[-1]
    candidates = [
        job.get("statusReason"),
        (job.get("container") or {}).get("reason"),
        latest.get("statusReason"),
        (latest.get("container") or {}).get("reason"),
    ]
    reasons: list[str] = []
    for text in candidates:
        line = one_line(str(text or ""))
        if line and line not in reasons:
            reasons.append(line)
    return reasons


def is_transient(reasons: Iterable[str]) -> bool:
    return any(pattern.search(reason) for reason in reasons for pattern in TRANSIENT_REASONS)


def exit_code(job: dict[str, Any], main_node: dict[str, Any] | None = None) -> int | None:
    for source in (job, main_node or {}):
        code = (source.get("container") or {}).get("exitCode")
        if code is None:
            code = ((source.get("attempts") or [{}])[-1].get("container") or {}).get("exitCode")
        if code is not None:
            return int(code)
    return None


def log_streams(job: dict[str, Any]) -> list[str]:
    """The job's log streams in order: one per Batch attempt (a retried job starts a new task)."""
    names = [(attempt.get("container") or {}).get("logStreamName") for attempt in job.get("attempts") or []]
    names.append((job.get("container") or {}).get("logStreamName"))
    streams: list[str] = []
    for name in names:
        if name and name not in streams:
            streams.append(name)
    return streams


def _seconds(ms: Any) -> float | None:
    return float(ms) / 1000.0 if ms else None


class BatchBackend(Backend):
    name = "batch"
    remote = True
    options = frozenset(opts.BATCH)

    def __init__(
        self,
        factory: ClientFactory | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        self._factory = factory or aws_client
        self._clock = clock
        self._sleep = sleep
        self._clients: dict[tuple[str, str | None, str | None], Any] = {}

    def _client(self, service: str, region: str | None, profile: str | None) -> Any:
        key = (service, region, profile)
        if key not in self._clients:
            self._clients[key] = self._factory(service, region=region, profile=profile)
        return self._clients[key]

    def check(self, spec: RunSpec) -> None:
        s = settings(spec)
        # Here rather than in settings(): a resubmission must not depend on the launching machine's files.
        if s.source_dir and not Path(s.source_dir).expanduser().is_dir():
            raise UsageError(f"--source-dir {s.source_dir}: not a directory")

    # ---- submit ----

    def submit(self, record: RunRecord) -> Submission:
        s = settings(record.spec)
        batch = self._client("batch", s.region, s.profile)
        source = package_source(record.spec, s.source_dir)
        source_uri = self._upload(self._client("s3", s.region, s.profile), s, source)
        if s.job_definition:
            definition = self._existing_definition(batch, s.job_definition, record.spec)
            arn, kind, registered = definition["jobDefinitionArn"], definition.get("type", "container"), False
        else:
            request = job_definition_request(record, s, source_uri, source.entry_point)
            response = call(
                batch.register_job_definition,
                action="batch:RegisterJobDefinition",
                sleep=self._sleep,
                **request,
            )
            arn, kind, registered = response["jobDefinitionArn"], request["type"], True
        handle: dict[str, Any] = {
            "region": batch.meta.region_name,
            "profile": s.profile,
            "queue": s.job_queue,
            "job_definition": arn,
            "definition_type": kind,
            "registered": registered,
            "job_name": job_name(record),
            "nodes": record.spec.nnodes,
            "source": source_uri,
            "entry_point": source.entry_point,
            "attempts": [],
            "resubmits_left": s.resubmit,
            "next_submit_at": None,
            "stop_requested": False,
        }
        handle = self._submit_attempt(batch, record, handle)
        return Submission(handle=handle, started_at=handle["attempts"][0]["submitted_at"])

    def _upload(self, s3: Any, s: Settings, source: Source) -> str:
        """The source at <s3_prefix>/source/<sha256>/sourcedir.tar.gz; the digest names the content, so an
        object already there is the same tarball and is not sent again."""
        from botocore.exceptions import ClientError

        uri = s.source_uri(source.sha256)
        key = uri[len(f"s3://{s.bucket}/") :]
        try:
            # A refused HeadObject (403) says nothing of PutObject, so it falls through to the upload.
            call(
                s3.head_object,
                action="s3:GetObject",
                sleep=self._sleep,
                passthrough=(*NOT_FOUND, "403"),
                Bucket=s.bucket,
                Key=key,
            )
            return uri
        except ClientError:
            pass
        call(
            s3.put_object,
            action="s3:PutObject",
            sleep=self._sleep,
            Bucket=s.bucket,
            Key=key,
            Body=source.tarball,
            ContentType="application/gzip",
        )
        return uri

    def _existing_definition(self, batch: Any, name: str, spec: RunSpec) -> dict[str, Any]:
        """The newest active revision of the user's job definition (name, name:revision or ARN)."""
        query: dict[str, Any] = (
            {"jobDefinitions": [name]} if ":" in name else {"jobDefinitionName": name, "status": "ACTIVE"}
        )
        found: list[dict[str, Any]] = []
        while True:
            page = call(
                batch.describe_job_definitions,
                action="batch:DescribeJobDefinitions",
                sleep=self._sleep,
                **query,
            )
            found += [d for d in page.get("jobDefinitions", []) if d.get("status", "ACTIVE") == "ACTIVE"]
            if not page.get("nextToken"):
                break
            query["nextToken"] = page["nextToken"]
        if not found:
            raise UsageError(
                f"--job-definition {name}: no active job definition of that name in "
                f"{batch.meta.region_name}; check the name, or leave --job-definition out to register one"
            )
        definition = max(found, key=lambda d: int(d.get("revision", 0)))
        if definition.get("type") == "container" and spec.nnodes > 1:
            raise UsageError(
                f"--job-definition {name}: a single-node job definition cannot run --nnodes {spec.nnodes}; "
                "name a multi-node one, or leave --job-definition out to register one"
            )
        return definition

    def _overrides(self, record: RunRecord, handle: dict[str, Any]) -> dict[str, Any]:
        """For a user's job definition: our argv and environment replace its own."""
        s = settings(record.spec)
        container: dict[str, Any] = {
            "command": command(record, handle["source"], handle["entry_point"]),
            "environment": environment(record, s),
        }
        if s.resources_given:
            container["resourceRequirements"] = resources(s)
        if handle.get("definition_type") == "multinode":
            return {
                "nodeOverrides": {
                    "numNodes": record.spec.nnodes,
                    "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": container}],
                }
            }
        return {"containerOverrides": container}

    def _submit_attempt(self, batch: Any, record: RunRecord, handle: dict[str, Any]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "jobName": handle["job_name"],
            "jobQueue": handle["queue"],
            "jobDefinition": handle["job_definition"],
            "retryStrategy": retry_strategy(settings(record.spec)),
            "propagateTags": True,
            "tags": tags(record),
        }
        if not handle.get("registered"):
            request.update(self._overrides(record, handle))
        response = call(batch.submit_job, action="batch:SubmitJob", sleep=self._sleep, **request)
        attempt = {"job_id": response["jobId"], "submitted_at": self._clock()}
        return {**handle, "attempts": [*handle["attempts"], attempt], "next_submit_at": None, "failure": None}

    # ---- status ----

    def status(self, record: RunRecord) -> RunStatus:
        handle = dict(record.handle or {})
        attempts = handle.get("attempts") or []
        if not attempts:
            return RunStatus(
                "lost", ended_at=self._clock(), message="no AWS Batch job was recorded for this run"
            )
        stop_requested = bool(handle.get("stop_requested")) or record.status == "stopping"
        if handle.get("next_submit_at") is not None:
            return self._pending(record, handle, stop_requested, changed=False)
        batch = self._client("batch", handle.get("region"), handle.get("profile"))
        job_id = attempts[-1]["job_id"]
        jobs = self._describe(batch, [job_id, *self._node_ids(handle, job_id)])
        job = jobs.get(job_id)
        if job is None:
            return RunStatus(
                "lost",
                ended_at=self._clock(),
                message=f"AWS Batch no longer knows job {job_id} in {handle.get('region')}; "
                "it keeps jobs for about 7 days after they end",
            )
        phase = str(job.get("status"))
        detail = self._detail(handle, job, jobs)
        ended_at = _seconds(job.get("stoppedAt")) or self._clock()
        if phase == "SUCCEEDED":
            return RunStatus("completed", exit_code=0, ended_at=ended_at, detail=detail)
        if phase != "FAILED":
            return RunStatus("stopping" if stop_requested else "running", detail=detail)
        reasons = failure_reasons(job)
        code = exit_code(job, jobs.get(f"{job_id}#0"))
        reason = "; ".join(reasons) or "no reason given"
        message = f"exit code {code}: {reason}" if code not in (None, 0) else reason
        if stop_requested or STOP_REASON in reasons:
            return RunStatus("stopped", exit_code=code, ended_at=ended_at, message=STOP_REASON, detail=detail)
        if is_transient(reasons):
            if int(handle.get("resubmits_left") or 0) > 0:
                delay = backoff_s(len(attempts) - 1, RESUBMIT_BASE_S, RESUBMIT_CAP_S)
                handle.update(
                    next_submit_at=self._clock() + delay,
                    resubmits_left=int(handle["resubmits_left"]) - 1,
                    failure={"job_id": job_id, "reason": message, "exit_code": code, "stopped_at": ended_at},
                )
                return self._pending(record, handle, stop_requested=False, changed=True)
            made = f"{len(attempts)} attempt" + ("s" if len(attempts) > 1 else "")
            message += f"; transient, but no resubmission is left after {made} (raise --resubmit)"
        return RunStatus("failed", exit_code=code, ended_at=ended_at, message=message, detail=detail)

    def _pending(
        self, record: RunRecord, handle: dict[str, Any], stop_requested: bool, changed: bool
    ) -> RunStatus:
        """A transient failure waiting out its backoff: resubmit once due, unless a stop came first."""
        failure = handle.get("failure") or {}
        attempts = handle["attempts"]
        if stop_requested:
            handle.update(next_submit_at=None, stop_requested=True)
            return RunStatus(
                "stopped",
                exit_code=failure.get("exit_code"),
                ended_at=self._clock(),
                message=f"{STOP_REASON} before the resubmission of attempt {len(attempts)}",
                handle=handle,
            )
        now = self._clock()
        if now >= float(handle["next_submit_at"]):
            batch = self._client("batch", handle.get("region"), handle.get("profile"))
            handle = self._submit_attempt(batch, record, handle)
            job_id = handle["attempts"][-1]["job_id"]
            detail = {
                "phase": "SUBMITTED",
                "job_id": job_id,
                "attempt": len(handle["attempts"]),
                "attempts": self._planned(handle),
                "queue": handle.get("queue"),
            }
            return RunStatus("running", detail=detail, handle=handle)
        wait = max(1, math.ceil(float(handle["next_submit_at"]) - now))
        text = f"resubmitting in {wait} s (attempt {len(attempts) + 1} of {self._planned(handle)})"
        detail = {
            "phase": "RESUBMITTING",
            "resubmit": text,
            "job_id": failure.get("job_id"),
            "status_reason": failure.get("reason"),
            "attempt": len(attempts),
            "attempts": self._planned(handle),
            "queue": handle.get("queue"),
        }
        return RunStatus(
            "running",
            message=f"{text} after: {failure.get('reason')}",
            detail=detail,
            handle=handle if changed else None,
        )

    @staticmethod
    def _planned(handle: dict[str, Any]) -> int:
        """Attempts the run may take in all: those made, the one waiting, and the resubmissions left."""
        waiting = 1 if handle.get("next_submit_at") is not None else 0
        return len(handle.get("attempts") or []) + waiting + int(handle.get("resubmits_left") or 0)

    @staticmethod
    def _node_ids(handle: dict[str, Any], job_id: str) -> list[str]:
        nodes = int(handle.get("nodes") or 1)
        return [f"{job_id}#{n}" for n in range(nodes)] if nodes > 1 else []

    def _describe(self, batch: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
        jobs: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), DESCRIBE_LIMIT):
            page = call(
                batch.describe_jobs,
                action="batch:DescribeJobs",
                sleep=self._sleep,
                jobs=ids[start : start + DESCRIBE_LIMIT],
            )
            jobs.update({job["jobId"]: job for job in page.get("jobs", [])})
        return jobs

    def _detail(
        self, handle: dict[str, Any], job: dict[str, Any], jobs: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "phase": job.get("status"),
            "job_id": job.get("jobId"),
            "attempt": len(handle.get("attempts") or []),
            "attempts": self._planned(handle),
            "queue": handle.get("queue"),
        }
        if job.get("statusReason"):
            detail["status_reason"] = one_line(str(job["statusReason"]))
        if job.get("attempts"):
            detail["batch_attempts"] = len(job["attempts"])
        nodes = (job.get("nodeProperties") or {}).get("numNodes")
        if nodes:
            detail["nodes"] = nodes
            phases = {
                str(n): jobs[node_id].get("status")
                for n, node_id in enumerate(self._node_ids(handle, str(job.get("jobId"))))
                if node_id in jobs
            }
            if phases:
                detail["node_phases"] = phases
        for key, field in (
            ("created_at", "createdAt"),
            ("started_at", "startedAt"),
            ("stopped_at", "stoppedAt"),
        ):
            if job.get(field):
                detail[key] = _seconds(job[field])
        streams = log_streams(job)
        if streams:
            detail["log_stream"] = streams[-1]
        return detail

    # ---- logs ----

    def logs(self, record: RunRecord, cursor: dict[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
        """Every attempt's lines in order, each attempt introduced by a `[batch] attempt k` line; the nodes of
        a multi-node job tagged `[node n]`.

        The cursor holds the attempts announced, a CloudWatch token per stream and the earlier attempts read
        to their end; it advances only when the whole poll succeeded, so a failed poll is read again.
        """
        handle = record.handle or {}
        attempts = handle.get("attempts") or []
        state = cursor or {}
        announced = int(state.get("announced", 0))
        streams: dict[str, str] = dict(state.get("streams") or {})
        closed: list[str] = list(state.get("closed") or [])
        if not attempts:
            return [], {"announced": announced, "streams": streams, "closed": closed}
        batch = self._client("batch", handle.get("region"), handle.get("profile"))
        logs = self._client("logs", handle.get("region"), handle.get("profile"))
        multinode = int(handle.get("nodes") or 1) > 1
        wanted: list[str] = []
        for attempt in attempts:
            if attempt["job_id"] not in closed:
                job_id = attempt["job_id"]
                wanted += self._node_ids(handle, job_id) if multinode else [job_id]
        jobs = self._describe(batch, wanted) if wanted else {}
        lines: list[str] = []
        for number, attempt in enumerate(attempts, 1):
            job_id = attempt["job_id"]
            if number > announced:
                lines.append(f"[batch] attempt {number}: job {job_id} submitted")
                announced = number
            if job_id in closed:
                continue
            sources = (
                [
                    (f"[node {n}] ", f" node {n}", jobs.get(f"{job_id}#{n}"))
                    for n in range(int(handle["nodes"]))
                ]
                if multinode
                else [("", "", jobs.get(job_id))]
            )
            finished, read = True, 0
            for tag, where, job in sources:
                # A missing job of an earlier attempt never ran or has expired: nothing more will come.
                if job is not None and job.get("status") not in ENDED:
                    finished = False
                for index, stream in enumerate(log_streams(job or {})):
                    if stream not in streams:
                        streams[stream] = ""
                        if index:
                            lines.append(
                                f"[batch] attempt {number}: AWS Batch try {index + 1} of job {job_id}{where}"
                            )
                    follower = LogFollower(
                        logs, LOG_GROUP, stream, cursor={stream: streams[stream]}, expected_streams=1
                    )
                    new, tokens = follower.poll()
                    streams[stream] = tokens.get(stream, streams[stream])
                    lines += [tag + line for line in new]
                    read += len(new)
            # An earlier attempt that has ended and had nothing more to read is done: no more calls for it.
            if number < len(attempts) and finished and not read:
                closed.append(job_id)
        return lines, {"announced": announced, "streams": streams, "closed": closed}

    # ---- stop ----

    def stop(self, record: RunRecord, grace_s: float = 15.0) -> RunStatus:
        """Terminate the current attempt (Batch sends SIGTERM, then SIGKILL after the container's stop
        timeout, 30 s by default, so grace_s is not ours to set) and cancel a waiting resubmission."""
        handle = dict(record.handle or {})
        attempts = handle.get("attempts") or []
        if not attempts:
            return RunStatus("stopped", ended_at=self._clock(), message="no AWS Batch job was recorded")
        if handle.get("next_submit_at") is not None:
            return self._pending(record, handle, stop_requested=True, changed=True)
        batch = self._client("batch", handle.get("region"), handle.get("profile"))
        job_id = attempts[-1]["job_id"]
        call(
            batch.terminate_job,
            action="batch:TerminateJob",
            sleep=self._sleep,
            jobId=job_id,
            reason=STOP_REASON,
        )
        handle["stop_requested"] = True
        return RunStatus("stopping", detail={"phase": "TERMINATING", "job_id": job_id}, handle=handle)
