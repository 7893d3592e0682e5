"""The interface every backend implements: submit, status, logs, stop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from ..core.spec import RunSpec
from ..core.store import RunRecord

# Set in every job's environment: where the job's own outputs go (the run directory of a local run; the
# directory inside the container a remote job's outputs are written to), so a script can write there.
RUN_DIR_ENV = "TRNCONSOLE_RUN_DIR"


@dataclass(frozen=True)
class RunStatus:
    """What a backend knows of a run now."""

    state: str  # "running", "stopping", "completed", "failed", "stopped" or "lost"
    exit_code: int | None = None
    ended_at: float | None = None
    message: str | None = None
    # A remote job's own facts, kept with the run and shown beside it (phase, instances, billable seconds…).
    detail: dict[str, Any] | None = None
    # A handle that changed since submit (a resubmitted Batch job); the store keeps the new one.
    handle: dict[str, Any] | None = None


@dataclass(frozen=True)
class Submission:
    """What submit returns: where the job is, to be kept in the store."""

    handle: dict[str, Any]
    started_at: float
    pid: int | None = None
    pgid: int | None = None


class Backend(ABC):
    name: str = ""
    # A remote backend's logs() reads the job's remote log; the console mirrors it into the run directory.
    remote: bool = False
    # The spec.backend_options keys this backend understands; any other is refused before a launch.
    options: frozenset[str] = frozenset()

    def check(self, spec: RunSpec) -> None:  # noqa: B027  (most backends check nothing up front)
        """Raise UsageError for a spec this backend cannot start, before anything is written."""

    @abstractmethod
    def submit(self, record: RunRecord) -> Submission:
        """Start the job; its output goes to the run directory or to a remote log."""

    @abstractmethod
    def status(self, record: RunRecord) -> RunStatus: ...

    @abstractmethod
    def logs(self, record: RunRecord, cursor: dict[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
        """New log lines since the cursor (plain JSON, kept in the store), and the cursor to pass next time.

        Lines carry no trailing newline. Given the cursor it returned, a new backend object (a restarted
        console) continues with nothing repeated or lost.
        """

    def close(self) -> None:  # noqa: B027  (only backends holding threads or connections need it)
        """Release what the backend holds (watch threads, connections); the jobs are not touched."""

    @abstractmethod
    def stop(self, record: RunRecord, grace_s: float = 15.0) -> RunStatus:
        """Ask the job to end. A remote backend may answer "stopping" and report the end on a later status."""
