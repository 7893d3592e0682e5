"""AWS plumbing against a real moto server: the client factory, the retry wrapper, the CloudWatch follower."""

from __future__ import annotations

import json
import random
import sys
import time
import uuid

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from aws_helpers import fail_first

from trnconsole.backends.aws import aws_client, call
from trnconsole.backends.cloudwatch import LogFollower
from trnconsole.core.errors import UsageError

GROUP_PREFIX = "/aws/sagemaker/TrainingJobs"


@pytest.fixture
def logs(aws_env: str):
    return aws_client("logs")


def new_group(logs) -> str:
    group = f"{GROUP_PREFIX}-{uuid.uuid4().hex[:8]}"
    logs.create_log_group(logGroupName=group)
    return group


_last_ms = [0]


def write(logs, group: str, stream: str, *messages: str) -> None:
    # Timestamps strictly increase across writes, as a real job's do; the service returns events by time.
    start = max(int(time.time() * 1000), _last_ms[0] + 1)
    _last_ms[0] = start + len(messages)
    events = [{"timestamp": start + i, "message": m} for i, m in enumerate(messages)]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


# The client factory


def test_client_uses_standard_retries_timeouts_and_the_configured_endpoint(aws_env: str) -> None:
    client = aws_client("logs")
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert client.meta.config.connect_timeout == 10
    assert client.meta.region_name == "us-west-2"
    assert client.meta.endpoint_url == aws_env


def test_client_honours_the_users_max_attempts_and_region_argument(aws_env, monkeypatch) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")
    client = aws_client("sagemaker", region="eu-west-1")
    assert client.meta.config.retries["total_max_attempts"] == 5
    assert client.meta.region_name == "eu-west-1"


