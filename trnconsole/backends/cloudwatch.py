"""Following a remote job's CloudWatch Logs: every stream under a prefix, resumable from a saved cursor."""

from __future__ import annotations

import heapq
import re
from typing import Any

from .aws import call

NOT_FOUND = "ResourceNotFoundException"
# Pages read from one stream per poll; a stream with more waits for the next poll rather than stalling it.
MAX_PAGES = 50
SAGEMAKER_HOST = re.compile(r"(algo-\d+)-\d+")  # "<job>/algo-1-1782729176" -> "algo-1"


def host_label(stream: str, prefix: str) -> str:
    """A short name for a stream's lines: what follows the prefix, without SageMaker's start time."""
    rest = stream[len(prefix) :] if stream.startswith(prefix) else stream
    rest = rest.strip("/") or stream.rsplit("/", 1)[-1]
    match = SAGEMAKER_HOST.fullmatch(rest)
    return match.group(1) if match else rest


class LogFollower:
    """New lines of every stream named `stream_prefix`... in `group`, in time order.

    The cursor maps each stream to its nextForwardToken; it is plain JSON for the caller to keep, and a
    follower built with it resumes with nothing repeated or lost. `expected_streams` (SageMaker: the
    instance count) stops re-listing streams once that many are known.
    """

    def __init__(
        self,
        logs_client: Any,
        group: str,
        stream_prefix: str,
        cursor: dict[str, str] | None = None,
        expected_streams: int | None = None,
    ) -> None:
        self._logs = logs_client
        self.group = group
        self.stream_prefix = stream_prefix
        self.cursor: dict[str, str] = dict(cursor or {})
        self._expected = expected_streams

    def poll(self) -> tuple[list[str], dict[str, str]]:
        """Lines written since the last poll (or the cursor), and the cursor to keep."""
        known = set(self.cursor)
        if self._expected is None or len(known) < self._expected:
            known.update(self._list_streams())
        streams = sorted(known)
        several = len(streams) > 1
        # Advance a copy: if a call fails half way, the next poll re-reads from the old tokens.
        cursor = dict(self.cursor)
        per_stream: list[list[tuple[int, str]]] = []
        for stream in streams:
            events, token = self._read(stream, cursor.get(stream))
            if token is not None:
                cursor[stream] = token
            tag = f"[{host_label(stream, self.stream_prefix)}] " if several else ""
            per_stream.append(
                [
                    (int(event.get("timestamp", 0)), tag + line)
                    for event in events
                    for line in str(event.get("message", "")).rstrip("\n").split("\n")
                ]
            )
        self.cursor = cursor
        # Interleave streams by time; each stream keeps its own order whatever its timestamps say.
        merged = heapq.merge(*per_stream, key=lambda record: record[0])
        return [line for _, line in merged], dict(cursor)

    def _list_streams(self) -> list[str]:
        from botocore.exceptions import ClientError

        names: list[str] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"logGroupName": self.group}
            if self.stream_prefix:
                kwargs["logStreamNamePrefix"] = self.stream_prefix
            if token:
                kwargs["nextToken"] = token
            try:
                page = call(
                    self._logs.describe_log_streams,
                    action="logs:DescribeLogStreams",
                    passthrough=(NOT_FOUND,),
                    **kwargs,
                )
            except ClientError:
                return []  # the group is created with its first stream: nothing to read yet
            names += [stream["logStreamName"] for stream in page.get("logStreams", [])]
            token = page.get("nextToken")
            if not token:
                return names

    def _read(self, stream: str, token: str | None) -> tuple[list[dict[str, Any]], str | None]:
        from botocore.exceptions import ClientError

        events: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            kwargs: dict[str, Any] = {"nextToken": token} if token else {}
            try:
                page = call(
                    self._logs.get_log_events,
                    action="logs:GetLogEvents",
                    passthrough=(NOT_FOUND,),
                    logGroupName=self.group,
                    logStreamName=stream,
                    startFromHead=True,
                    **kwargs,
                )
            except ClientError:
                break  # listed but gone (expired or deleted)
            events += page.get("events", [])
            following = page.get("nextForwardToken")
            # The service answers with the token it was given once there is nothing new.
            if not following or following == token:
                break
            token = following
        return events, token
