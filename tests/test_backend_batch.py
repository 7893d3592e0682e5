"""The AWS Batch backend against a real moto server: what it registers and submits, how it reads states and
logs, how it resubmits transient failures and stops jobs, and the argv it registers run for real."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from aws_helpers import ACCOUNT, REGION, fail_first

from trnconsole.backends import get_backend
from trnconsole.backends.aws import aws_client
from trnconsole.backends.batch import STOP_REASON, BatchBackend, is_transient, settings
from trnconsole.backends.options import BATCH
from trnconsole.backends.package import PUBLIC_NEURON_IMAGE, bootstrap_command, package_source
from trnconsole.core.errors import UsageError
from trnconsole.core.spec import RunSpec
from trnconsole.core.store import RunRecord

ROLE_ARN = "arn:aws:iam::123456789012:role/trn-batch"


# ---- fixtures: a queue on moto, clients that record what they send, a clock the tests move ----


@dataclass
class BatchEnv:
    queue: str
    bucket: str
    batch: Any
    s3: Any
    logs: Any


@pytest.fixture(scope="module")
def batch_world(moto_url: str) -> BatchEnv:
    """One queue and bucket for the module, made with clients of their own (the per-test AWS environment
    is not there yet at module scope)."""
    import boto3

    # Without docker, moto's Batch marks each job SUCCEEDED as it is submitted; the tests then set the state
    # they need on moto's own job objects.
    request = urllib.request.Request(
        f"{moto_url}/moto-api/config",
        data=json.dumps({"batch": {"use_docker": False}}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).read()
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )

    def client(service: str) -> Any:
        return session.client(service, endpoint_url=moto_url)

    suffix = uuid.uuid4().hex[:8]
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "batch.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    role = client("iam").create_role(
        RoleName=f"batch-service-{suffix}", AssumeRolePolicyDocument=json.dumps(trust)
    )
    batch = client("batch")
    environment = batch.create_compute_environment(
        computeEnvironmentName=f"trn1-{suffix}",
        type="UNMANAGED",
        state="ENABLED",
        serviceRole=role["Role"]["Arn"],
    )
    queue = f"trn1-queue-{suffix}"
    batch.create_job_queue(
        jobQueueName=queue,
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment["computeEnvironmentArn"]}],
    )
    s3 = client("s3")
    bucket = f"trn-source-{suffix}"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    logs = client("logs")
    logs.create_log_group(logGroupName="/aws/batch/job")
    return BatchEnv(queue=queue, bucket=bucket, batch=batch, s3=s3, logs=logs)


@pytest.fixture
def batch_env(aws_env: str, batch_world: BatchEnv) -> BatchEnv:
    """The module's queue and bucket, with boto3 in this test pointed at the same server."""
    return batch_world


class Recorder:
    """The real client factory, with every request's operation noted ("batch.SubmitJob"). Backend objects
    made with one recorder share its clients: a restarted console keeps nothing else of the old one."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.clients: dict[tuple[str, str | None, str | None], Any] = {}

    def __call__(self, service: str, region: str | None = None, profile: str | None = None) -> Any:
        key = (service, region, profile)
        if key not in self.clients:
            self.clients[key] = aws_client(service, region=region, profile=profile)
            self.clients[key].meta.events.register("before-send", self._note)
        return self.clients[key]

    def _note(self, event_name: str, **_: object) -> None:
        self.sent.append(event_name.split(".", 1)[1])

    def count(self, operation: str) -> int:
        return self.sent.count(operation)


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def batch_options(env: BatchEnv, **extra: str) -> dict[str, str]:
    return {"job_queue": env.queue, "s3_prefix": f"s3://{env.bucket}/trnconsole", **extra}


def make_record(spec: RunSpec, tmp_path: Path, run_id: str | None = None) -> RunRecord:
    run_id = run_id or uuid.uuid4().hex[:8]
    return RunRecord(
        id=run_id,
        name=spec.name,
        runner=spec.runner,
        backend="batch",
        spec=spec,
        status="running",
        created_at=time.time(),
        run_dir=tmp_path / "runs" / run_id,
    )


def bert_spec(options: dict[str, str], **changes: Any) -> RunSpec:
    spec = RunSpec(
        runner="bert",
        flags={"steps": "20", "synthetic": True, "batch_size": "8"},
        env={"XLA_USE_BF16": "1"},
        backend="batch",
        nproc=2,
        backend_options=options,
    )
    return replace(spec, **changes)


def launched(backend: BatchBackend, spec: RunSpec, tmp_path: Path) -> RunRecord:
    record = make_record(spec, tmp_path)
    submission = backend.submit(record)
    return replace(record, handle=submission.handle, started_at=submission.started_at)


def moto_job(job_id: str) -> Any:
    from moto.batch.models import batch_backends

    return batch_backends[ACCOUNT][REGION]._jobs[job_id]


def set_state(job_id: str, status: str, reason: str | None = None, exit_code: int | None = None) -> None:
    """Put moto's job where a real Batch job would be; stopped fields only once it has ended."""
    job = moto_job(job_id)
    ended = status in ("SUCCEEDED", "FAILED")
    job.job_stopped = ended
    job.job_stopped_reason = reason
    job.exit_code = exit_code
    if exit_code is not None and job.attempts:
        # Where Batch reports it for each attempt; moto's own describe drops it for container jobs.
        job.attempts[-1]["container"]["exitCode"] = exit_code
    job.status = status


