"""The SageMaker backend against a real moto server and the real boto3 clients.

moto shows every training job Completed at once, drops Environment and cannot stop a job, so the tests
set a job's fields on moto's in-process backend objects, read the requests as they went on the wire, and
give moto's SageMaker a StopTrainingJob for the stop tests.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from aws_helpers import ACCOUNT, REGION, fail_first

from trnconsole.backends.aws import aws_client
from trnconsole.backends.package import sagemaker_neuron_image
from trnconsole.backends.sagemaker import (
    LOG_GROUP,
    SageMakerBackend,
    hyperparameter,
    job_name,
    read_settings,
)
from trnconsole.core.errors import UsageError
from trnconsole.core.spec import RunSpec
from trnconsole.core.store import RunRecord, Store

ROLE = "arn:aws:iam::123456789012:role/SageMakerTraining"
RECORDED_LOG = Path(__file__).parent / "data" / "recorded_run" / "stdout.log"


_shared: dict[tuple[str, str, str | None], Any] = {}


def shared_client(service: str, region: str | None = None, profile: str | None = None) -> Any:
    """One plain client per service for the whole module: making one costs most of a second here."""
    key = (service, region or REGION, profile)
    if key not in _shared:
        _shared[key] = aws_client(service, region, profile)
    return _shared[key]


class Clients:
    """The real client factory, keeping what it made so a test can reach a client. A service named in
    `on_create` gets a client of its own, handed to `on_create[service]` to hook its requests."""

    def __init__(self, **on_create: Any) -> None:
        self.on_create = on_create
        self.made: dict[str, Any] = {}

    def __call__(self, service: str, region: str | None = None, profile: str | None = None) -> Any:
        if service in self.on_create:
            client = aws_client(service, region, profile)
            self.on_create[service](client)
        else:
            client = shared_client(service, region, profile)
        self.made[service] = client
        return client


def sent(client: Any, operation: str) -> list[dict[str, Any]]:
    """The JSON bodies of this client's `operation` requests, as they go on the wire."""
    bodies: list[dict[str, Any]] = []

    def before_send(request: Any, **_: object) -> None:
        if request.headers.get("X-Amz-Target", b"").decode().endswith(f".{operation}"):
            bodies.append(json.loads(request.body))

    client.meta.events.register("before-send", before_send)
    return bodies


@pytest.fixture
def s3_prefix(aws_env: str) -> str:
    bucket = f"trnconsole-{uuid.uuid4().hex[:10]}"
    shared_client("s3").create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    return f"s3://{bucket}/runs"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "runs.db") as store:
        yield store


def new_record(store: Store, tmp_path: Path, spec: RunSpec) -> RunRecord:
    return store.create(spec, lambda run_id: tmp_path / "runs" / run_id)


def bert_spec(s3_prefix: str, **options: str) -> RunSpec:
    return RunSpec(
        runner="bert",
        flags={"synthetic": True, "steps": "200", "batch_size": "16", "precision": "bf16", "seq_len": "128"},
        env={"MALLOC_ARENA_MAX": "64"},
        backend="sagemaker",
        nproc=32,
        metrics=("val_f1=f1 = ([0-9.]+)",),
        backend_options={"s3_prefix": s3_prefix, "role": ROLE, **options},
    )


def launch(store: Store, tmp_path: Path, spec: RunSpec, backend: SageMakerBackend) -> RunRecord:
    record = new_record(store, tmp_path, spec)
    return replace(record, handle=backend.submit(record).handle)


def uploaded_files(s3: Any, uri: str) -> list[str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    tarball = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        return tar.getnames()


def moto_job(name: str) -> Any:
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[ACCOUNT][REGION].training_jobs[name]


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 11, 22, hour, minute, second, tzinfo=timezone.utc)


def transition(status: str, start: datetime, message: str, end: datetime | None = None) -> dict[str, Any]:
    row = {"Status": status, "StartTime": start, "StatusMessage": message}
    if end is not None:
        row["EndTime"] = end
    return row


def set_job(name: str, **fields: Any) -> None:
    """Give moto's job the fields a real job would have at that point (snake_case, as moto keeps them)."""
    job = moto_job(name)
    for key, value in fields.items():
        setattr(job, key, value)


