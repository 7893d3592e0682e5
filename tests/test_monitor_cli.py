"""`trnconsole monitor`: a real snapshot of the host, a run's process tree and neuron-monitor's report,
with the recorded reports replayed by the fake neuron-monitor in tests/fakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trnconsole.core.spec import RunSpec
from trnconsole.core.store import Store

FAKES = Path(__file__).parent / "fakes"
NEURON = Path(__file__).parent / "data" / "neuron"
TAG = "3fa9c21e"  # the run id the recorded trn1.2xlarge runtime was tagged with


@pytest.fixture
def running_job(tmp_path):
    """A store holding one running local run whose wrapper is a real process with two children."""
    home = tmp_path / "home"
    job = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    with Store(home / "runs.db") as store:
        record = store.create(RunSpec(runner="bert"), lambda rid: home / "runs" / rid, run_id=TAG)
        record.run_dir.mkdir(parents=True)
        store.update(record.id, status="running", pid=job.pid, pgid=job.pid, started_at=time.time())
    time.sleep(0.3)  # the children exist
    yield home
    os.killpg(job.pid, 9)
    job.wait()


def monitor(home: Path, tmp_path: Path, *args: str, fixture: str = "trn1-2xlarge.jsonl") -> str:
    env = {
        **os.environ,
        "TRNCONSOLE_HOME": str(home),
        "TRNCONSOLE_CONFIG": str(tmp_path / "none.toml"),
        "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
        "FAKE_NEURON_MONITOR_FIXTURE": str(NEURON / fixture),
        "FAKE_NEURON_MONITOR_LOOP": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "trnconsole.cli", "monitor", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_once_json_matches_the_neuron_runtime_and_the_process_tree_to_the_run(running_job, tmp_path):
    snapshot = json.loads(monitor(running_job, tmp_path, "--once", "--json"))
    assert snapshot["host"]["memory_total"] > 0
    assert snapshot["neuron"]["instance"]["instance_type"] == "trn1.2xlarge"
    run = snapshot["runs"][TAG]
    assert run["tree"]["n_processes"] == 3  # the wrapper and its two children
    (runtime,) = run["runtimes"]
    assert runtime["tag"] == TAG and set(run["cores"]) == {"0", "1"}
    assert run["loaded_models"] >= 2
    assert "NVIDIA" in snapshot["nvidia_status"] or "NVML" in snapshot["nvidia_status"]


def test_once_text_shows_cores_devices_and_the_run(running_job, tmp_path):
    text = monitor(running_job, tmp_path, "--once", fixture="trn1-32xlarge-busy.jsonl")
    assert text.startswith("host  CPU")
    assert "trn1.32xlarge" in text and "16 device(s) x 2 NeuronCore-v2 cores" in text
    assert "ECC  device" in text
    core_rows = [line for line in text.splitlines() if line[:5].strip().isdigit() and "%" in line]
    assert len(core_rows) == 32
    assert f"run {TAG} bert" in text and "3 proc" in text


def test_no_driver_and_missing_tools_are_said_not_raised(tmp_path):
    home = tmp_path / "home"
    text = monitor(home, tmp_path, "--once", fixture="no-driver.jsonl")
    assert "Neuron driver is not visible in this container" in text
    env = {**os.environ, "TRNCONSOLE_HOME": str(home), "PATH": os.path.dirname(sys.executable)}
    done = subprocess.run(
        [sys.executable, "-m", "trnconsole.cli", "monitor", "--once"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "neuron-monitor not found: install aws-neuronx-tools" in done.stdout