def write_log(env: BatchEnv, stream: str, *messages: str) -> None:
    with contextlib.suppress(env.logs.exceptions.ResourceAlreadyExistsException):
        env.logs.create_log_stream(logGroupName="/aws/batch/job", logStreamName=stream)
    start = int(time.time() * 1000)
    events = [{"timestamp": start + i, "message": message} for i, message in enumerate(messages)]
    env.logs.put_log_events(logGroupName="/aws/batch/job", logStreamName=stream, logEvents=events)


def job_definition(env: BatchEnv, arn: str) -> dict[str, Any]:
    return env.batch.describe_job_definitions(jobDefinitions=[arn])["jobDefinitions"][0]


# ---- the module and its options ----


def test_the_registry_gives_a_remote_backend_taking_the_batch_options() -> None:
    backend = get_backend("batch")
    assert isinstance(backend, BatchBackend)
    assert backend.name == "batch" and backend.remote is True
    assert backend.options == frozenset(BATCH)


def test_check_accepts_a_complete_spec_and_fills_the_defaults_without_a_network() -> None:
    spec = bert_spec({"job_queue": "trn1", "s3_prefix": "s3://bucket/runs/"}, nproc=32)
    BatchBackend(factory=lambda *a, **k: pytest.fail("check must not make clients")).check(spec)
    s = settings(spec)
    assert (s.bucket, s.prefix, s.image) == ("bucket", "runs", PUBLIC_NEURON_IMAGE)
    assert (s.neuron_devices, s.efa, s.vcpus, s.memory_mib, s.attempts, s.resubmit) == (16, 0, 4, 16384, 3, 3)
    assert s.source_uri("ab12") == "s3://bucket/runs/source/ab12/sourcedir.tar.gz"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"job_queue": ""}, "--job-queue: required with --backend batch, e.g. --job-queue trn1-queue"),
        (
            {"s3_prefix": None},
            "--s3-prefix: required with --backend batch, e.g. --s3-prefix s3://my-bucket/trnconsole",
        ),
        ({"s3_prefix": "my-bucket/x"}, "--s3-prefix my-bucket/x: expected s3://bucket/prefix"),
        ({"attempts": "11"}, "--attempts 11: AWS Batch allows 1 to 10 attempts"),
        ({"attempts": "0"}, "--attempts 0: must be at least 1"),
        ({"resubmit": "-1"}, "--resubmit -1: must be at least 0"),
        ({"neuron_devices": "two"}, "--neuron-devices two: not a whole number"),
        ({"neuron_devices": "32"}, "--neuron-devices 32: a node has at most 16 Neuron devices"),
        ({"efa": "-2"}, "--efa -2: must be at least 0"),
        ({"vcpus": "0"}, "--vcpus 0: must be at least 1"),
        ({"memory_mib": "16GiB"}, "--memory-mib 16GiB: not a whole number"),
        ({"memory_mib": "16"}, "--memory-mib 16: must be at least 512"),
        ({"job_role": "trn-batch"}, "--job-role trn-batch: expected an IAM role ARN"),
        ({"source_dir": "/no/such/dir"}, "--source-dir /no/such/dir: not a directory"),
    ],
)
def test_check_refuses_each_bad_option_in_one_line_naming_it(changes: dict[str, Any], message: str) -> None:
    options = {"job_queue": "trn1", "s3_prefix": "s3://bucket/runs"}
    for key, value in changes.items():
        if value is None:
            options.pop(key)
        else:
            options[key] = value
    with pytest.raises(UsageError) as err:
        BatchBackend().check(bert_spec(options))
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_the_default_device_count_beyond_one_node_names_the_option_to_set() -> None:
    with pytest.raises(UsageError, match=r"^--neuron-devices: --nproc 64 asks for 32 Neuron devices"):
        BatchBackend().check(bert_spec({"job_queue": "q", "s3_prefix": "s3://bucket/x"}, nproc=64))