# check: before anything is written


def test_check_needs_no_aws_configuration_and_fills_in_the_defaults(monkeypatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens: a call would fail
    spec = replace(bert_spec("s3://my-bucket/runs/"), nnodes=2)
    SageMakerBackend().check(spec)
    settings = read_settings(spec)
    assert settings.s3_prefix == "s3://my-bucket/runs"
    assert (settings.instance_type, settings.instance_count, settings.volume_gb) == (
        "ml.trn1.2xlarge",
        2,
        100,
    )
    assert (settings.spot, settings.max_runtime, settings.max_wait) == (False, 86400, None)
    spot = read_settings(bert_spec("s3://my-bucket", spot="true", max_runtime="7200"))
    assert (spot.spot, spot.max_runtime, spot.max_wait) == (True, 7200, 14400)


@pytest.mark.parametrize(
    ("options", "change", "expected"),
    [
        ({"s3_prefix": ""}, {}, "--s3-prefix: required with --backend sagemaker, e.g. s3://"),
        ({"s3_prefix": "my-bucket/runs"}, {}, "--s3-prefix my-bucket/runs: expected s3://bucket/prefix"),
        ({"role": ""}, {}, "--role: required with --backend sagemaker, e.g. arn:aws:iam::"),
        ({"role": "SageMakerRole"}, {}, "--role SageMakerRole: not an IAM role ARN; pass one like arn:aws"),
        (
            {},
            {"extra_args": ("--foo", "1")},
            "-- --foo 1: SageMaker passes the script only hyperparameters; use --set key=value instead",
        ),
        (
            {"spot": "true", "max_runtime": "7200", "max_wait": "3600"},
            {},
            "--max-wait 3600: must be at least --max-runtime (7200 s)",
        ),
        ({"max_wait": "3600"}, {}, "--max-wait: only with --spot true"),
        ({"spot": "maybe"}, {}, "--spot maybe: use true or false"),
        (
            {"instance_type": "trn1.2xlarge"},
            {},
            "--instance-type trn1.2xlarge: not a SageMaker instance type",
        ),
        ({"instance_count": "4"}, {"nnodes": 2}, "--instance-count 4: differs from --nnodes 2"),
        ({"instance_count": "0"}, {}, "--instance-count 0: must be at least 1"),
        ({"volume_gb": "big"}, {}, "--volume-gb big: not a whole number"),
        ({"checkpoint_s3": "/tmp/ckpt"}, {}, "--checkpoint-s3 /tmp/ckpt: expected s3://bucket/prefix"),
        ({"region": "Oregon"}, {}, "--region Oregon: not an AWS region name"),
    ],
)
def test_check_refuses_in_one_line_naming_the_option(options, change, expected) -> None:
    spec = bert_spec("s3://my-bucket/runs")
    spec = replace(spec, backend_options={**spec.backend_options, **options}, **change)
    with pytest.raises(UsageError) as err:
        SageMakerBackend().check(spec)
    assert str(err.value).startswith(expected)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("name", "runner", "expected"),
    [
        (None, "bert", "bert-0a1b2c3d"),
        (None, "/home/me/my_train.py", "my-train-0a1b2c3d"),
        ("BERT large, phase 2!", "bert", "BERT-large-phase-2-0a1b2c3d"),
        ("--", "gpt2", "trnconsole-0a1b2c3d"),
        ("x" * 70, "vit", "x" * 54 + "-0a1b2c3d"),
        ("a" * 53 + "-b" * 10, "vit", "a" * 53 + "-0a1b2c3d"),
    ],
)
def test_job_names_are_valid_and_end_with_the_run_id(name, runner, expected) -> None:
    assert job_name(RunSpec(runner=runner, name=name), "0a1b2c3d") == expected


