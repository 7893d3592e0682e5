"""Refreshes that run while a launch is still submitting its run: the console refreshes on its own thread, so
one may read the run between the store's insert ("starting", no pid yet) and the launch's update."""

from __future__ import annotations

from unittest import mock

import pytest

from trnconsole.backends import local
from trnconsole.core.spec import RunSpec
from trnconsole.service import SUBMIT_GRACE_S, Console


@pytest.fixture
def console(tmp_path, monkeypatch) -> Console:
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    return Console(tmp_path / "home")


@pytest.mark.slow
def test_a_refresh_during_the_launch_leaves_the_run_to_the_launch(console, tmp_path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(60)\n")
    seen = []
    submit = local.LocalBackend.submit

    def submit_with_refreshes(self: local.LocalBackend, record):  # the window a loaded machine widens
        seen.append(console.refresh(console.store.get(record.id)).status)  # before the job is started
        submission = submit(self, record)
        seen.append(console.refresh(console.store.get(record.id)).status)  # started, its pid not stored
        return submission

    with mock.patch.object(local.LocalBackend, "submit", submit_with_refreshes):
        record = console.launch(RunSpec(runner=str(script)))
    try:
        assert seen == ["starting", "starting"]
        assert record.status == "running" and record.pid
        assert console.refresh(record).status == "running"
    finally:
        stopped = console.stop(console.store.get(record.id), grace_s=1.0)
    assert stopped.status == "stopped"


def test_a_run_whose_launch_never_finished_is_lost_after_the_grace(console) -> None:
    record = console.store.create(RunSpec(runner="bert"), console.run_dir)
    assert console.refresh(record).status == "starting"
    later = record.created_at + SUBMIT_GRACE_S + 1
    with mock.patch("trnconsole.service.time.time", return_value=later):
        lost = console.refresh(console.store.get(record.id))
    assert lost.status == "lost" and "never finished submitting" in lost.error
    assert console.refresh(lost).status == "lost"