def test_known_transient_reasons_are_told_from_the_jobs_own_failures() -> None:
    transient = [
        "Host EC2 (instance i-0a1b2c3d4e5f67890) terminated.",
        "Your Spot Task was interrupted.",
        "ResourceInitializationError: failed to configure ENI: context deadline exceeded",
        "CannotPullContainerError: failed to copy: httpReadSeeker: failed open: net/http: request canceled "
        "(Client.Timeout exceeded while awaiting headers)",
        "CannotPullContainerError: toomanyrequests: Rate exceeded",
        "DockerTimeoutError: Could not transition to started; timed out after waiting 4m0s",
    ]
    permanent = [
        "Essential container in task exited",
        "OutOfMemoryError: Container killed due to memory usage",
        "CannotPullContainerError: public.ecr.aws/neuron/nope:latest: not found",
        "CannotPullContainerError: pull access denied for my-image, repository does not exist",
        STOP_REASON,
    ]
    assert [is_transient([r]) for r in transient] == [True] * len(transient)
    assert [is_transient([r]) for r in permanent] == [False] * len(permanent)


# ---- submit ----


def test_a_single_node_launch_registers_a_container_job_running_the_bootstrap(batch_env, tmp_path) -> None:
    options = batch_options(
        batch_env,
        efa="2",
        job_role=ROLE_ARN,
        neuron_cc_flags="--model-type=transformer",
        compile_cache="s3://cache/neuron",
        attempts="4",
    )
    spec = bert_spec(options, name="bert smoke")
    recorder = Recorder()
    backend = BatchBackend(factory=recorder)
    record = launched(backend, spec, tmp_path)
    handle = record.handle

    source = package_source(spec)
    uri = f"s3://{batch_env.bucket}/trnconsole/source/{source.sha256}/sourcedir.tar.gz"
    stored = batch_env.s3.get_object(Bucket=batch_env.bucket, Key=uri.split("/", 3)[3])["Body"].read()
    assert stored == source.tarball

    definition = job_definition(batch_env, handle["job_definition"])
    assert definition["type"] == "container"
    assert definition["jobDefinitionName"] == f"trnconsole-bert-smoke-{record.id}"
    container = definition["containerProperties"]
    assert container["command"] == bootstrap_command(
        uri, spec, "bert.py", output_dir=f"/tmp/trnconsole/{record.id}"
    )
    assert container["command"][3:8] == [uri, "2", "1", "--", "bert.py"]
    assert container["image"] == PUBLIC_NEURON_IMAGE
    assert container["jobRoleArn"] == ROLE_ARN
    assert container["resourceRequirements"] == [
        {"type": "VCPU", "value": "4"},
        {"type": "MEMORY", "value": "16384"},
    ]
    devices = container["linuxParameters"]["devices"]
    assert [d["hostPath"] for d in devices] == [
        "/dev/neuron0",
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/uverbs1",
    ]
    assert all(d["containerPath"] == d["hostPath"] and d["permissions"] == ["READ", "WRITE"] for d in devices)
    assert container["ulimits"] == [{"name": "memlock", "softLimit": -1, "hardLimit": -1}]
    env = {item["name"]: item["value"] for item in container["environment"]}
    assert env["NEURON_PROCESS_TAG"] == record.id
    assert env["TRNCONSOLE_RUN_DIR"] == f"/tmp/trnconsole/{record.id}"  # the bundled runner's --output-dir
    assert env["XLA_USE_BF16"] == "1"
    assert env["NEURON_CC_FLAGS"] == "--model-type=transformer"
    assert env["NEURON_COMPILE_CACHE_URL"] == "s3://cache/neuron"
    assert env["FI_PROVIDER"] == "efa"
    retry = definition["retryStrategy"]
    assert retry["attempts"] == 4
    assert [
        (r.get("onStatusReason") or r.get("onReason"), r["action"].upper()) for r in retry["evaluateOnExit"]
    ] == [
        ("Host EC2*", "RETRY"),
        ("*", "EXIT"),
    ]
    assert definition["tags"] == {"trnconsole:run-id": record.id, "trnconsole:runner": "bert"}

    job_id = handle["attempts"][0]["job_id"]
    job = batch_env.batch.describe_jobs(jobs=[job_id])["jobs"][0]
    assert job["jobName"] == f"trnconsole-bert-smoke-{record.id}"
    assert job["jobQueue"].endswith(f"job-queue/{batch_env.queue}")
    assert job["jobDefinition"] == handle["job_definition"]
    assert job["tags"]["trnconsole:run-id"] == record.id
    assert handle["region"] == REGION and handle["queue"] == batch_env.queue
    assert handle["resubmits_left"] == 3 and handle["next_submit_at"] is None
    assert record.started_at == pytest.approx(time.time(), abs=60)
    assert "testing" not in json.dumps(handle)  # the access key and secret of the test environment

    # The same source again: found by its digest, not uploaded twice.
    puts = recorder.count("s3.PutObject")
    launched(backend, spec, tmp_path)
    assert puts == 1 and recorder.count("s3.PutObject") == 1 and recorder.count("s3.HeadObject") == 2