@pytest.mark.parametrize("typed", ["16", "0.1", "1e-4", "1.10", "007", "bf16", "true", "a b", '{"k": 1}'])
def test_hyperparameters_reach_the_script_exactly_as_typed(typed: str) -> None:
    # SageMaker's training toolkit json-decodes each value, falling back to the raw text, then passes str().
    def toolkit(value: str) -> str:
        try:
            return str(json.loads(value))
        except ValueError:
            return value

    assert toolkit(hyperparameter(typed)) == typed
    assert toolkit(hyperparameter(True)) == "True"  # the runners' switches take a word after the flag
    assert hyperparameter("16") == "16"  # numbers go bare, as the SageMaker Python SDK sends them


# submit


@pytest.fixture
def bert_launch(store, tmp_path, s3_prefix):
    requests: list[list[dict[str, Any]]] = []
    clients = Clients(sagemaker=lambda client: requests.append(sent(client, "CreateTrainingJob")))
    spec = bert_spec(s3_prefix, spot="true", neuron_cc_flags="--model-type=transformer", max_runtime="7200")
    record = launch(store, tmp_path, spec, SageMakerBackend(clients))
    [bodies] = requests
    [request] = bodies
    return record, request, clients


def test_a_bundled_runner_launch_sends_what_the_sagemaker_toolkit_expects(bert_launch, s3_prefix) -> None:
    record, request, _ = bert_launch
    name = f"bert-{record.id}"
    source = record.handle["source"]
    assert request["TrainingJobName"] == name and len(name) <= 63
    assert source.startswith(f"{s3_prefix}/source/") and source.endswith("/sourcedir.tar.gz")
    assert request["HyperParameters"] == {
        "sagemaker_program": '"bert.py"',
        "sagemaker_submit_directory": json.dumps(source),
        "sagemaker_region": '"us-west-2"',
        "sagemaker_container_log_level": "20",
        "sagemaker_job_name": json.dumps(name),
        "sagemaker_torch_distributed_enabled": "true",
        "sagemaker_instance_type": '"ml.trn1.2xlarge"',
        "synthetic": "true",
        "steps": "200",
        "batch-size": "16",
        "precision": '"bf16"',
        "seq-len": "128",
        "output-dir": '"/opt/ml/checkpoints"',
        "resume": '"auto"',
    }
    assert request["AlgorithmSpecification"]["TrainingImage"] == sagemaker_neuron_image("us-west-2")
    assert request["AlgorithmSpecification"]["TrainingInputMode"] == "File"
    assert request["Environment"] == {
        "MALLOC_ARENA_MAX": "64",
        "NEURON_PROCESS_TAG": record.id,
        "TRNCONSOLE_RUN_ID": record.id,
        "TRNCONSOLE_RUN_DIR": "/opt/ml/checkpoints",  # where the job's outputs go, synced to S3
        "NEURON_COMPILE_CACHE_URL": f"{s3_prefix}/neuron-compile-cache",
        "NEURON_CC_FLAGS": "--model-type=transformer",
    }
    assert request["EnableManagedSpotTraining"] is True
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 7200, "MaxWaitTimeInSeconds": 14400}
    assert request["ResourceConfig"] == {
        "InstanceType": "ml.trn1.2xlarge",
        "InstanceCount": 1,
        "VolumeSizeInGB": 100,
    }
    assert request["OutputDataConfig"] == {"S3OutputPath": f"{s3_prefix}/{record.id}/output"}
    assert request["CheckpointConfig"] == {
        "S3Uri": f"{s3_prefix}/{record.id}/checkpoints",
        "LocalPath": "/opt/ml/checkpoints",
    }
    assert request["Tags"] == [{"Key": "trnconsole-run-id", "Value": record.id}]
    assert "InputDataConfig" not in request
    assert record.handle == {
        "job_name": name,
        "region": "us-west-2",
        "profile": None,
        "instance_type": "ml.trn1.2xlarge",
        "instance_count": 1,
        "spot": True,
        "source": source,
        "output": f"{s3_prefix}/{record.id}/output",
        "checkpoints": f"{s3_prefix}/{record.id}/checkpoints",
    }
    assert moto_job(name).role_arn == ROLE


