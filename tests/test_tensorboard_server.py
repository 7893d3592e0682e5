"""`trnconsole tensorboard`: the real TensorBoard server on 127.0.0.1 for a run's logs (or any directory)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from trnconsole.commands.tensorboard import free_port, log_dir_for
from trnconsole.core.errors import UsageError


def write_scalars(log_dir, tag: str, values: list[float]) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(log_dir))
    for step, value in enumerate(values):
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))
    writer.close()


@pytest.mark.slow
def test_the_server_serves_the_run_logs_on_loopback_and_stops_on_ctrl_c(tmp_path):
    log_dir = tmp_path / "logs" / "train"
    log_dir.mkdir(parents=True)
    write_scalars(log_dir, "loss", [0.9, 0.7, 0.5])
    port = free_port(0)
    env = {**os.environ, "TRNCONSOLE_HOME": str(tmp_path / "home")}
    process = subprocess.Popen(
        [sys.executable, "-m", "trnconsole.cli", "tensorboard", str(tmp_path / "logs"), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line, process.stderr.read()
        deadline = time.monotonic() + 60
        tags: dict = {}
        while "train" not in tags and time.monotonic() < deadline:  # TensorBoard loads the logs lazily
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugin/scalars/tags") as reply:
                tags = json.load(reply)
            time.sleep(0.5)
        assert "loss" in tags["train"]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)


def test_a_run_id_means_its_tb_directory_and_a_bad_target_is_one_line(tmp_path, recorded_home):
    from trnconsole.service import Console

    console = Console()
    (record,) = console.store.list()
    (record.run_dir / "tb").mkdir()
    assert log_dir_for(record.id[:6], lambda: console) == record.run_dir / "tb"
    assert log_dir_for(str(tmp_path), lambda: console) == tmp_path
    with pytest.raises(UsageError, match="neither a directory nor a run"):
        log_dir_for("no-such-run", lambda: console)


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trnconsole.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def test_tb_prints_each_series_of_any_log_dir_and_reports_a_corrupt_record(tmp_path):
    write_scalars(tmp_path / "a", "loss", [0.9, 0.7, 0.5])
    write_scalars(tmp_path / "b", "loss", [1.0, 2.0])
    done = run_cli("tb", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["RUN", "TAG", "POINTS", "STEPS", "LAST", "MIN", "MAX"]
    assert lines[1].split() == ["a", "loss", "3", "0-2", "0.5", "0.5", "0.9"]
    (event_file,) = (tmp_path / "b").iterdir()
    data = bytearray(event_file.read_bytes())
    data[-6] ^= 0xFF  # inside the last record's payload: its data CRC no longer matches
    event_file.write_bytes(bytes(data))
    done = run_cli("tb", str(tmp_path), "--json")
    out = json.loads(done.stdout)
    b = next(r for r in out["scalars"] if r["run"] == "b")
    assert b["count"] == 1 and len(out["problems"]) == 1 and "warning:" in done.stderr


def test_tb_of_a_run_reads_its_tb_directory(tmp_path, recorded_home):
    from trnconsole.service import Console

    (record,) = Console().store.list()
    write_scalars(record.run_dir / "tb", "train/loss", [0.3, 0.2])
    done = run_cli("tb", record.id, "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["scalars"]
    assert row["tag"] == "train/loss" and row["last_value"] == pytest.approx(0.2)


def test_tb_of_a_scripts_run_reads_its_output_dir_and_tb_dir_besides_its_run_dir(tmp_path, monkeypatch):
    from trnconsole.commands.tensorboard import log_roots_for
    from trnconsole.core.spec import RunSpec
    from trnconsole.core.store import Store
    from trnconsole.service import Console

    home, work = tmp_path / "home", tmp_path / "work"
    monkeypatch.setenv("TRNCONSOLE_HOME", str(home))
    spec = RunSpec(runner=str(tmp_path / "train.py"), flags={"output_dir": "out"}, cwd=str(work), tb_dir="tb")
    with Store(home / "runs.db") as store:
        record = store.create(spec, lambda run_id: home / "runs" / run_id)
    write_scalars(record.run_dir / "own", "a", [1.0])
    write_scalars(work / "out" / "runs" / "Nov24_10-00-00_host", "train/loss", [0.9, 0.8])
    write_scalars(work / "tb", "b", [2.0])

    roots = log_roots_for(record.id[:6], lambda: Console(home))
    assert [(r.label, r.path) for r in roots] == [
        (".", record.run_dir),
        ("tb", work / "tb"),
        ("out", work / "out"),
    ]
    assert log_roots_for(str(work), lambda: None)[0].path == work  # a path is a path
    done = run_cli("tb", record.id, "--json", env={"TRNCONSOLE_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    found = {(row["run"], row["tag"]): row["count"] for row in json.loads(done.stdout)["scalars"]}
    assert found == {("own", "a"): 1, ("tb", "b"): 1, ("out/runs/Nov24_10-00-00_host", "train/loss"): 2}