def test_a_multinode_launch_registers_node_properties_for_every_node(batch_env, tmp_path) -> None:
    spec = bert_spec(batch_options(batch_env, efa="8", neuron_devices="16"), nproc=32, nnodes=2)
    record = launched(BatchBackend(), spec, tmp_path)
    definition = job_definition(batch_env, record.handle["job_definition"])
    assert definition["type"] == "multinode"
    # moto leaves nodeProperties out of the definition it describes, but the job carries them.
    job = batch_env.batch.describe_jobs(jobs=[record.handle["attempts"][0]["job_id"]])["jobs"][0]
    nodes = job["nodeProperties"]
    assert (nodes["numNodes"], nodes["mainNode"]) == (2, 0)
    [node_range] = nodes["nodeRangeProperties"]
    assert node_range["targetNodes"] == "0:"
    container = node_range["container"]
    assert container["command"][4:7] == ["32", "2", "--"]
    paths = [d["hostPath"] for d in container["linuxParameters"]["devices"]]
    assert paths == [f"/dev/neuron{i}" for i in range(16)] + [f"/dev/infiniband/uverbs{i}" for i in range(8)]
    assert record.handle["nodes"] == 2


def test_a_users_job_definition_runs_with_our_argv_and_environment_as_overrides(batch_env, tmp_path) -> None:
    name = f"team-trn1-{uuid.uuid4().hex[:6]}"
    properties = {
        "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/team:latest",
        "command": ["sleep", "1"],
        "resourceRequirements": [{"type": "VCPU", "value": "96"}, {"type": "MEMORY", "value": "500000"}],
    }
    batch_env.batch.register_job_definition(
        jobDefinitionName=name, type="container", containerProperties=properties
    )
    newest = batch_env.batch.register_job_definition(
        jobDefinitionName=name, type="container", containerProperties=properties
    )
    recorder = Recorder()
    spec = bert_spec(batch_options(batch_env, job_definition=name))
    record = launched(BatchBackend(factory=recorder), spec, tmp_path)
    assert recorder.count("batch.RegisterJobDefinition") == 0
    assert record.handle["job_definition"] == newest["jobDefinitionArn"]
    job = moto_job(record.handle["attempts"][0]["job_id"])
    overrides = job.container_overrides
    assert overrides["command"][:2] == ["python", "-c"] and overrides["command"][7] == "bert.py"
    assert {"name": "NEURON_PROCESS_TAG", "value": record.id} in overrides["environment"]
    assert {"name": "TRNCONSOLE_RUN_DIR", "value": f"/tmp/trnconsole/{record.id}"} in overrides["environment"]
    assert "resourceRequirements" not in overrides  # the team's definition keeps its own sizes

    with pytest.raises(
        UsageError, match=rf"^--job-definition {name}: a single-node job definition cannot run"
    ):
        BatchBackend(factory=recorder).submit(make_record(replace(spec, nnodes=2), tmp_path))
    with pytest.raises(UsageError, match=r"^--job-definition nobody-has-this: no active job definition"):
        BatchBackend(factory=recorder).submit(
            make_record(bert_spec(batch_options(batch_env, job_definition="nobody-has-this")), tmp_path)
        )