def test_metric_definitions_read_every_value_off_the_lines_our_runners_print(bert_launch, capsys) -> None:
    from trn_harness.outputs import RunOutputs

    _, request, _ = bert_launch
    printer = RunOutputs(Path("unused"), enabled=False)
    printer.enabled = True  # only the line: no metrics file, no TensorBoard
    step = {"loss": 0.5123, "lr": 4e-4, "samples_per_s": 1234.5, "step_time_s": 0.2592}
    step |= {"tokens_per_s": 158016.0, "mfu": 0.0004, "grad_norm": 1.75}
    printer.log_line(0, 120, step)
    printer.log_line(0, 120, {"eval_loss": 2.5, "eval_accuracy": 0.875, "eval_perplexity": 12.18})
    lines = capsys.readouterr().out.splitlines()
    recorded = next(line for line in RECORDED_LOG.read_text().splitlines() if "step_loss" in line)
    lines += [recorded, "epoch 3 done: f1 = 0.91"]

    found: dict[str, float] = {}
    for definition in request["AlgorithmSpecification"]["MetricDefinitions"]:
        values = [float(m.group(1)) for line in lines if (m := re.search(definition["Regex"], line))]
        assert values, f"{definition} matches none of {lines}"
        found[definition["Name"]] = values[0]
    assert found == {
        "loss": 0.5123,
        "learning_rate": 4e-4,
        "throughput": 1234.5,
        "step_time_s": 0.2592,
        "tokens_per_s": 158016.0,
        "mfu": 0.0004,
        "grad_norm": 1.75,
        "eval_loss": 2.5,
        "eval_accuracy": 0.875,
        "eval_perplexity": 12.18,
        "val_f1": 0.91,
    }
    loss = next(
        d["Regex"] for d in request["AlgorithmSpecification"]["MetricDefinitions"] if d["Name"] == "loss"
    )
    assert re.search(loss, recorded).group(1) == "0.7084"
    assert not re.search(loss, lines[1])  # eval_loss is not the training loss


def test_the_source_holds_the_runners_and_is_uploaded_once(bert_launch, store, tmp_path, s3_prefix) -> None:
    record, _, clients = bert_launch
    names = uploaded_files(clients.made["s3"], record.handle["source"])
    assert {"bert.py", "gpt2.py", "vit.py", "trn_harness/loop.py", "trn_harness/outputs.py"} <= set(names)
    assert not any("__pycache__" in name for name in names)

    methods: list[str] = []
    again = Clients(
        s3=lambda c: c.meta.events.register(
            "before-send", lambda request, **_: methods.append(request.method)
        )
    )
    second = launch(store, tmp_path, bert_spec(s3_prefix), SageMakerBackend(again))
    assert second.handle["source"] == record.handle["source"]
    assert methods == ["HEAD"]


