"""A SageMaker run through the CLI against a real moto server, as a user sees it: launched, its CloudWatch
log mirrored into the run directory (nothing repeated across console restarts), its figures and the
service's facts in `show`, its cost once SageMaker reports billable seconds."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timezone

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from aws_helpers import ACCOUNT, REGION

from trnconsole.backends.aws import aws_client
from trnconsole.cli import main
from trnconsole.service import Console

ROLE = "arn:aws:iam::123456789012:role/SageMakerTraining"
GROUP = "/aws/sagemaker/TrainingJobs"


def step_line(step: int) -> str:
    fields = f"step_loss : {2.0 / step:.4f} learning_rate : 4.00e-04 throughput : 120.5"
    return f"LOG Sun Nov 22 07:{40 + step // 60:02d}:{step % 60:02d} 2026 - (0, {step}) {fields}"


def moto_job(name: str):
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[ACCOUNT][REGION].training_jobs[name]


def at(minute: int) -> datetime:
    return datetime(2026, 11, 22, 7, minute, tzinfo=timezone.utc)


@pytest.fixture
def home(aws_env, tmp_path, monkeypatch):
    monkeypatch.setenv("TRNCONSOLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    return tmp_path / "home"


def test_a_sagemaker_run_is_launched_mirrored_once_shown_and_costed(home, capsys) -> None:
    bucket = f"trn-{uuid.uuid4().hex[:10]}"
    aws_client("s3").create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    argv = ["launch", "bert", "--backend", "sagemaker", "--s3-prefix", f"s3://{bucket}/runs", "--role", ROLE]
    argv += ["--instance-type", "ml.trn1.32xlarge", "--set", "synthetic=true", "--set", "steps=3", "--json"]
    assert main(argv) == 0
    run_id = json.loads(capsys.readouterr().out)["id"]
    name = Console(home).store.get(run_id).handle["job_name"]

    job = moto_job(name)
    job.training_job_status = "InProgress"
    job.secondary_status = "Training"
    job.secondary_status_transitions = [
        {
            "Status": "Starting",
            "StartTime": at(40),
            "EndTime": at(42),
            "StatusMessage": "Launching instances",
        },
        {"Status": "Training", "StartTime": at(42), "StatusMessage": "Training in progress."},
    ]
    logs = aws_client("logs")
    existing = logs.describe_log_groups(logGroupNamePrefix=GROUP)["logGroups"]
    if GROUP not in {g["logGroupName"] for g in existing}:  # other tests make groups that start with it
        logs.create_log_group(logGroupName=GROUP)
    stream = f"{name}/algo-1-1782729176"
    logs.create_log_stream(logGroupName=GROUP, logStreamName=stream)
    now = int(time.time() * 1000)
    logs.put_log_events(
        logGroupName=GROUP,
        logStreamName=stream,
        logEvents=[{"timestamp": now + i, "message": step_line(i + 1)} for i in range(2)],
    )

    assert main(["logs", run_id]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "[sagemaker] 2026-11-22 07:40:00 Starting - Launching instances",
        "[sagemaker] 2026-11-22 07:42:00 Training - Training in progress.",
        step_line(1),
        step_line(2),
    ]
    assert main(["show", run_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "running" and shown["summary"]["step"] == 2
    assert shown["detail"]["secondary_status"] == "Training"

    # A third line, then the job ends; every command is a new console reading the store afresh.
    logs.put_log_events(
        logGroupName=GROUP, logStreamName=stream, logEvents=[{"timestamp": now + 10, "message": step_line(3)}]
    )
    job.training_job_status = "Completed"
    job.secondary_status = "Completed"
    job.training_end_time = at(50)
    job.training_time_in_seconds = 480
    job.billable_time_in_seconds = 480
    assert main(["show", run_id]) == 0
    out = capsys.readouterr().out
    assert "completed" in out and "sagemaker secondary status  Completed" in out
    assert "$3.30 (1 x ml.trn1.32xlarge at $24.725/h" in out  # 480 billable seconds
    assert "sagemaker training end      2026-11-22 07:50:00 UTC" in out
    assert main(["logs", run_id]) == 0
    assert main(["logs", run_id]) == 0
    mirrored = (home / "runs" / run_id / "stdout.log").read_text().splitlines()
    assert [line for line in mirrored if line.startswith("LOG")] == [step_line(1), step_line(2), step_line(3)]
    assert len(mirrored) == len(set(mirrored))