def test_access_denied_on_submit_is_one_line_naming_batch_submit_job(batch_env, tmp_path) -> None:
    from botocore.awsrequest import AWSResponse

    class Body:
        def stream(self, **_: object):
            yield json.dumps({"__type": "AccessDeniedException", "message": "not allowed to submit"}).encode()

    def deny(request, **_: object):
        return AWSResponse(request.url, 403, {"x-amzn-ErrorType": "AccessDeniedException"}, Body())

    def factory(service: str, region: str | None = None, profile: str | None = None) -> Any:
        client = aws_client(service, region=region, profile=profile)
        client.meta.events.register("before-send.batch.SubmitJob", deny)
        return client

    with pytest.raises(UsageError) as err:
        BatchBackend(factory=factory).submit(make_record(bert_spec(batch_options(batch_env)), tmp_path))
    assert str(err.value) == (
        "AWS denied batch:SubmitJob: not allowed to submit; grant it to your role or profile"
    )


# ---- status ----


def test_status_follows_the_job_from_submitted_to_succeeded(batch_env, tmp_path) -> None:
    backend = BatchBackend()
    record = launched(backend, bert_spec(batch_options(batch_env)), tmp_path)
    job_id = record.handle["attempts"][0]["job_id"]
    for phase in ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"):
        set_state(job_id, phase, reason="waiting for capacity" if phase == "RUNNABLE" else None)
        status = backend.status(record)
        assert (status.state, status.detail["phase"], status.ended_at) == ("running", phase, None)
        assert status.detail["job_id"] == job_id and status.handle is None
    assert backend.status(record).detail["batch_attempts"] == 1
    set_state(job_id, "RUNNABLE", reason="waiting for capacity")
    assert backend.status(record).detail["status_reason"] == "waiting for capacity"
    set_state(job_id, "SUCCEEDED", exit_code=0)
    status = backend.status(record)
    assert (status.state, status.exit_code, status.message) == ("completed", 0, None)
    assert status.ended_at == pytest.approx(time.time(), abs=60)
    json.dumps(status.detail)


def test_a_transient_failure_is_resubmitted_after_a_persisted_backoff(batch_env, tmp_path) -> None:
    clock = Clock()
    recorder = Recorder()
    backend = BatchBackend(factory=recorder, clock=clock)
    record = launched(backend, bert_spec(batch_options(batch_env)), tmp_path)
    first = record.handle["attempts"][0]["job_id"]
    set_state(first, "FAILED", reason="Host EC2 (instance i-0a1b2c3d4e5f67890) terminated.")

    status = backend.status(record)
    assert status.state == "running"
    waiting = status.handle
    assert waiting["resubmits_left"] == 2 and len(waiting["attempts"]) == 1
    assert clock.now <= waiting["next_submit_at"] <= clock.now + 30  # full jitter under base 30 s
    assert status.detail["phase"] == "RESUBMITTING"
    assert status.detail["resubmit"].startswith("resubmitting in ")
    assert status.detail["resubmit"].endswith(" s (attempt 2 of 4)")
    record = replace(record, handle=json.loads(json.dumps(waiting)))  # as the store keeps it

    # A restarted console (a new backend object) keeps to the stored time.
    submits = recorder.count("batch.SubmitJob")
    restarted = BatchBackend(factory=recorder, clock=Clock(waiting["next_submit_at"] - 0.5))
    status = restarted.status(record)
    assert (status.state, status.handle) == ("running", None)
    assert status.detail["resubmit"] == "resubmitting in 1 s (attempt 2 of 4)"
    assert recorder.count("batch.SubmitJob") == submits

    due = Clock(waiting["next_submit_at"] + 0.1)
    restarted = BatchBackend(factory=recorder, clock=due)
    status = restarted.status(record)
    assert status.state == "running" and recorder.count("batch.SubmitJob") == submits + 1
    resubmitted = status.handle
    assert resubmitted["attempts"][0]["job_id"] == first
    second = resubmitted["attempts"][1]["job_id"]
    assert second != first and resubmitted["next_submit_at"] is None
    assert resubmitted["attempts"][1]["submitted_at"] == waiting["next_submit_at"] + 0.1
    job = batch_env.batch.describe_jobs(jobs=[second])["jobs"][0]
    assert (
        job["jobDefinition"] == record.handle["job_definition"]
        and job["jobName"] == record.handle["job_name"]
    )
    record = replace(record, handle=resubmitted)

    # The next transient failure waits longer at most: the ceiling doubles.
    set_state(second, "FAILED", reason="DockerTimeoutError: Could not transition to started")
    status = restarted.status(record)
    assert 0 <= status.handle["next_submit_at"] - due.now <= 60
    assert status.detail["resubmit"].endswith("(attempt 3 of 4)")


