"""NeuronCores shared out between local runs, through the CLI, on a host whose neuron-ls is a recording
(trn1.2xlarge, two NeuronCores, idle) replayed by the fake on PATH. The jobs are a script that sleeps; which
cores each got is read from its processes' environments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TRN1_2XLARGE_IDLE = REPO / "tests" / "data" / "neuron" / "neuron-ls-trn1-2xlarge-idle.json"
SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(120)\n"


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "NEURON_RT_VISIBLE_CORES")}
    env.update(
        TRNCONSOLE_HOME=str(home),
        TRNCONSOLE_CONFIG=str(home / "none.toml"),
        PATH=f"{REPO / 'tests' / 'fakes'}{os.pathsep}{os.environ['PATH']}",
        FAKE_NEURON_LS_FIXTURE=str(TRN1_2XLARGE_IDLE),
        PYTHONUNBUFFERED="1",
    )
    return env


def trnconsole(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "trnconsole.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(home),
    )


def finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run(home: Path, *args: str) -> subprocess.CompletedProcess:
    return finish(trnconsole(home, *args))


def launched(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.split()[0]


def cores_seen_by(run_id: str, timeout: float = 60) -> set[str]:
    """NEURON_RT_VISIBLE_CORES in the environment of every process of the run, once its worker is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen, count = set(), 0
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
            except psutil.Error:
                continue
            if env.get("NEURON_PROCESS_TAG") == run_id:
                count += 1
                seen.add(env.get("NEURON_RT_VISIBLE_CORES", "<unset>"))
        if count >= 3:  # the wrapper, torchrun and the worker
            return seen
        time.sleep(0.2)
    raise AssertionError(f"run {run_id}: its processes did not come up")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "sleeper.py"
    path.write_text(SLEEPER)
    return path


def test_launches_share_out_the_cores_refuse_what_does_not_fit_and_reuse_an_ended_runs(
    tmp_path: Path, script: Path
) -> None:
    home = tmp_path / "home"
    started: list[str] = []
    try:
        # Two `trnconsole launch` processes at once: the cores lock keeps their ranges apart.
        both = [trnconsole(home, "launch", str(script)) for _ in range(2)]
        first, second = (launched(finish(p)) for p in both)
        started += [first, second]
        ranges = {first: cores_seen_by(first), second: cores_seen_by(second)}
        assert sorted(ranges.values(), key=sorted) == [{"0"}, {"1"}], ranges
        for run_id, cores in ranges.items():
            spec = json.loads(launched_and_shown(home, run_id))["spec"]
            assert {spec["visible_cores"]} == cores

        third = run(home, "launch", str(script))
        assert third.returncode == 2 and third.stdout == ""
        (line,) = third.stderr.splitlines()
        assert line.startswith("trnconsole: error: --nproc 1: no 1 free contiguous NeuronCores")
        assert f"run {first} (running)" in line and f"run {second} (running)" in line

        holder = first if ranges[first] == {"1"} else second
        clash = run(home, "launch", str(script), "--cores", "1")
        (line,) = clash.stderr.splitlines()
        assert clash.returncode == 2
        assert line.startswith(
            f"trnconsole: error: --cores 1: already held (cores 1: run {holder} (running))"
        )
        by_env = run(home, "launch", str(script), "--env", "NEURON_RT_VISIBLE_CORES=1")
        assert by_env.returncode == 2 and "--env NEURON_RT_VISIBLE_CORES=1: already held" in by_env.stderr

        assert run(home, "stop", holder).returncode == 0
        again = launched(run(home, "launch", str(script)))
        started.append(again)
        assert cores_seen_by(again) == {"1"}
    finally:
        for run_id in started:
            run(home, "stop", run_id)


def launched_and_shown(home: Path, run_id: str) -> str:
    shown = run(home, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_a_users_range_of_the_wrong_size_or_outside_the_host_is_refused(tmp_path: Path, script: Path) -> None:
    home = tmp_path / "home"
    wrong_size = run(home, "launch", str(script), "--cores", "0-1")
    assert wrong_size.returncode == 2
    assert wrong_size.stderr.strip() == (
        "trnconsole: error: --cores 0-1: 2 NeuronCore(s) for --nproc 1; give 1 core(s) (one per process) "
        "or change --nproc to 2"
    )
    outside = run(home, "launch", str(script), "--cores", "5")
    assert outside.returncode == 2
    assert outside.stderr.strip() == (
        "trnconsole: error: --cores 5: this host has NeuronCores 0-1 only (core 5 does not exist); "
        "pick cores in that range"
    )
    remote = run(home, "launch", str(script), "--cores", "0", "--backend", "sagemaker")
    assert (
        remote.returncode == 2
        and "--cores 0: NeuronCores are shared out between local runs only" in remote.stderr
    )
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