def test_a_user_script_is_packaged_from_its_source_dir_with_its_flags_as_given(
    store, tmp_path, s3_prefix
) -> None:
    project = tmp_path / "project"
    (project / "lib").mkdir(parents=True)
    (project / "__pycache__").mkdir()
    (project / "train.py").write_text("import lib.util\n")
    (project / "lib" / "util.py").write_text("X = 1\n")
    (project / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    spec = RunSpec(
        runner=str(project / "train.py"),
        flags={"epochs": "3", "learning_rate": "1e-4", "fast": True, "slow": False, "tag": "1.10"},
        backend="sagemaker",
        backend_options={
            "s3_prefix": s3_prefix,
            "role": ROLE,
            "source_dir": str(project),
            "data_s3": "s3://datasets/imdb/train",
            "instance_type": "ml.trn1.32xlarge",
            "instance_count": "2",
            "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-neuron:1",
            "compile_cache": "s3://caches/neuron",
            "checkpoint_s3": "s3://ckpts/run",
        },
    )
    requests: list[list[dict[str, Any]]] = []
    clients = Clients(sagemaker=lambda client: requests.append(sent(client, "CreateTrainingJob")))
    record = launch(store, tmp_path, spec, SageMakerBackend(clients))
    [[request]] = requests
    hyperparameters = request["HyperParameters"]
    assert hyperparameters["sagemaker_program"] == '"train.py"'
    assert {k: v for k, v in hyperparameters.items() if not k.startswith("sagemaker_")} == {
        "epochs": "3",
        "learning_rate": '"1e-4"',
        "fast": "true",
        "tag": '"1.10"',
    }
    assert request["InputDataConfig"] == [
        {
            "ChannelName": "train",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": "s3://datasets/imdb/train",
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
        }
    ]
    assert request["ResourceConfig"]["InstanceCount"] == 2
    assert request["AlgorithmSpecification"]["TrainingImage"].endswith("/my-neuron:1")
    assert request["Environment"]["NEURON_COMPILE_CACHE_URL"] == "s3://caches/neuron"
    assert request["CheckpointConfig"]["S3Uri"] == "s3://ckpts/run"
    assert "MaxWaitTimeInSeconds" not in request["StoppingCondition"]
    assert request["TrainingJobName"] == f"train-{record.id}"
    assert uploaded_files(clients.made["s3"], record.handle["source"]) == ["lib/util.py", "train.py"]


def test_a_missing_bucket_names_the_s3_prefix(store, tmp_path, aws_env) -> None:
    spec = bert_spec("s3://no-such-bucket-3f9a/runs")
    with pytest.raises(UsageError) as err:
        SageMakerBackend(shared_client).submit(new_record(store, tmp_path, spec))
    assert str(err.value) == (
        "--s3-prefix s3://no-such-bucket-3f9a/runs: bucket no-such-bucket-3f9a does not exist; create it "
        "(aws s3 mb s3://no-such-bucket-3f9a) or pass another"
    )


def test_access_denied_on_create_is_one_line_naming_the_action(store, tmp_path, s3_prefix) -> None:
    clients = Clients(sagemaker=lambda client: fail_first(client, [(400, "AccessDeniedException")]))
    with pytest.raises(UsageError) as err:
        SageMakerBackend(clients).submit(new_record(store, tmp_path, bert_spec(s3_prefix)))
    assert str(err.value) == (
        "AWS denied sagemaker:CreateTrainingJob: synthetic AccessDeniedException; "
        "grant it to your role or profile"
    )


def test_a_create_retried_after_it_went_through_finds_its_own_job(store, tmp_path, s3_prefix) -> None:
    record = new_record(store, tmp_path, bert_spec(s3_prefix))
    first = SageMakerBackend(shared_client).submit(record)
    # The first attempt created the job but its answer was lost: the retry is told the name is taken.
    clients = Clients(sagemaker=lambda client: fail_first(client, [(400, "ResourceInUse")]))
    assert SageMakerBackend(clients).submit(record).handle == first.handle

    other = replace(record, spec=replace(record.spec, flags={**record.spec.flags, "steps": "300"}))
    clients = Clients(sagemaker=lambda client: fail_first(client, [(400, "ResourceInUse")]))
    with pytest.raises(
        UsageError, match=rf"^training job bert-{record.id}: the name is taken by another job"
    ):
        SageMakerBackend(clients).submit(other)


# status


def test_status_follows_the_job_from_running_to_completed(bert_launch) -> None:
    record, _, _ = bert_launch
    name = record.handle["job_name"]
    backend = SageMakerBackend(shared_client)
    starting = [transition("Starting", at(7, 40), "Preparing the instances for training", at(7, 41))]
    training = [*starting, transition("Training", at(7, 41), "Training image download completed.")]
    set_job(
        name,
        training_job_status="InProgress",
        secondary_status="Training",
        secondary_status_transitions=training,
        training_start_time=at(7, 41),
        training_end_time=None,
        final_metric_data_list=[],
    )
    running = backend.status(record)
    assert (running.state, running.exit_code, running.ended_at, running.message) == (
        "running",
        None,
        None,
        None,
    )
    assert running.detail["secondary_status"] == "Training"
    assert running.detail["transitions"] == [
        {
            "status": "Starting",
            "start": at(7, 40).timestamp(),
            "end": at(7, 41).timestamp(),
            "message": "Preparing the instances for training",
        },
        {
            "status": "Training",
            "start": at(7, 41).timestamp(),
            "end": None,
            "message": "Training image download completed.",
        },
    ]
    assert (running.detail["instance_type"], running.detail["instance_count"]) == ("ml.trn1.2xlarge", 1)
    assert running.detail["spot"] is True
    assert running.detail["processes"].endswith("; --nproc 32 is not used")

    done = [*starting, transition("Training", at(7, 41), "Training in progress.", at(8, 10))]
    done += [transition("Completed", at(8, 10), "Training job completed", at(8, 10))]
    set_job(
        name,
        training_job_status="Completed",
        secondary_status="Completed",
        secondary_status_transitions=done,
        training_end_time=at(8, 10),
        final_metric_data_list=[{"MetricName": "loss", "Value": 0.25, "Timestamp": at(8, 10)}],
    )
    completed = backend.status(record)
    assert (completed.state, completed.exit_code, completed.message) == ("completed", 0, None)
    assert completed.ended_at == at(8, 10).timestamp()
    assert completed.detail["final_metrics"] == {"loss": 0.25}
    assert completed.detail["model_artifacts"].endswith("/output/model.tar.gz")


def test_detail_shows_billable_seconds_and_the_spot_savings(bert_launch) -> None:
    record, _, _ = bert_launch
    set_job(record.handle["job_name"], training_time_in_seconds=6033, billable_time_in_seconds=2413)
    detail = SageMakerBackend(shared_client).status(record).detail
    assert (detail["training_seconds"], detail["billable_seconds"]) == (6033, 2413)
    assert detail["spot_savings"] == pytest.approx(0.6, abs=1e-4)


def test_a_failed_job_reports_its_failure_reason_on_one_line_with_the_exit_code(bert_launch) -> None:
    record, _, _ = bert_launch
    reason = 'AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "RuntimeError: NaN loss"'
    set_job(
        record.handle["job_name"],
        training_job_status="Failed",
        secondary_status="Failed",
        failure_reason=reason,
        training_end_time=at(9, 0),
    )
    failed = SageMakerBackend(shared_client).status(record)
    assert (failed.state, failed.exit_code, failed.ended_at) == ("failed", 1, at(9, 0).timestamp())
    assert (
        failed.message
        == 'AlgorithmError: ExecuteUserScriptError: ExitCode 1 ErrorMessage "RuntimeError: NaN loss"'
    )

    set_job(
        record.handle["job_name"],
        failure_reason="CapacityError: Unable to provision requested ML compute capacity.",
    )
    assert SageMakerBackend(shared_client).status(record).exit_code is None


def test_a_job_sagemaker_ended_at_its_max_runtime_is_stopped_and_says_why(bert_launch) -> None:
    record, _, _ = bert_launch
    set_job(
        record.handle["job_name"],
        training_job_status="Stopped",
        secondary_status="MaxRuntimeExceeded",
        training_end_time=at(10, 0),
    )
    status = SageMakerBackend(shared_client).status(record)
    assert (status.state, status.exit_code, status.ended_at) == ("stopped", None, at(10, 0).timestamp())
    assert status.message == "MaxRuntimeExceeded: the job ran past --max-runtime; raise it"


def test_a_job_sagemaker_does_not_know_is_lost(aws_env, store, tmp_path) -> None:
    record = replace(
        new_record(store, tmp_path, bert_spec("s3://b/p")),
        handle={"job_name": "bert-gone0000", "region": REGION, "profile": None, "instance_count": 1},
    )
    status = SageMakerBackend(shared_client).status(record)
    assert status.state == "lost"
    assert status.message == "SageMaker has no training job bert-gone0000 in us-west-2"


def test_a_storm_of_5xx_on_describe_is_survived(bert_launch, monkeypatch) -> None:
    record, _, _ = bert_launch
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # only the backend's own retries, so the count is exact
    storm = [(500, "InternalFailure"), (503, "ServiceUnavailable"), (500, "InternalError")]
    seen: list[list[str]] = []
    backend = SageMakerBackend(Clients(sagemaker=lambda client: seen.append(fail_first(client, storm))))
    assert backend.status(record).state == "completed"
    assert len(seen[0]) == 4  # three failures, then the answer


# logs

_last_ms = [0]


def write(logs: Any, stream: str, *messages: str) -> None:
    # Strictly increasing timestamps, as a real job's; the service returns events in time order.
    start = max(int(time.time() * 1000), _last_ms[0] + 1)
    _last_ms[0] = start + len(messages)
    events = [{"timestamp": start + i, "message": m} for i, m in enumerate(messages)]
    logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=events)