def test_missing_region_is_one_line_naming_the_fix(aws_env, monkeypatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(UsageError, match="AWS region: not set; set AWS_REGION"):
        aws_client("logs")


def test_missing_credentials_is_one_line_naming_the_fix(aws_env, monkeypatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(UsageError, match="AWS credentials: none found; run `aws configure`"):
        aws_client("logs")


def test_unknown_profile_is_a_usage_error(aws_env) -> None:
    with pytest.raises(UsageError, match="AWS profile nobody: not found"):
        aws_client("logs", profile="nobody")


def test_missing_boto3_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(UsageError, match=r"^boto3 is not installed: pip install trnconsole\[aws\]$"):
        aws_client("logs")


def test_a_storm_of_5xx_and_throttling_is_survived(logs, aws_env, monkeypatch) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # only our layer retries, so the count is exact
    client = aws_client("logs")
    group = new_group(logs)
    stream = "job/algo-1-1"
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    write(logs, group, stream, "survived")
    storm = [(503, "ServiceUnavailableException"), (500, "InternalFailure"), (400, "ThrottlingException")]
    storm += [(429, "TooManyRequestsException")]
    seen = fail_first(client, storm)
    delays: list[float] = []
    page = call(
        client.get_log_events,
        action="logs:GetLogEvents",
        sleep=delays.append,
        logGroupName=group,
        logStreamName=stream,
        startFromHead=True,
    )
    assert [e["message"] for e in page["events"]] == ["survived"]
    assert len(seen) == 5 and len(delays) == 4


def test_a_storm_longer_than_the_attempts_is_one_line(aws_env, monkeypatch) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    client = aws_client("logs")
    fail_first(client, [(503, "ServiceUnavailableException")] * 10)
    with pytest.raises(UsageError) as err:
        call(client.describe_log_groups, action="logs:DescribeLogGroups", attempts=3, sleep=lambda _: None)
    assert str(err.value).startswith("AWS logs:DescribeLogGroups failed after 3 attempts: ")
    assert "\n" not in str(err.value)


def test_access_denied_is_one_line_naming_the_action_and_is_not_retried(logs) -> None:
    seen = fail_first(logs, [(400, "AccessDeniedException")])
    delays: list[float] = []
    with pytest.raises(UsageError) as err:
        call(logs.describe_log_groups, action="logs:DescribeLogGroups", sleep=delays.append)
    assert str(err.value) == (
        "AWS denied logs:DescribeLogGroups: synthetic AccessDeniedException; grant it to your role or profile"
    )
    assert len(seen) == 1 and delays == []


def test_rejected_credentials_say_to_refresh_them(logs) -> None:
    fail_first(logs, [(400, "ExpiredTokenException")])
    with pytest.raises(
        UsageError, match=r"AWS rejected the credentials for logs:DescribeLogGroups .*refresh"
    ):
        call(logs.describe_log_groups, action="logs:DescribeLogGroups", sleep=lambda _: None)


def test_other_client_errors_carry_the_service_code_and_message(logs) -> None:
    with pytest.raises(UsageError, match=r"^AWS logs:GetLogEvents failed: ResourceNotFoundException: "):
        call(logs.get_log_events, action="logs:GetLogEvents", logGroupName="/nope", logStreamName="nope")


def test_connection_errors_are_retried_then_one_line(aws_env, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    delays: list[float] = []
    with pytest.raises(UsageError, match="cannot reach the service after 3 attempts"):
        call(
            aws_client("logs").describe_log_groups,
            action="logs:DescribeLogGroups",
            attempts=3,
            sleep=delays.append,
        )
    assert len(delays) == 2


def test_backoff_grows_and_is_jittered() -> None:
    from botocore.exceptions import ClientError

    def throttled() -> None:
        raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "Op")

    random.seed(1234)
    runs: list[list[float]] = []
    for _ in range(200):
        delays: list[float] = []
        with pytest.raises(UsageError):
            call(throttled, action="x:Op", attempts=6, base_s=0.5, cap_s=6.0, sleep=delays.append)
        runs.append(delays)
    ceilings = [0.5, 1.0, 2.0, 4.0, 6.0]
    for attempt, ceiling in enumerate(ceilings):
        column = [run[attempt] for run in runs]
        assert all(0 <= d <= ceiling for d in column)
        assert max(column) > 0.8 * ceiling and min(column) < 0.2 * ceiling  # full jitter spans the range
    means = [sum(run[i] for run in runs) / len(runs) for i in range(len(ceilings))]
    assert means == sorted(means) and means[-2] > 4 * means[0]


# The CloudWatch follower


def test_missing_log_group_is_no_lines_yet(logs) -> None:
    follower = LogFollower(logs, "/aws/sagemaker/TrainingJobs-missing", "job/")
    assert follower.poll() == ([], {})


def test_follower_reads_a_stream_created_late_and_lines_added_between_polls(logs) -> None:
    group = new_group(logs)
    follower = LogFollower(logs, group, "job/")
    assert follower.poll() == ([], {})
    logs.create_log_stream(logGroupName=group, logStreamName="job/algo-1-1782729176")
    write(logs, group, "job/algo-1-1782729176", "starting", "step 1 loss 2.5")
    lines, cursor = follower.poll()
    assert lines == ["starting", "step 1 loss 2.5"]
    assert list(cursor) == ["job/algo-1-1782729176"]
    assert follower.poll()[0] == []
    write(logs, group, "job/algo-1-1782729176", "step 2 loss 2.1\n")
    assert follower.poll()[0] == ["step 2 loss 2.1"]
    json.dumps(follower.poll()[1])  # the cursor is plain JSON


def test_two_streams_get_host_prefixes_and_other_jobs_are_ignored(logs) -> None:
    group = new_group(logs)
    for stream in ("job/algo-1-1782729176", "job/algo-2-1782729177", "other-job/algo-1-1"):
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
    write(logs, group, "job/algo-1-1782729176", "rank 0 up")
    write(logs, group, "job/algo-2-1782729177", "rank 8 up")
    write(logs, group, "other-job/algo-1-1", "not ours")
    lines, cursor = LogFollower(logs, group, "job/").poll()
    assert sorted(lines) == ["[algo-1] rank 0 up", "[algo-2] rank 8 up"]
    assert sorted(cursor) == ["job/algo-1-1782729176", "job/algo-2-1782729177"]


def test_resume_from_a_saved_cursor_repeats_and_loses_nothing(logs) -> None:
    group = new_group(logs)
    streams = ("job/algo-1-1782729176", "job/algo-2-1782729177")
    for stream in streams:
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        write(logs, group, stream, *(f"{stream[4:10]} line {i}" for i in range(3)))
    first, cursor = LogFollower(logs, group, "job/").poll()
    assert len(first) == 6
    saved = json.loads(json.dumps(cursor))  # as the store keeps it across a console restart
    for stream in streams:
        write(logs, group, stream, *(f"{stream[4:10]} line {i}" for i in range(3, 5)))
    resumed = LogFollower(logs, group, "job/", cursor=saved)
    second, _ = resumed.poll()
    assert sorted(second) == sorted(f"[{s[4:10]}] {s[4:10]} line {i}" for s in streams for i in range(3, 5))
    assert resumed.poll()[0] == []


def test_follower_pages_through_many_events(logs) -> None:
    group = new_group(logs)
    logs.create_log_stream(logGroupName=group, logStreamName="job/algo-1-1")
    for batch in range(3):
        write(logs, group, "job/algo-1-1", *(f"line {batch * 4000 + i}" for i in range(4000)))
    lines, _ = LogFollower(logs, group, "job/").poll()
    assert lines == [f"line {i}" for i in range(12000)]


def test_once_the_expected_streams_are_known_they_are_not_listed_again(logs) -> None:
    group = new_group(logs)
    logs.create_log_stream(logGroupName=group, logStreamName="job/algo-1-1")
    write(logs, group, "job/algo-1-1", "hello")
    follower = LogFollower(logs, group, "job/", expected_streams=1)
    assert follower.poll()[0] == ["hello"]
    requests: list[str] = []
    logs.meta.events.register(
        "before-send", lambda request, **_: requests.append(request.headers["X-Amz-Target"].decode())
    )
    write(logs, group, "job/algo-1-1", "again")
    assert follower.poll()[0] == ["again"]
    assert not any(target.endswith("DescribeLogStreams") for target in requests)
