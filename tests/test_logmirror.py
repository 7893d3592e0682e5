"""Mirroring a remote job's log into its run directory: exactly once across crashes, restarts and two
consoles, and the console's handling of a remote run's status, detail, errors and late lines."""

from __future__ import annotations

import fcntl
import os
import time
from typing import Any

import pytest

from trnconsole.backends.base import Backend, RunStatus, Submission
from trnconsole.core.errors import UsageError
from trnconsole.logmirror import LOCK_FILE, mirror_logs
from trnconsole.service import Console


class ScriptedRemote(Backend):
    """A remote service's log as a list the test appends to; the cursor is an index, as a service token."""

    name = "sagemaker"
    remote = True

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.state = RunStatus("running", detail={"phase": "Training"})
        self.fail_with: Exception | None = None
        self.calls = 0

    def submit(self, record: Any) -> Submission:
        return Submission(handle={"job": f"job-{record.id}"}, started_at=time.time())

    def status(self, record: Any) -> RunStatus:
        if self.fail_with:
            raise self.fail_with
        return self.state

    def logs(self, record: Any, cursor: dict[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
        self.calls += 1
        if self.fail_with:
            raise self.fail_with
        start = int((cursor or {}).get("next", 0))
        return self.lines[start:], {"next": len(self.lines)}

    def stop(self, record: Any, grace_s: float = 15.0) -> RunStatus:
        self.state = RunStatus("stopping", detail={"phase": "Stopping"})
        return self.state


@pytest.fixture
def remote(tmp_path, monkeypatch) -> tuple[Console, ScriptedRemote, Any]:
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    console = Console(tmp_path / "home")
    backend = ScriptedRemote()
    console._backends["sagemaker"] = backend
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    spec = console.build_spec(str(script), backend="local")
    from dataclasses import replace

    record = console.launch(replace(spec, backend="sagemaker"))
    return console, backend, record


def log_of(record: Any) -> list[str]:
    path = record.run_dir / "stdout.log"
    return path.read_text().splitlines() if path.exists() else []


def step_line(step: int) -> str:
    return f"LOG Sun Nov 22 07:42:44 2026 - (0, {step}) step_loss : {1.0 / step:.4f} throughput : 100.0"


def test_lines_are_appended_once_and_the_cursor_kept_with_the_log_length(remote) -> None:
    console, backend, record = remote
    backend.lines += [step_line(1), step_line(2)]
    assert mirror_logs(console.store, backend, record) == 2
    backend.lines.append(step_line(3))
    assert mirror_logs(console.store, backend, record) == 1
    assert mirror_logs(console.store, backend, record) == 0
    assert log_of(record) == [step_line(1), step_line(2), step_line(3)]
    saved = console.store.get(record.id).log_cursor
    assert saved == {"remote": {"next": 3}, "log_bytes": (record.run_dir / "stdout.log").stat().st_size}


def test_a_crash_between_append_and_cursor_save_neither_repeats_nor_loses_a_line(remote, monkeypatch) -> None:
    console, backend, record = remote
    backend.lines += [step_line(1), step_line(2)]
    mirror_logs(console.store, backend, record)
    backend.lines += [step_line(3), step_line(4)]

    real_update = console.store.update

    def crash(run_id: str, **fields: Any) -> bool:
        if "log_cursor" in fields:
            raise KeyboardInterrupt("killed between the append and the save")
        return real_update(run_id, **fields)

    monkeypatch.setattr(console.store, "update", crash)
    with pytest.raises(KeyboardInterrupt):
        mirror_logs(console.store, backend, record)
    assert len(log_of(record)) == 4  # appended, but the cursor still says 2
    monkeypatch.setattr(console.store, "update", real_update)

    restarted = Console(console.home)  # a new console and a new backend object, from the store alone
    fresh = ScriptedRemote()
    fresh.lines = [*backend.lines, step_line(5)]
    assert mirror_logs(restarted.store, fresh, restarted.store.get(record.id)) == 3
    assert log_of(record) == [step_line(i) for i in range(1, 6)]


def test_another_console_mirroring_the_same_run_is_skipped_not_doubled(remote) -> None:
    console, backend, record = remote
    backend.lines.append(step_line(1))
    fd = os.open(record.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert mirror_logs(console.store, backend, record) == 0
        assert backend.calls == 0
    finally:
        os.close(fd)
    assert mirror_logs(console.store, backend, record) == 1


def test_refresh_mirrors_parses_metrics_and_keeps_the_remote_detail(remote) -> None:
    console, backend, record = remote
    backend.lines += [step_line(s) for s in range(1, 11)]
    record = console.refresh(record, force=True)
    assert record.status == "running"
    assert record.detail == {"phase": "Training"}
    watcher = console.watcher(record)
    watcher.drain()
    assert watcher.metrics.last_step == 10  # a remote run's metrics come from its mirrored log


def test_remote_polls_are_spaced_unless_forced(remote) -> None:
    console, backend, record = remote
    console.refresh(record, force=True)
    calls = backend.calls
    console.refresh(record)
    console.refresh(record)
    assert backend.calls == calls + 1  # the first unforced poll is due, the next one is not
    console.refresh(record, force=True)
    assert backend.calls == calls + 2


def test_a_service_error_becomes_the_runs_note_and_clears_when_it_answers_again(remote) -> None:
    console, backend, record = remote
    backend.fail_with = UsageError("AWS denied logs:GetLogEvents: not authorized; grant it to your role")
    record = console.refresh(record, force=True)
    assert record.status == "running"
    assert record.error.startswith("AWS denied logs:GetLogEvents")
    backend.fail_with = None
    record = console.refresh(record, force=True)
    assert record.error is None


def test_ending_mirrors_the_last_lines_and_late_lines_still_arrive(remote) -> None:
    console, backend, record = remote
    backend.lines += [step_line(1)]
    console.refresh(record, force=True)
    backend.lines += [step_line(2)]
    backend.state = RunStatus(
        "completed", exit_code=0, ended_at=time.time(), detail={"phase": "Completed", "billable_seconds": 412}
    )
    record = console.refresh(record, force=True)
    assert record.status == "completed" and record.summary["step"] == 2
    assert record.summary["remote"]["billable_seconds"] == 412
    backend.lines += [step_line(3)]  # delivered by the service after the job ended
    record = console.refresh(record, force=True)
    assert record.summary["step"] == 3
    assert log_of(record)[-1] == step_line(3)


def test_stop_leaves_a_remote_run_stopping_until_the_service_reports_the_end(remote) -> None:
    console, backend, record = remote
    record = console.stop(record)
    assert record.status == "stopping" and record.detail == {"phase": "Stopping"}
    backend.state = RunStatus("stopped", ended_at=time.time(), detail={"phase": "Stopped"})
    record = console.refresh(record, force=True)
    assert record.status == "stopped"


def test_an_option_of_another_backend_is_refused_naming_where_it_belongs(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    console = Console(tmp_path / "home")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    with pytest.raises(
        UsageError, match=r"^--namespace: not an option of --backend local; it is for --backend k8s$"
    ):
        console.build_spec(str(script), backend_options={"namespace": "ml"})


def test_config_file_defaults_fill_backend_options_and_unknown_keys_are_named(tmp_path, monkeypatch) -> None:
    from trnconsole.backends.options import config_defaults

    config = {"backends": {"sagemaker": {"role": "arn:aws:iam::1:role/r", "spot": True}}}
    assert config_defaults("sagemaker", config) == {"role": "arn:aws:iam::1:role/r", "spot": "true"}
    assert config_defaults("batch", config) == {}
    with pytest.raises(UsageError, match=r"\[backends.sagemaker\] queue: not an option of this backend"):
        config_defaults("sagemaker", {"backends": {"sagemaker": {"queue": "q"}}})


def test_a_remote_run_is_polled_by_one_console_at_a_time(remote) -> None:
    console, backend, record = remote
    backend.lines.append(step_line(1))
    fd = os.open(record.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another console is mid-poll (e.g. resubmitting a Batch job)
        assert console.refresh(record, force=True) == record
        assert backend.calls == 0
    finally:
        os.close(fd)
    assert console.refresh(record, force=True).status == "running"
    assert backend.calls == 1