@pytest.fixture
def logs(aws_env: str) -> Any:
    logs = shared_client("logs")
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=LOG_GROUP)
    return logs


def test_logs_follow_both_hosts_streams_appearing_late_and_resume_from_the_cursor(
    logs, store, tmp_path, s3_prefix
) -> None:
    record = launch(
        store, tmp_path, bert_spec(s3_prefix, instance_count="2"), SageMakerBackend(shared_client)
    )
    name = record.handle["job_name"]
    starting = transition("Starting", at(7, 40), "Preparing the instances for training")
    set_job(
        name,
        training_job_status="InProgress",
        secondary_status="Starting",
        secondary_status_transitions=[starting],
        last_modified_time=at(7, 40),
    )
    backend = SageMakerBackend(shared_client)
    first, cursor = backend.logs(record, None)
    assert first == ["[sagemaker] 2026-11-22 07:40:00 Starting - Preparing the instances for training"]

    transitions = [
        {**starting, "EndTime": at(7, 41)},
        transition("Downloading", at(7, 41), "Downloading input data", at(7, 42)),
        transition("Training", at(7, 42), "Downloading the training image..."),
    ]
    set_job(
        name,
        secondary_status="Training",
        secondary_status_transitions=transitions,
        last_modified_time=at(7, 42),
    )
    hosts = (f"{name}/algo-1-1782729176", f"{name}/algo-2-1782729177")
    for stream in hosts:
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    write(logs, hosts[0], "rank 0 up")
    write(logs, hosts[1], "rank 32 up")
    second, cursor = backend.logs(record, cursor)
    assert second == [
        "[sagemaker] 2026-11-22 07:41:00 Downloading - Downloading input data",
        "[sagemaker] 2026-11-22 07:42:00 Training - Downloading the training image...",
        "[algo-1] rank 0 up",
        "[algo-2] rank 32 up",
    ]

    # SageMaker rewrites the Training transition's message; then the lines stream in.
    transitions[-1] = {
        **transitions[-1],
        "StatusMessage": "Training image download completed. Training in progress.",
    }
    set_job(name, secondary_status_transitions=transitions, last_modified_time=at(7, 44, 5))
    write(logs, hosts[0], "LOG Sun Nov 22 07:45:00 2026 - (0, 1) step_loss : 2.5000")
    third, cursor = backend.logs(record, cursor)
    assert third == [
        "[sagemaker] 2026-11-22 07:44:05 Training - Training image download completed. Training in progress.",
        "[algo-1] LOG Sun Nov 22 07:45:00 2026 - (0, 1) step_loss : 2.5000",
    ]

    saved = json.loads(json.dumps(cursor))  # as the store keeps it across a console restart
    write(logs, hosts[0], "LOG Sun Nov 22 08:09:00 2026 - (0, 200) step_loss : 0.2500")
    write(logs, hosts[1], "rank 32 done")
    transitions[-1] = {**transitions[-1], "EndTime": at(8, 10)}
    transitions += [
        transition("Uploading", at(8, 10), "Uploading generated training model", at(8, 11)),
        transition("Completed", at(8, 11), "Training job completed"),
    ]
    set_job(
        name,
        training_job_status="Completed",
        secondary_status="Completed",
        secondary_status_transitions=transitions,
        last_modified_time=at(8, 11),
    )
    resumed = SageMakerBackend(shared_client)
    fourth, cursor = resumed.logs(record, saved)
    assert fourth == [
        "[algo-1] LOG Sun Nov 22 08:09:00 2026 - (0, 200) step_loss : 0.2500",
        "[algo-2] rank 32 done",
        "[sagemaker] 2026-11-22 08:10:00 Uploading - Uploading generated training model",
        "[sagemaker] 2026-11-22 08:11:00 Completed - Training job completed",
    ]
    assert resumed.logs(record, cursor) == ([], cursor)