def test_a_failure_of_the_job_itself_is_not_resubmitted(batch_env, tmp_path) -> None:
    recorder = Recorder()
    backend = BatchBackend(factory=recorder)
    record = launched(backend, bert_spec(batch_options(batch_env)), tmp_path)
    job_id = record.handle["attempts"][0]["job_id"]
    set_state(job_id, "FAILED", reason="Essential container in task exited", exit_code=1)
    status = backend.status(record)
    assert (status.state, status.exit_code, status.handle) == ("failed", 1, None)
    assert status.message == "exit code 1: Essential container in task exited"
    assert status.ended_at is not None and recorder.count("batch.SubmitJob") == 1


def test_a_transient_failure_with_no_resubmissions_left_fails_and_says_so(batch_env, tmp_path) -> None:
    backend = BatchBackend()
    record = launched(backend, bert_spec(batch_options(batch_env, resubmit="0")), tmp_path)
    set_state(record.handle["attempts"][0]["job_id"], "FAILED", reason="Your Spot Task was interrupted.")
    status = backend.status(record)
    assert status.state == "failed" and status.handle is None
    assert status.message == (
        "Your Spot Task was interrupted.; transient, but no resubmission is left after 1 attempt "
        "(raise --resubmit)"
    )


def test_a_job_batch_no_longer_knows_is_lost(batch_env, tmp_path) -> None:
    backend = BatchBackend()
    record = launched(backend, bert_spec(batch_options(batch_env)), tmp_path)
    gone = {**record.handle, "attempts": [{"job_id": str(uuid.uuid4()), "submitted_at": 1.0}]}
    status = backend.status(replace(record, handle=gone))
    assert status.state == "lost" and "no longer knows job" in status.message


