"""AWS plumbing for the remote backends: boto3 clients from the standard AWS configuration, and calls that
retry throttling and server errors and turn the rest into one line the user can act on.

boto3 is imported inside the functions: the console starts without it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..core.errors import UsageError

T = TypeVar("T")

# Our `call` makes up to 6 attempts and botocore retries 5xx and throttling inside each of them, so the
# worst case is the product of the two; botocore keeps its default of 3 (unless the user set
# AWS_MAX_ATTEMPTS / max_attempts) so that a dead service costs at most 18 requests, not hundreds.
BOTOCORE_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60

THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "ProvisionedThroughputExceededException",
        "SlowDown",
    }
)
SERVER = frozenset(
    {
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalFailure",
        "InternalError",
        "InternalServerError",
    }
)
DENIED = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "NotAuthorized",
        "UnauthorizedException",
    }
)
BAD_CREDENTIALS = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "AuthFailure",
        "SignatureDoesNotMatch",
        "InvalidSignatureException",
    }
)

NO_BOTO3 = "boto3 is not installed: pip install trnconsole[aws]"
NO_REGION = "AWS region: not set; set AWS_REGION (or AWS_DEFAULT_REGION), or region in ~/.aws/config"
NO_CREDENTIALS = (
    "AWS credentials: none found; run `aws configure` or `aws sso login`, or set AWS_PROFILE "
    "(or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
)


def aws_client(service: str, region: str | None = None, profile: str | None = None) -> Any:
    """A boto3 client for `service`; region, profile, credentials and endpoint come from the usual AWS
    configuration (environment, ~/.aws/config), with `region`/`profile` overriding it when given."""
    try:
        import boto3
        import botocore.session
        from botocore.config import Config
        from botocore.exceptions import ProfileNotFound
    except ImportError as exc:
        raise UsageError(NO_BOTO3) from exc
    try:
        core = botocore.session.Session(profile=profile)
        session = boto3.session.Session(botocore_session=core, region_name=region)
        if not session.region_name:
            raise UsageError(NO_REGION)
        if session.get_credentials() is None:
            raise UsageError(NO_CREDENTIALS)
    except ProfileNotFound as exc:
        raise UsageError(
            f"AWS profile {exc.kwargs.get('profile')}: not found; check AWS_PROFILE and ~/.aws/config"
        ) from exc
    config = Config(
        retries={
            "mode": "standard",
            # total, first request included; a user's AWS_MAX_ATTEMPTS / max_attempts wins
            "total_max_attempts": int(core.get_config_variable("max_attempts") or BOTOCORE_ATTEMPTS),
        },
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
    )
    # No endpoint_url here: botocore itself honours AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE>.
    return session.client(service, config=config)


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)], so that many clients do not retry in step."""
    return random.uniform(0.0, min(cap_s, base_s * 2**attempt))


def call(
    fn: Callable[..., T],
    *args: Any,
    action: str,
    attempts: int = 6,
    base_s: float = 0.5,
    cap_s: float = 20.0,
    sleep: Callable[[float], Any] = time.sleep,
    passthrough: tuple[str, ...] = (),
    **kwargs: Any,
) -> T:
    """fn(*args, **kwargs), retried with backoff on throttling, 5xx and connection errors.

    `action` names the call for messages ("sagemaker:CreateTrainingJob"). Errors whose code is in
    `passthrough` are raised unchanged for the caller to handle; every other failure becomes a one-line
    UsageError.
    """
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        ReadTimeoutError,
        SSOError,
        TokenRetrievalError,
    )

    connection_errors = (
        EndpointConnectionError,
        ConnectionClosedError,
        ReadTimeoutError,
        ConnectTimeoutError,
    )
    attempts = max(1, attempts)
    for attempt in range(attempts):
        last = attempt == attempts - 1
        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            message = one_line(str(error.get("Message", "")))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if code in passthrough:
                raise
            if code in DENIED:
                raise UsageError(
                    f"AWS denied {action}: {message}; grant it to your role or profile"
                ) from None
            if code in BAD_CREDENTIALS:
                raise UsageError(
                    f"AWS rejected the credentials for {action} ({code}: {message}); refresh them "
                    "(`aws sso login`, or check AWS_PROFILE and AWS_ACCESS_KEY_ID)"
                ) from None
            if not (code in THROTTLING or code in SERVER or status >= 500 or status == 429):
                raise UsageError(f"AWS {action} failed: {code}: {message}") from None
            if last:
                raise UsageError(
                    f"AWS {action} failed after {attempts} attempts: {code or status}: {message}; "
                    "the service is throttling or unavailable, try again later"
                ) from None
        except connection_errors as exc:
            if last:
                raise UsageError(
                    f"AWS {action}: cannot reach the service after {attempts} attempts "
                    f"({one_line(str(exc))}); "
                    "check the network, the region and AWS_ENDPOINT_URL"
                ) from None
        except NoCredentialsError:
            raise UsageError(NO_CREDENTIALS) from None
        except NoRegionError:
            raise UsageError(NO_REGION) from None
        except (SSOError, TokenRetrievalError) as exc:
            raise UsageError(
                f"AWS credentials for {action}: {one_line(str(exc))}; run `aws sso login`"
            ) from None
        sleep(backoff_s(attempt, base_s, cap_s))
    raise AssertionError("unreachable")  # the last attempt returns or raises


def one_line(text: str) -> str:
    return " ".join(text.split())