def test_logs_find_the_new_stream_of_a_spot_job_restarted_after_an_interruption(
    logs, store, tmp_path, s3_prefix
) -> None:
    record = launch(store, tmp_path, bert_spec(s3_prefix, spot="true"), SageMakerBackend(shared_client))
    name = record.handle["job_name"]
    transitions = [
        transition("Starting", at(7, 40), "Preparing the instances for training", at(7, 42)),
        transition("Training", at(7, 42), "Training image download completed. Training in progress."),
    ]
    set_job(name, training_job_status="InProgress", secondary_status_transitions=transitions)
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=f"{name}/algo-1-1782729176")
    write(logs, f"{name}/algo-1-1782729176", "LOG Sun Nov 22 07:50:00 2026 - (0, 100) step_loss : 0.9000")
    backend = SageMakerBackend(shared_client)
    first, cursor = backend.logs(record, None)
    assert first[-1] == "LOG Sun Nov 22 07:50:00 2026 - (0, 100) step_loss : 0.9000"

    transitions[-1] = {**transitions[-1], "EndTime": at(8, 0)}
    transitions += [
        transition("Interrupted", at(8, 0), "The job was interrupted by a spot interruption", at(8, 5)),
        transition("Starting", at(8, 5), "Launching requested ML instances", at(8, 9)),
        transition("Training", at(8, 9), "Training image download completed. Training in progress."),
    ]
    set_job(name, secondary_status_transitions=transitions)
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=f"{name}/algo-1-1782731340")
    write(logs, f"{name}/algo-1-1782731340", "resuming from checkpoint step 100")
    second, _ = backend.logs(record, cursor)
    assert second == [
        "[sagemaker] 2026-11-22 08:00:00 Interrupted - The job was interrupted by a spot interruption",
        "[sagemaker] 2026-11-22 08:05:00 Starting - Launching requested ML instances",
        "[sagemaker] 2026-11-22 08:09:00 Training - Training image download completed. Training in progress.",
        "[algo-1] resuming from checkpoint step 100",
    ]


