"""`trnconsole precompile`: neuron_parallel_compile's output read from recordings written in its real formats
(torch-neuronx's neuron_parallel_compile and libneuronxla's cache logger), the compile cache location rules,
and the command end to end against the fake tool in tests/fakes, which checks and records the command it is
given and replays a recording."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from trnconsole.commands.precompile import (
    DEFAULT_STEPS,
    LOG_FILE,
    cmd_precompile,
    run_precompile,
    trial_spec,
)
from trnconsole.core.errors import UsageError
from trnconsole.core.precompile import (
    DEFAULT_CACHE_URL,
    PrecompileLog,
    cache_dir_flag,
    cache_location,
    parse_text,
)
from trnconsole.core.spec import RunSpec
from trnconsole.service import Console

REPO = Path(__file__).resolve().parents[1]
FAKES = Path(__file__).parent / "fakes"
RECORDINGS = Path(__file__).parent / "data" / "precompile"


def recording(name: str) -> str:
    return (RECORDINGS / name).read_text(encoding="utf-8", errors="replace")


# ---- reading the tool's output ----


def test_clean_run_counts_each_graph_once_though_every_rank_extracts_it():
    summary = parse_text(recording("clean.log"))
    assert summary.phase == "done" and summary.summary_seen
    assert (summary.graphs_total, summary.compiled, summary.failed) == (5, 5, 0)
    assert summary.extracted == 5 and summary.cache_misses == 5 and summary.cache_hits == 0
    assert summary.compiler_calls == 5 and summary.compiler_passes == 5
    assert summary.progress is not None and summary.progress.to_json() == {
        "total": 5,
        "done": 5,
        "failed": 0,
        "locked": 0,
        "remaining": 0,
    }
    assert summary.compile_seconds == pytest.approx(300.188, abs=0.01)  # the JSON report's compile_time
    assert summary.cache_path == DEFAULT_CACHE_URL
    assert summary.errors == () and summary.skipped_lines == 0 and not summary.script_failed


def test_failed_compilations_are_counted_named_and_explained_once_per_graph():
    summary = parse_text(recording("failures.log"))
    assert (summary.graphs_total, summary.compiled, summary.failed) == (6, 4, 2)
    assert [Path(p).parent.name for p in summary.failed_graphs] == [
        "MODULE_15521117223395126027+d41d8cd9",
        "MODULE_1897587528045977639+d41d8cd9",
    ]
    assert summary.cached_failures == 1  # seen by both ranks, one graph
    assert summary.compile_seconds is None  # this SDK's report has no compile times
    assert summary.cache_path == "/home/ubuntu/neuron_cache/gpt2/ip-172-31-5-10"
    cached, tensorizer, killed = summary.errors
    assert (
        cached.startswith("MODULE_3314287742409081226+d41d8cd9: ") and "--retry_failed_compilation" in cached
    )
    assert tensorizer.startswith("MODULE_15521117223395126027+d41d8cd9: [TEN404] (aten__add_add.31237)")
    assert killed == "MODULE_1897587528045977639+d41d8cd9: neuronx-cc exited with status 70"
    assert summary.error_count == 5  # every error line counts; each graph is explained once


def test_a_run_that_is_all_cache_hits_has_nothing_to_compile():
    summary = parse_text(recording("all_cached.log"))
    assert summary.cache_hits == 5  # ten hit lines (two ranks, with and without "Exiting with ...")
    assert summary.cache_misses == 0 and summary.extracted == 0
    assert summary.nothing_to_compile and summary.phase == "done"
    assert summary.progress is None and not summary.summary_seen
    assert (summary.compiled, summary.failed) == (0, 0)
    assert summary.cache_path == "/fsx/ubuntu/neuron-cache"


def test_garbled_and_cut_off_lines_are_counted_and_skipped_not_guessed():
    summary = parse_text(recording("garbled.log"))
    assert summary.skipped_lines == 2
    cut_extract, cut_tally = summary.skipped_samples
    assert cut_extract.endswith("/mode") and cut_tally.endswith("locked are 2, fai")
    # What is readable still adds up: tallies glued to dots or to each other, a progress bar's \r, colour
    # codes, NUL and undecodable bytes, a summary prefixed with "INFO: ", a last line without a newline.
    assert summary.extracted == 3 and summary.compiler_calls == 3 and summary.compiler_passes == 3
    assert (summary.graphs_total, summary.compiled, summary.failed) == (3, 3, 0)
    assert summary.summary_seen and summary.phase == "done"
    assert summary.progress is not None and summary.progress.done == 3
    assert summary.errors == ()


def test_a_failed_trial_run_says_why():
    summary = parse_text(recording("script_error.log"))
    assert summary.script_failed and summary.phase == "extracting"
    assert summary.errors == (
        "the trial run of the training command failed: RuntimeError: Bad StatusOr access: "
        "RESOURCE_EXHAUSTED: LoadCollectives: error condition nrt_load_collectives(): 4",
    )
    assert not summary.script_error_ignored
    told_to_go_on = PrecompileLog()
    told_to_go_on.feed_lines(
        f"2025-11-21 10:02:52.000530:  9120  {level} ||NEURON_PARALLEL_COMPILE||: {message}"
        for level, message in (
            ("ERROR", "There was an error in the training script."),
            ("INFO", "NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE is set, continuing to compile"),
        )
    )
    assert told_to_go_on.snapshot().script_failed and told_to_go_on.snapshot().script_error_ignored


def test_fed_line_by_line_the_phases_advance_and_progress_never_goes_back():
    log = PrecompileLog()
    phases, fractions, changed_on = [], [], []
    for line in recording("clean.log").splitlines():
        if log.feed(line):
            changed_on.append(line)
        snap = log.snapshot()
        if not phases or phases[-1] != snap.phase:
            phases.append(snap.phase)
        if snap.progress:
            fractions.append(snap.progress.fraction)
    assert phases == ["starting", "extracting", "compiling", "done"]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert not any(line.startswith(("W1120", "LOG ", "bert:")) for line in changed_on)


def test_a_slower_workers_late_tally_is_ignored_but_a_new_total_is_taken():
    log = PrecompileLog()
    line = "2025-11-20 14:03:19.000804:  4830{w}  INFO ||NEURON_CACHE||: Current remaining items are {r}, locked are {k}, failed are 0, done are {d}, total is {t}"  # noqa: E501
    assert log.feed(line.format(w=1, r=0, k=1, d=4, t=5))
    assert not log.feed(line.format(w=2, r=0, k=2, d=3, t=5))
    assert log.snapshot().progress.done == 4
    assert log.feed(line.format(w=3, r=7, k=0, d=0, t=7))  # another node's cache, another total
    assert log.snapshot().progress.total == 7


# ---- where the compile cache is ----


FLAGS_DIR = "--model-type=transformer --cache_dir=/home/u/nc"


@pytest.mark.parametrize(
    ("env", "url", "source", "kind"),
    [
        ({}, DEFAULT_CACHE_URL, "default", "local"),
        ({"NEURON_COMPILE_CACHE_URL": "/fsx/nc"}, "/fsx/nc", "NEURON_COMPILE_CACHE_URL", "local"),
        ({"NEURON_COMPILE_CACHE_URL": "s3://bkt/nc"}, "s3://bkt/nc", "NEURON_COMPILE_CACHE_URL", "s3"),
        (
            {"NEURON_COMPILE_CACHE_URL": "s3://bkt/a", "NEURON_CC_FLAGS": FLAGS_DIR},
            "/home/u/nc",
            "NEURON_CC_FLAGS --cache_dir",
            "local",
        ),
        (
            {"NEURON_CC_FLAGS": "--retry_failed_compilation --cache_dir s3://bkt/b"},
            "s3://bkt/b",
            "NEURON_CC_FLAGS --cache_dir",
            "s3",
        ),
        (
            {"NEURON_CC_FLAGS": "--model-type=transformer", "NEURON_COMPILE_CACHE_URL": " "},
            DEFAULT_CACHE_URL,
            "default",
            "local",
        ),
    ],
)
def test_cache_dir_in_neuron_cc_flags_wins_over_the_env_var_and_both_over_the_default(env, url, source, kind):
    location = cache_location(env)
    assert (location.url, location.source, location.kind) == (url, source, kind)


def test_cache_dir_flag_reads_each_spelling_and_the_last_one_wins():
    assert cache_dir_flag("--cache_dir='/data/neuron cache' -O1") == "/data/neuron cache"
    assert cache_dir_flag("--cache_dir=/a --cache_dir /b") == "/b"
    assert cache_dir_flag('--cache_dir=/a --auto-cast "none') == "/a"  # an unbalanced quote is not fatal
    assert cache_dir_flag("--cache-dir=/a --no_cache") is None  # neuronx-cc's wrapper knows only --cache_dir


def test_a_relative_cache_dir_is_the_jobs_working_directory_not_ours(tmp_path):
    location = cache_location({"NEURON_CC_FLAGS": "--model-type=transformer --cache_dir=./compiler_cache"})
    assert location.resolved(str(tmp_path)) == str(tmp_path / "compiler_cache")
    assert cache_location({"NEURON_COMPILE_CACHE_URL": "s3://b/c"}).resolved(str(tmp_path)) == "s3://b/c"


# ---- the trial's step limit ----


@pytest.mark.parametrize(("given", "runs"), [(None, 10), ("200", 10), ("4", 4)])
def test_a_bundled_runners_steps_are_capped_never_raised(given, runs):
    spec = RunSpec(runner="bert", flags={"synthetic": True, **({"steps": given} if given else {})})
    trial, cap = trial_spec(spec, DEFAULT_STEPS)
    assert cap == runs and trial.flags["steps"] == str(runs)
    assert trial.flags["synthetic"] is True  # nothing else changes, or the graphs would differ


def test_a_scripts_known_step_flag_is_capped_and_an_unknown_one_is_left_alone():
    spec = RunSpec(runner="/work/train.py", flags={"max_steps": "5000", "lr": "1e-4"})
    trial, cap = trial_spec(spec, 12)
    assert cap == 12 and trial.runner_args() == ["--max_steps", "12", "--lr", "1e-4"]
    assert trial_spec(RunSpec(runner="/work/train.py", flags={"lr": "1e-4"}), 12) == (
        RunSpec(runner="/work/train.py", flags={"lr": "1e-4"}),
        None,
    )
    trial, cap = trial_spec(RunSpec(runner="/work/train.py"), 12, steps_flag="--iters")
    assert cap == 12 and trial.runner_args() == ["--iters", "12"]
    with pytest.raises(UsageError, match=r"--set max_steps=lots: not a whole number"):
        trial_spec(RunSpec(runner="/work/train.py", flags={"max_steps": "lots"}), 12)


# ---- the command, end to end against the fake tool ----


def precompile_args(runner: str, *sets: str, envs: tuple[str, ...] = (), **options) -> argparse.Namespace:
    """The namespace `trnconsole precompile` parses (the defaults of its options)."""
    values = {
        "runner": runner,
        "set": list(sets),
        "env": list(envs),
        "nproc": 1,
        "python": None,
        "precompile_steps": DEFAULT_STEPS,
        "steps_flag": None,
        "num_parallel": None,
        "json": False,
    }
    values.update(options)
    return argparse.Namespace(**values)


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("TRNCONSOLE_HOME", str(home))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.delenv("TRNCONSOLE_PYTHON", raising=False)
    for name in ("NEURON_CC_FLAGS", "NEURON_COMPILE_CACHE_URL"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def fake_tool(tmp_path, monkeypatch):
    """The fake neuron_parallel_compile on PATH; returns a function choosing its recording, and where it
    writes what it received."""
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    received = tmp_path / "received.json"
    monkeypatch.setenv("FAKE_NPC_RECEIVED", str(received))

    def use(name: str) -> Path:
        monkeypatch.setenv("FAKE_NPC_RECORDING", str(RECORDINGS / name))
        return received

    return use


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("import sys\nprint('trial', sys.argv[1:])\n")
    return path


def test_bert_precompile_runs_the_capped_trial_under_the_tool_and_summarizes(home, fake_tool, capsys):
    received = fake_tool("clean.log")
    args = precompile_args("bert", "synthetic=true", "steps=500", "precision=bf16", nproc=2, num_parallel=4)
    assert cmd_precompile(args, Console) == 0

    got = json.loads(received.read_text())
    assert got["options"] == {"--num_parallel": "4"}
    command = got["command"]
    assert Path(command[0]).name == "torchrun" and command[1:3] == ["--nproc_per_node", "2"]
    script_at = next(i for i, arg in enumerate(command) if arg.endswith(".py"))
    assert Path(command[script_at]).name == "bert.py"
    flags = command[script_at + 1 :]
    assert flags[flags.index("--steps") + 1] == "10" and flags[flags.index("--precision") + 1] == "bf16"
    (directory,) = (home / "precompile").iterdir()
    assert flags[flags.index("--output-dir") + 1] == str(directory / "output")
    assert got["env"]["NEURON_PROCESS_TAG"] == f"precompile-{directory.name}"

    # Everything the tool said is in the log, byte for byte.
    assert (directory / LOG_FILE).read_bytes() == (RECORDINGS / "clean.log").read_bytes()
    saved = json.loads((directory / "summary.json").read_text())
    assert saved["ok"] and saved["graphs"]["compiled"] == 5 and saved["steps"] == 10

    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        f"precompile {directory.name}: bert x2, 10 steps, cache /var/tmp/neuron-compile-cache"
    )
    progress = [line for line in out if line.startswith("precompile: ")]
    order = {"starting": 0, "trial": 1, "compiling:": 2, "done:": 3}
    phases = [order[line.split()[1]] for line in progress]  # plain lines, in the order the phases come
    assert phases == sorted(phases) and phases[-1] == 3
    assert progress[-1].startswith("precompile: done: 5/5 compiled, 0 compiling, 0 failed, 0 from cache")
    assert f"precompile  {directory.name}: ok" in out[-5]
    assert "graphs      5 compiled, 0 failed, 0 already in the cache" in out
    assert "cache       /var/tmp/neuron-compile-cache (local, from default)" in out


def test_failed_compilations_exit_1_and_json_says_which(home, fake_tool, script, capsys):
    fake_tool("failures.log")
    args = precompile_args(
        str(script),
        "max_steps=1000",
        envs=("NEURON_CC_FLAGS=--model-type=transformer --cache_dir=/home/ubuntu/neuron_cache/gpt2/h",),
        json=True,
    )
    assert cmd_precompile(args, Console) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # stdout is the JSON alone; progress went to stderr
    assert report["ok"] is False and report["exit_code"] == 1 and report["tool_exit_code"] == 2
    assert report["graphs"]["failed"] == 2 and report["graphs"]["cached_failures"] == 1
    assert len(report["graphs"]["failed_graphs"]) == 2
    assert report["cache"]["source"] == "NEURON_CC_FLAGS --cache_dir"
    assert report["cache"]["url"] == "/home/ubuntu/neuron_cache/gpt2/h"
    assert report["argv"][report["argv"].index("--max_steps") + 1] == "10"
    assert "failed: some graphs did not compile" in captured.err
    assert "\nerror       MODULE_15521117223395126027+d41d8cd9: [TEN404]" in captured.err


def test_a_fully_cached_run_is_ok_with_nothing_compiled(home, fake_tool, script, capsys):
    fake_tool("all_cached.log")
    args = precompile_args(
        str(script), envs=("NEURON_COMPILE_CACHE_URL=s3://ml-bucket/neuron-cache",), json=True
    )
    assert cmd_precompile(args, Console) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["graphs"]["cache_hits"] == 5 and report["graphs"]["compiled"] == 0
    assert report["nothing_to_compile"] and report["steps"] is None  # train.py has no known step flag
    assert report["cache"]["kind"] == "s3" and report["cache"]["reported"] == "/fsx/ubuntu/neuron-cache"


def test_a_failing_trial_run_exits_1_with_its_exception(home, fake_tool, script, capsys):
    fake_tool("script_error.log")
    spec = Console().build_spec(str(script), ["train_iters=300"])
    result = run_precompile(spec, Console(), sys.stdout, steps=3)
    assert result.exit_code == 1 and result.returncode == 1 and result.steps == 3
    out = capsys.readouterr().out
    assert "failed: the trial run of the training command failed" in out
    assert "RuntimeError: Bad StatusOr access" in out


def test_without_the_tool_it_is_one_line_saying_how_to_get_it(home, tmp_path, monkeypatch):
    if Path("/opt/aws/neuron/bin/neuron_parallel_compile").exists():
        pytest.skip("a real neuron_parallel_compile is installed on this host")
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent.parent / "nowhere"))
    with pytest.raises(UsageError) as caught:
        cmd_precompile(precompile_args("bert", "synthetic=true"), Console)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("neuron_parallel_compile: not found beside ")
    assert "torch-neuronx" in message and "trn1" in message
    assert not (home / "precompile").exists()  # nothing was started or written


def test_bad_options_are_usage_errors_before_anything_starts(home, fake_tool, script):
    fake_tool("clean.log")
    console = Console()
    spec = console.build_spec(str(script))
    with pytest.raises(UsageError, match=r"^--precompile-steps 0: must be a positive"):
        run_precompile(spec, console, sys.stdout, steps=0)
    with pytest.raises(UsageError, match=r"^--num-parallel 0: must be a positive"):
        run_precompile(spec, console, sys.stdout, num_parallel=0)
    remote = RunSpec(runner=str(script), backend="sagemaker")
    with pytest.raises(UsageError, match=r"^--backend sagemaker: precompiling runs neuron_parallel_compile"):
        run_precompile(remote, console, sys.stdout)
    assert not (home / "precompile").exists()


CTRL_C_DRIVER = """
import sys
from trnconsole.commands.precompile import cmd_precompile
from trnconsole.service import Console
import argparse
args = argparse.Namespace(runner=sys.argv[1], set=[], env=[], nproc=1, python=None, precompile_steps=10,
                          steps_flag=None, num_parallel=None, json=False)
