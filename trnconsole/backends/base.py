"""The interface every backend implements: submit, status, logs, stop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from ..core.spec import RunSpec
from ..core.store import RunRecord


@dataclass(frozen=True)
class RunStatus:
    """What a backend knows of a run now."""

    state: str  # "running", "completed", "failed", "stopped" or "lost"
    exit_code: int | None = None
    ended_at: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class Submission:
    """What submit returns: where the job is, to be kept in the store."""

    handle: dict[str, Any]
    started_at: float
    pid: int | None = None
    pgid: int | None = None


class Backend(ABC):
    name: str = ""

    def check(self, spec: RunSpec) -> None:  # noqa: B027  (most backends check nothing up front)
        """Raise UsageError for a spec this backend cannot start, before anything is written."""

    @abstractmethod
    def submit(self, record: RunRecord) -> Submission:
        """Start the job; its output goes to the run directory or to a remote log."""

    @abstractmethod
    def status(self, record: RunRecord) -> RunStatus: ...

    @abstractmethod
    def logs(self, record: RunRecord, cursor: dict[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
        """New log lines since the cursor, and the cursor to pass next time."""

    @abstractmethod
    def stop(self, record: RunRecord, grace_s: float = 15.0) -> RunStatus: ...