# stop


@pytest.fixture
def moto_stops_training_jobs(monkeypatch) -> list[str]:
    """moto 5.2.5 has no StopTrainingJob: give its SageMaker one that does what the service does."""
    from moto.core.responses import ActionResult
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.responses import SageMakerResponse

    stopped: list[str] = []

    def stop_training_job(self: SageMakerResponse) -> ActionResult:
        name = self._get_param("TrainingJobName")
        job = self.sagemaker_backend.training_jobs[name]
        if job.training_job_status != "InProgress":
            raise ValidationError(
                f"The request was rejected because the training job is in status {job.training_job_status}."
            )
        job.training_job_status = job.secondary_status = "Stopping"
        stopped.append(name)
        return ActionResult({})

    monkeypatch.setattr(SageMakerResponse, "stop_training_job", stop_training_job, raising=False)
    return stopped


def test_stop_marks_the_job_stopping_then_stopped(bert_launch, moto_stops_training_jobs) -> None:
    record, _, _ = bert_launch
    name = record.handle["job_name"]
    set_job(name, training_job_status="InProgress", secondary_status="Training", training_end_time=None)
    backend = SageMakerBackend(shared_client)
    stopping = backend.stop(record)
    assert stopping.state == "stopping" and stopping.ended_at is None
    assert moto_stops_training_jobs == [name]
    assert backend.status(record).state == "stopping"

    set_job(name, training_job_status="Stopped", secondary_status="Stopped", training_end_time=at(8, 30))
    stopped = backend.status(record)
    assert (stopped.state, stopped.exit_code, stopped.ended_at) == ("stopped", None, at(8, 30).timestamp())


def test_stopping_a_job_that_already_ended_only_reports_how_it_ended(
    bert_launch, moto_stops_training_jobs
) -> None:
    record, _, _ = bert_launch
    status = SageMakerBackend(shared_client).stop(record)  # moto's job is Completed from the start
    assert status.state == "completed" and status.exit_code == 0
    assert moto_stops_training_jobs == []