sys.exit(cmd_precompile(args, Console))
"""


def test_ctrl_c_stops_the_tool_and_everything_it_started(home, fake_tool, script, monkeypatch):
    received = fake_tool("clean.log")
    monkeypatch.setenv("FAKE_NPC_HOLD", "1")  # the replay ends, the "compile" goes on
    driver = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_DRIVER, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            logs = list((home / "precompile").glob(f"*/{LOG_FILE}")) if (home / "precompile").exists() else []
            if received.exists() and logs and b"Total failed compilations" in logs[0].read_bytes():
                break
            time.sleep(0.1)
        else:
            pytest.fail("the fake tool never finished its replay")
        tool_pid = json.loads(received.read_text())["pid"]
        assert psutil.pid_exists(tool_pid)
        driver.send_signal(signal.SIGINT)
        out, _ = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 130, out
    assert "interrupted (Ctrl-C)" in out
    gone_by = time.monotonic() + 5
    while psutil.pid_exists(tool_pid) and psutil.Process(tool_pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < gone_by, "the tool outlived the Ctrl-C"
        time.sleep(0.05)


def test_launch_with_precompile_compiles_first_and_launches_only_when_it_succeeded(
    home, fake_tool, script, capsys
):
    from trnconsole.cli import main

    fake_tool("failures.log")
    assert main(["launch", str(script), "--precompile"]) == 1
    assert "not launched: precompilation failed" in capsys.readouterr().err
    assert Console().store.list() == []
    fake_tool("all_cached.log")
    assert main(["launch", str(script), "--precompile", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)  # the record alone on stdout; the progress went to stderr
    assert record["status"] in ("running", "completed") and len(Console().store.list()) == 1


def test_the_cli_reaches_precompile_and_its_missing_tool_is_one_line(home, tmp_path, monkeypatch, capsys):
    from trnconsole.cli import main

    if Path("/opt/aws/neuron/bin/neuron_parallel_compile").exists():
        pytest.skip("a real neuron_parallel_compile is installed on this host")
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # python and torchrun, no Neuron tool
    assert main(["precompile", "bert", "--set", "synthetic=true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trnconsole: error: neuron_parallel_compile: not found") and err.count("\n") == 1
