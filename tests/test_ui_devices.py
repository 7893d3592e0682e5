"""The console's device panels on real monitors: recorded neuron-monitor reports and a neuron-ls listing
replayed by the fake executables, a run's real process tree, and a real leftover process killed from the
Devices screen."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_ui_app import settle, text_of, wait_until
from textual.widgets import DataTable

from trnconsole.core.spec import RunSpec
from trnconsole.core.store import Store
from trnconsole.service import Console
from trnconsole.ui.app import TrnConsoleApp
from trnconsole.ui.screens.devices import DevicesScreen

FAKES = Path(__file__).parent / "fakes"
BUSY = Path(__file__).parent / "data" / "neuron" / "trn1-32xlarge-busy.jsonl"
TAG = "r-busy32"  # the tag 30 of the recorded trn1.32xlarge runtimes carry


@pytest.fixture
def monitored(tmp_path, monkeypatch):
    """A running run (a real process tree) tagged like the recorded runtimes, and a real leftover process
    that the neuron-ls listing says holds device 15."""
    monkeypatch.setenv("PATH", f"{FAKES}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("FAKE_NEURON_MONITOR_FIXTURE", str(BUSY))
    monkeypatch.setenv("FAKE_NEURON_MONITOR_LOOP", "1")
    home = tmp_path / "home"
    job = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    leftover = subprocess.Popen(["sleep", "60"], start_new_session=True)
    listing = [
        {
            "neuron_device": 15,
            "nc_count": 2,
            "neuroncore_ids": [30, 31],
            "memory_size": 34359738368,
            "neuron_processes": [
                {"pid": leftover.pid, "command": "python train.py", "neuron_runtime_version": "2.21.41.0"}
            ],
        }
    ]
    (tmp_path / "ls.json").write_text(json.dumps(listing))
    monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(tmp_path / "ls.json"))
    with Store(home / "runs.db") as store:
        record = store.create(RunSpec(runner="bert"), lambda rid: home / "runs" / rid, run_id=TAG)
        record.run_dir.mkdir(parents=True)
        store.update(record.id, status="running", pid=job.pid, pgid=job.pid, started_at=time.time())
    yield home, leftover
    for proc in (job, leftover):
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_device_panel_and_screen_show_the_run_cores_and_kill_a_leftover(monitored):
    home, leftover = monitored

    async def scenario():
        app = TrnConsoleApp(service=Console(home))
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until(pilot, app, lambda: "30 NeuronCores" in text_of(app, "#devices"))
            panel = text_of(app, "#devices")
            assert f"run {TAG}" in panel and "Neuron  32/32 cores busy" in panel
            await pilot.press("d")
            await settle(pilot, app)
            assert isinstance(app.screen, DevicesScreen)
            report = text_of(app, "#report-text")
            assert "trn1.32xlarge" in report and "ECC  device 5" in report
            table = app.screen.query_one("#holders", DataTable)
            await wait_until(pilot, app, lambda: table.row_count == 1)
            assert table.get_row_at(0)[-1] == "LEFTOVER"
            await pilot.press("k")
            await settle(pilot, app)
            await pilot.press("y")
            await wait_until(pilot, app, lambda: leftover.poll() is not None, timeout=30)
            assert leftover.returncode == -signal.SIGTERM
            await pilot.press("escape")
            await settle(pilot, app)
        assert app.monitor_hub.neuron.running is False  # neuron-monitor ends with the console

    asyncio.run(scenario())