def test_a_storm_of_server_errors_is_survived(batch_env, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # only our layer retries, so the count is exact
    delays: list[float] = []
    clients = Recorder()
    backend = BatchBackend(factory=clients, sleep=delays.append)
    record = launched(backend, bert_spec(batch_options(batch_env)), tmp_path)
    set_state(record.handle["attempts"][0]["job_id"], "RUNNING")
    batch = clients("batch", REGION, None)  # the client status() will be given
    storm = [
        (503, "ServiceUnavailableException"),
        (500, "InternalFailure"),
        (429, "TooManyRequestsException"),
    ]
    seen = fail_first(batch, storm)
    status = backend.status(record)
    assert status.state == "running" and status.detail["phase"] == "RUNNING"
    assert len(seen) == 4 and len(delays) == 3


# ---- logs ----


def test_logs_resume_in_a_new_backend_with_nothing_repeated_or_lost(batch_env, tmp_path) -> None:
    clients = Recorder()
    backend = BatchBackend(factory=clients)
    record = launched(backend, bert_spec(batch_options(batch_env)), tmp_path)
    first = record.handle["attempts"][0]["job_id"]
    set_state(first, "RUNNING")
    stream = moto_job(first).log_stream_name
    assert stream.endswith(first)
    write_log(batch_env, stream, "trnconsole bootstrap: --nproc_per_node=2 bert.py", "LOG step 1 loss 2.5\n")
    lines, cursor = backend.logs(record, None)
    assert lines == [
        f"[batch] attempt 1: job {first} submitted",
        "trnconsole bootstrap: --nproc_per_node=2 bert.py",
        "LOG step 1 loss 2.5",
    ]
    saved = json.loads(json.dumps(cursor))
    write_log(batch_env, stream, "LOG step 2 loss 2.1")
    restarted = BatchBackend(factory=clients)
    lines, cursor = restarted.logs(record, saved)
    assert lines == ["LOG step 2 loss 2.1"]
    assert restarted.logs(record, cursor)[0] == []

    # Batch retried the job itself (a new task, a new stream), then the console resubmitted it.
    retry_stream = f"{stream}-try2"
    job = moto_job(first)
    job.attempts = [{"container": {"logStreamName": stream}}]
    job.log_stream_name = retry_stream
    write_log(batch_env, stream, "LOG step 3 loss 1.9")
    write_log(batch_env, retry_stream, "retried on a new host")
    set_state(first, "FAILED", reason="Host EC2 (instance i-0a1b2c3d4e5f67890) terminated.")
    status = BatchBackend(factory=clients, clock=Clock(time.time() + 3600)).status(record)
    waiting = replace(record, handle=status.handle)
    resubmitted = (
        BatchBackend(factory=clients, clock=Clock(status.handle["next_submit_at"])).status(waiting).handle
    )
    record = replace(record, handle=resubmitted)
    second = resubmitted["attempts"][1]["job_id"]
    set_state(second, "RUNNING")
    write_log(batch_env, moto_job(second).log_stream_name, "attempt two starts")
    lines, cursor = BatchBackend(factory=clients).logs(record, json.loads(json.dumps(cursor)))
    assert lines == [
        "LOG step 3 loss 1.9",
        f"[batch] attempt 1: AWS Batch try 2 of job {first}",
        "retried on a new host",
        f"[batch] attempt 2: job {second} submitted",
        "attempt two starts",
    ]
    # The first attempt has ended and has nothing more: once read to its end it is not asked again.
    lines, cursor = BatchBackend(factory=clients).logs(record, cursor)
    assert lines == [] and cursor["closed"] == [first]
    write_log(batch_env, moto_job(second).log_stream_name, "LOG step 4 loss 1.7")
    assert BatchBackend(factory=clients).logs(record, cursor)[0] == ["LOG step 4 loss 1.7"]


def test_multinode_logs_read_every_nodes_stream_tagged_with_its_node(batch_env, tmp_path) -> None:
    from moto.batch.models import Job, batch_backends

    clients = Recorder()
    backend = BatchBackend(factory=clients)
    record = launched(backend, bert_spec(batch_options(batch_env), nnodes=2), tmp_path)
    job_id = record.handle["attempts"][0]["job_id"]
    set_state(job_id, "RUNNING")
    # Batch runs a multi-node job as node jobs `<id>#<n>`, each with its own container and stream.
    moto = batch_backends[ACCOUNT][REGION]
    parent = moto_job(job_id)
    for n in range(2):
        node = Job(
            parent.job_name,
            parent.job_definition,
            parent.job_queue,
            moto,
            log_backend=moto.logs_backend,
            container_overrides=None,
            eks_properties_override=None,
            depends_on=None,
            parameters=None,
            all_jobs=moto._jobs,
            timeout=None,
            array_properties={},
            provided_job_id=f"{job_id}#{n}",
        )
        node.log_stream_name = f"{parent.job_definition.name}/default/node{n}-{uuid.uuid4().hex}"
        node.status = "RUNNING"
        moto._jobs[node.job_id] = node
        write_log(batch_env, node.log_stream_name, f"rank {16 * n} up")
    lines, cursor = backend.logs(record, None)
    assert lines == [
        f"[batch] attempt 1: job {job_id} submitted",
        "[node 0] rank 0 up",
        "[node 1] rank 16 up",
    ]
    write_log(batch_env, moto_job(f"{job_id}#1").log_stream_name, "LOG step 1 loss 2.5")
    assert BatchBackend(factory=clients).logs(record, cursor)[0] == ["[node 1] LOG step 1 loss 2.5"]
    status = backend.status(record)
    assert status.detail["nodes"] == 2 and status.detail["node_phases"] == {"0": "RUNNING", "1": "RUNNING"}


# ---- stop ----


def test_stop_terminates_the_job_then_status_reports_it_stopped(batch_env, tmp_path) -> None:
    clients = Recorder()
    backend = BatchBackend(factory=clients)
    record = launched(backend, bert_spec(batch_options(batch_env)), tmp_path)
    job_id = record.handle["attempts"][0]["job_id"]
    set_state(job_id, "RUNNING")
    status = backend.stop(record)
    assert status.state == "stopping" and status.handle["stop_requested"] is True
    assert moto_job(job_id).stop is True and moto_job(job_id).job_stopped_reason == "stopped from trnconsole"
    record = replace(record, handle=status.handle, status="stopping")
    assert backend.status(record).state == "stopping"  # terminating takes Batch a while
    set_state(job_id, "FAILED", reason="stopped from trnconsole", exit_code=143)
    status = BatchBackend(factory=clients).status(record)
    assert (status.state, status.exit_code, status.message) == ("stopped", 143, "stopped from trnconsole")


def test_a_stop_cancels_a_waiting_resubmission(batch_env, tmp_path) -> None:
    clock = Clock()
    recorder = Recorder()
    backend = BatchBackend(factory=recorder, clock=clock)
    record = launched(backend, bert_spec(batch_options(batch_env)), tmp_path)
    set_state(record.handle["attempts"][0]["job_id"], "FAILED", reason="ResourceInitializationError: ENI")
    record = replace(record, handle=backend.status(record).handle)
    status = backend.stop(record)
    assert (status.state, status.handle["next_submit_at"], status.handle["stop_requested"]) == (
        "stopped",
        None,
        True,
    )
    assert recorder.count("batch.TerminateJob") == 0
    clock.now += 3600
    later = backend.status(replace(record, handle=status.handle))
    assert later.state == "stopped" and recorder.count("batch.SubmitJob") == 1


# ---- the registered argv, run for real ----


TINY_SCRIPT = """
import os, sys
rank, size, tag = os.environ.get("RANK"), os.environ.get("WORLD_SIZE"), os.environ.get("NEURON_PROCESS_TAG")
# One write of the whole line: the ranks share a pipe, and an unbuffered print writes piece by piece.
os.write(1, f"rank {rank} of {size} tag {tag} argv {sys.argv[1:]}\\n".encode())
"""
ARGS = {"lr": "3e-4", "note": "two words; $(touch pwned)"}
EXPECTED_ARGV = ["--lr", "3e-4", "--note", "two words; $(touch pwned)", "--flag-after", "x"]


def tiny_launch(env: BatchEnv, tmp_path: Path, nproc: int, nnodes: int) -> tuple[RunRecord, list[str], dict]:
    """Launch the tiny script; return the record, the argv Batch would run (the S3 source swapped for a
    local copy of the uploaded tarball, `python` for this interpreter) and the container's environment."""
    source_dir = tmp_path / "project"
    source_dir.mkdir()
    (source_dir / "train.py").write_text(TINY_SCRIPT)
    spec = RunSpec(
        runner=str(source_dir / "train.py"),
        flags=dict(ARGS),
        extra_args=("--flag-after", "x"),
        backend="batch",
        nproc=nproc,
        nnodes=nnodes,
        backend_options=batch_options(env, neuron_devices="0"),
    )
    record = launched(BatchBackend(), spec, tmp_path)
    job = env.batch.describe_jobs(jobs=[record.handle["attempts"][0]["job_id"]])["jobs"][0]
    if nnodes == 1:
        container = job_definition(env, record.handle["job_definition"])["containerProperties"]
    else:
        container = job["nodeProperties"]["nodeRangeProperties"][0]["container"]
    assert "devices" not in container["linuxParameters"]
    argv = list(container["command"])
    assert argv[3] == record.handle["source"]
    # The container would fetch the tarball from S3; here the same bytes come from a local file.
    tarball = tmp_path / "sourcedir.tar.gz"
    key = argv[3].split("/", 3)[3]
    tarball.write_bytes(env.s3.get_object(Bucket=env.bucket, Key=key)["Body"].read())
    with tarfile.open(fileobj=io.BytesIO(tarball.read_bytes())) as tar:
        assert tar.getnames() == ["train.py"]
    argv[0], argv[3] = sys.executable, str(tarball)
    job_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RANK", "WORLD_SIZE"))}
    job_env.update({item["name"]: item["value"] for item in container["environment"]})
    job_env["OMP_NUM_THREADS"] = "1"
    return record, argv, job_env


def test_the_registered_command_runs_the_uploaded_source_under_torchrun(batch_env, tmp_path) -> None:
    record, argv, env = tiny_launch(batch_env, tmp_path, nproc=2, nnodes=1)
    with socket.socket() as probe:  # a container has 29500, torchrun's default, to itself; this host may not
        probe.bind(("127.0.0.1", 0))
        env["PET_MASTER_PORT"] = str(probe.getsockname()[1])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert printed == [f"rank {rank} of 2 tag {record.id} argv {EXPECTED_ARGV}" for rank in (0, 1)]
    assert "trnconsole bootstrap: torch.distributed.run --nproc_per_node=2 train.py" in proc.stdout
    assert not (tmp_path / "pwned").exists()


def test_the_multinode_command_joins_its_nodes_through_batchs_placement_variables(
    batch_env, tmp_path
) -> None:
    record, argv, env = tiny_launch(batch_env, tmp_path, nproc=1, nnodes=2)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    # What Batch sets on each node: the index everywhere, the main node's address on the others only.
    nodes = [
        {**env, "AWS_BATCH_JOB_NODE_INDEX": "0", "TRNCONSOLE_MASTER_PORT": port},
        {
            **env,
            "AWS_BATCH_JOB_NODE_INDEX": "1",
            "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS": "127.0.0.1",
            "TRNCONSOLE_MASTER_PORT": port,
        },
    ]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=e)
        for e in nodes
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    printed = [[line for line in out.splitlines() if line.startswith("rank ")] for out, _ in outputs]
    assert printed == [[f"rank {rank} of 2 tag {record.id} argv {EXPECTED_ARGV}"] for rank in (0, 1)]
