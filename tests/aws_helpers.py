"""AWS test helpers: a real moto server on 127.0.0.1 (in this process, so tests can reach its backend
objects), an environment pointing boto3 at it, and injected error responses.

The fixtures are imported by conftest.py, so every test module can ask for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-west-2"


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def point_aws_at(monkeypatch: pytest.MonkeyPatch, tmp_path, endpoint_variable: str, url: str) -> None:
    """boto3 with test credentials, no profile or config file, and `endpoint_variable`
    (AWS_ENDPOINT_URL, or a per-service one such as AWS_ENDPOINT_URL_PRICING) pointing at `url`."""
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_REGION",
        "AWS_SESSION_TOKEN",
        "AWS_MAX_ATTEMPTS",
        "AWS_ENDPOINT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv(endpoint_variable, url)


@pytest.fixture
def aws_env(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> str:
    point_aws_at(monkeypatch, tmp_path, "AWS_ENDPOINT_URL", moto_url)
    return moto_url


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: object) -> Iterator[bytes]:
        yield self._body


def fail_first(client, responses: list[tuple[int, str]]) -> list[str]:
    """Answer the client's next requests with these (status, error code) before letting them through."""
    from botocore.awsrequest import AWSResponse

    seen: list[str] = []

    def before_send(request, **_: object):
        seen.append(request.url)
        if len(seen) > len(responses):
            return None
        status, code = responses[len(seen) - 1]
        body = json.dumps({"__type": code, "message": f"synthetic {code}"}).encode()
        return AWSResponse(request.url, status, {"Content-Type": "application/x-amz-json-1.1"}, _Body(body))

    client.meta.events.register("before-send", before_send)
    return seen
