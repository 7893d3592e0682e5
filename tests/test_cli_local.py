"""The CLI on real local runs: jobs that outlive the console, stop, rerun, compare, foreign scripts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from trnconsole.backends.local import group_members

pytestmark = pytest.mark.slow

TINY = ["--set", "synthetic=true", "--set", "model_size=tiny", "--set", "device=cpu"]


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "XLA_USE_BF16")}
    env.update(TRNCONSOLE_HOME=str(home), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def cli(home: Path, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trnconsole.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(home, **env),
    )


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def show(home: Path, run_id: str) -> dict:
    return json.loads(ok(cli(home, "show", run_id, "--json")))


def launched_id(stdout: str) -> str:
    return stdout.split()[0]


def wait_for(predicate, timeout: float = 180, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")


@pytest.fixture(scope="module")
def home_with_runs(tmp_path_factory):
    """A home with a finished tiny BERT run and a rerun of it with a larger batch."""
    home = tmp_path_factory.mktemp("home")
    out = ok(cli(home, "launch", "bert", *TINY, "--set", "steps=10", "--set", "log_every=2", "--follow"))
    first = launched_id(out)
    out = ok(cli(home, "rerun", first, "--set", "batch_size=16", "--follow"))
    second = launched_id(out)
    return home, first, second


@pytest.mark.smoke
def test_launch_follow_prints_plain_progress_then_the_summary(home_with_runs):
    home, first, _ = home_with_runs
    record = show(home, first)
    assert record["status"] == "completed" and record["exit_code"] == 0
    summary = record["summary"]
    assert summary["step"] == 10 and summary["total_steps"] == 10
    assert summary["step_events"] == 5
    assert summary["final_loss"] > 0 and summary["avg_samples_per_s"] > 0
    assert summary["eval_metric"] == "accuracy" and 0 <= summary["eval_value"] <= 1
    run_dir = Path(record["run_dir"])
    for name in ("spec.json", "stdout.log", "metrics.jsonl", "result.json", "exit_status.json", "tb"):
        assert (run_dir / name).exists(), name
    log = (run_dir / "stdout.log").read_text()
    assert "LOG " in log and "step_loss" in log


def test_rerun_records_its_parent_and_the_flag_diff(home_with_runs):
    home, first, second = home_with_runs
    record = show(home, second)
    assert record["parent_id"] == first
    assert record["diff"] == {"batch_size": [None, "16"]}
    assert record["spec"]["flags"]["batch_size"] == "16"
    assert record["status"] == "completed"
    assert "--batch-size 16" in " ".join(
        json.loads((Path(record["run_dir"]) / "command.json").read_text())["argv"]
    )


def test_compare_shows_each_runs_ratio_to_the_first(home_with_runs):
    home, first, second = home_with_runs
    rows = json.loads(ok(cli(home, "compare", first, second[:6], "--json")))
    assert [r["id"] for r in rows] == [first, second]
    assert rows[0]["avg_samples_per_s_ratio"] == pytest.approx(1.0)
    expected = rows[1]["avg_samples_per_s"] / rows[0]["avg_samples_per_s"]
    assert rows[1]["avg_samples_per_s_ratio"] == pytest.approx(expected)
    for column in (
        "steps",
        "final_loss",
        "eval_value",
        "peak_samples_per_s",
        "mfu",
        "compile_count",
        "wall_time_s",
    ):
        assert rows[1][column] is not None, column
    table = ok(cli(home, "compare", first, second))
    assert "x SAMPLES/S" in table and "1.00x" in table


def test_runs_lists_both_runs_and_json_has_their_summaries(home_with_runs):
    home, first, second = home_with_runs
    text = ok(cli(home, "runs"))
    assert first in text and second in text and "completed" in text
    listed = {r["id"]: r for r in json.loads(ok(cli(home, "runs", "--json")))}
    assert listed[first]["summary"]["step"] == 10


def test_logs_prints_the_whole_log(home_with_runs):
    home, first, _ = home_with_runs
    out = ok(cli(home, "logs", first))
    assert out.count("LOG ") == 6  # five training lines and the final evaluation
    assert ok(cli(home, "logs", first, "--tail", "1")).count("\n") == 1


@pytest.mark.parametrize("runner", ["gpt2", "vit"])
def test_each_other_bundled_runner_runs_through_the_cli(tmp_path, runner):
    sizes = ["--set", "seq_len=32"] if runner == "gpt2" else ["--set", "image_size=32"]
    out = ok(
        cli(tmp_path, "launch", runner, *TINY, *sizes, "--set", "steps=6", "--set", "log_every=3", "--follow")
    )
    assert "step 6/6" in out and "completed" in out
    summary = show(tmp_path, launched_id(out))["summary"]
    assert summary["step"] == 6 and summary["step_events"] == 2
    assert summary["eval_metric"] == ("perplexity" if runner == "gpt2" else "accuracy")


def test_launch_of_eight_ranks_completes_five_times_in_a_row(tmp_path):
    """Every rank of an 8-process run starts in the new run directory at once; none may trip another."""
    for attempt in range(5):
        out = cli(
            tmp_path, "launch", "bert", *TINY, "--nproc", "8", "--set", "steps=2", "--set", "batch_size=2",
            "--set", "seq_len=16", "--set", "eval_every=0", "--follow",
        )  # fmt: skip
        run_id = launched_id(out.stdout)
        record = show(tmp_path, run_id)
        log = (tmp_path / "runs" / run_id / "stdout.log").read_text()
        assert out.returncode == 0 and record["status"] == "completed", f"attempt {attempt}:\n{log[-4000:]}"
        result = json.loads((tmp_path / "runs" / run_id / "result.json").read_text())
        assert result["world_size"] == 8 and result["ranks_in_sync"] is True


FOREIGN = textwrap.dedent(
    """
    import sys, time
    print("loading my model", flush=True)
    for step in range(1, 7):
        loss = 2.0 / step
        print(f"LOG {time.asctime()} - (0, {step}) step_loss : {loss:.4f} learning_rate : 1.00e-04 "
              f"throughput : {100 + step:.2f}", flush=True)
        print(f"my_tokens={1000 * step}", flush=True)
    print("LOG Sun Nov 22 07:42:44 2026 - (0, 7) step_loss : not-a-number", flush=True)
    print("{'loss': 0.25, 'grad_norm': 1.5, 'learning_rate': 5e-05, 'epoch': 1.0}", flush=True)
    print("{'eval_loss': 0.3, 'eval_accuracy': 0.875, 'epoch': 1.0}", flush=True)
    print("done", " ".join(sys.argv[1:]), flush=True)
    """
)


def test_a_foreign_script_is_watched_through_its_log_lines(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FOREIGN)
    home = tmp_path / "home"
    out = ok(
        cli(
            home,
            "launch",
            str(script),
            "--metric",
            "tokens=my_tokens=(\\d+)",
            "--set",
            "epochs=3",
            "--",
            "--literal",
            "$HOME;x",
        )
    )
    followed = ok(cli(home, "logs", "-f", launched_id(out)))  # returns when the run ends
    assert "loading my model" in followed and "done --epochs 3" in followed
    record = show(home, launched_id(out))
    summary = record["summary"]
    assert record["status"] == "completed"
    assert summary["series"]["loss"]["count"] == 7  # six LOG lines and one Trainer line
    assert summary["final_loss"] == pytest.approx(0.25)
    assert summary["series"]["samples_per_s"]["max"] == pytest.approx(106.0)
    assert summary["series"]["tokens"]["last"] == pytest.approx(6000)
    assert summary["eval_metric"] == "accuracy" and summary["eval_value"] == pytest.approx(0.875)
    assert summary["malformed_lines"] == 1
    log = (Path(record["run_dir"]) / "stdout.log").read_text()
    assert "done --epochs 3 --literal $HOME;x" in log  # argv items, never a shell


def test_the_job_outlives_a_hung_up_and_killed_console_and_show_has_every_step(tmp_path):
    console = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trnconsole.cli",
            "launch",
            "bert",
            *TINY,
            "--set",
            "steps=40",
            "--set",
            "log_every=2",
            "--follow",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(tmp_path),
        start_new_session=True,  # the console leads its own group, like a login shell's job
    )
    run_id = launched_id(console.stdout.readline())
    while "step " not in console.stdout.readline():
        assert console.poll() is None, console.stderr.read()
    os.killpg(console.pid, signal.SIGHUP)  # what a dropped SSH session sends the terminal's process group
    if console.poll() is None:
        console.send_signal(signal.SIGKILL)
    console.wait(10)
    wait_for(lambda: show(tmp_path, run_id)["status"] != "running")
    record = show(tmp_path, run_id)
    assert record["status"] == "completed", record
    assert record["summary"]["step"] == 40
    assert record["summary"]["step_events"] == 20


def pids_of_run(run_id: str) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("NEURON_PROCESS_TAG") == run_id:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.smoke
def test_stop_leaves_no_process_of_the_run_alive(tmp_path):
    out = ok(
        cli(
            tmp_path, "launch", "bert", *TINY, "--nproc", "2", "--set", "steps=100000", "--set", "log_every=1"
        )
    )
    run_id = launched_id(out)
    run_dir = tmp_path / "runs" / run_id
    wait_for(
        lambda: (
            (run_dir / "metrics.jsonl").exists()
            and '"kind": "step"' in (run_dir / "metrics.jsonl").read_text()
        )
    )
    record = show(tmp_path, run_id)
    assert record["status"] == "running"
    workers = pids_of_run(run_id)
    assert len(workers) >= 3  # torchrun and two workers
    assert ok(cli(tmp_path, "stop", run_id[:5])).startswith(f"{run_id} stopped")
    assert not group_members(record["pgid"])
    assert not [pid for pid in pids_of_run(run_id) if psutil.pid_exists(pid)]
    stopped = show(tmp_path, run_id)
    assert stopped["status"] == "stopped"
    assert stopped["summary"]["step"] >= 1


def test_stop_kills_a_job_that_ignores_sigterm_after_the_grace_period(tmp_path):
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\n"
        "while True:\n    time.sleep(1)\n"
    )
    home = tmp_path / "home"
    run_id = launched_id(ok(cli(home, "launch", str(script))))
    wait_for(lambda: "up" in (home / "runs" / run_id / "stdout.log").read_text())
    pgid = show(home, run_id)["pgid"]
    started = time.monotonic()
    assert f"{run_id} stopped" in ok(cli(home, "stop", run_id, "--grace", "2"))
    assert time.monotonic() - started < 30
    assert not group_members(pgid)
    assert not pids_of_run(run_id)


def test_follow_on_a_terminal_draws_a_progress_bar(tmp_path):
    import pty

    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trnconsole.cli", "launch", "bert", *TINY, "--set", "steps=10", "--follow"],
        stdin=child,
        stdout=child,
        stderr=child,
        env=cli_env(tmp_path, COLUMNS="120"),
    )
    os.close(child)
    output = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal closed: the run ended
            break
        if not chunk:
            break
        output += chunk
    assert proc.wait(60) == 0
    text = output.decode(errors="replace")
    assert "\r[########################] 100%  step 10/10" in text
    assert "completed (exit 0)" in text
