"""`trnconsole preflight`: real torchrun workers with real gloo (and torch_xla on its CPU client) collectives,
faults injected into the workers themselves, the compile-cache disk check on a real directory, and the
Neuron verdicts from recorded neuron-ls output (no Trainium here)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import time
import venv
from pathlib import Path

import psutil
import pytest

from trnconsole.commands.preflight import cmd_preflight, read_neuron_ls, report_text, run_preflight
from trnconsole.core.errors import UsageError
from trnconsole.core.preflight import (
    FAIL,
    MARKER,
    PASS,
    SKIP,
    WORKER_CHECKS,
    NeuronLs,
    WorkerOutput,
    by_ranks,
    compile_cache_location,
    default_nproc,
    disk_applies,
    disk_check,
    merge_worker_checks,
    neuron_checks,
    neuron_device_nodes,
    rank_span,
    torchrun_failure,
)

slow = pytest.mark.slow  # these start torchrun
FAKES = Path(__file__).parent / "fakes"
NEURON_DATA = Path(__file__).parent / "data" / "neuron"
FAULTS = "TRNCONSOLE_PREFLIGHT_FAULTS"
ON_NEURON = bool(neuron_device_nodes())
RUNNER_PY = "/opt/venv/bin/python"


def preflight_args(**given: object) -> argparse.Namespace:
    """The namespace the CLI's `preflight` parser hands to cmd_preflight, with its defaults."""
    values: dict[str, object] = {
        "nproc": None,
        "device": "auto",
        "json": False,
        "python": None,
        "cache_dir": None,
        "min_free_gb": 20.0,
        "check_timeout": 120.0,
        "timeout": 900.0,
    }
    values.update(given)
    return argparse.Namespace(**values)


def run_command(args: argparse.Namespace, **env: str) -> tuple[int, str]:
    """cmd_preflight in this process (its workers are real processes), with its stdout captured."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        with contextlib.redirect_stdout(out):
            code = cmd_preflight(args, None)
    return code, out.getvalue()


def rows(report_json: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report_json["checks"]}


def no_worker_left() -> list[str]:
    """Processes of ours still running torchrun or a preflight worker."""
    left = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            line = " ".join(child.cmdline())
            if "preflight_worker" in line or "torch.distributed.run" in line:
                left.append(f"{child.pid} {line}")
    return left


# ---- the happy path: two CPU workers, gloo ----


@pytest.fixture(scope="module")
def healthy() -> tuple[int, dict]:
    code, out = run_command(preflight_args(nproc=2, device="cpu", json=True))
    return code, json.loads(out)


@slow
def test_two_cpu_workers_pass_the_device_op_and_every_gloo_collective(healthy):
    code, report = healthy
    checks = rows(report)
    assert code == 0 and report["ok"] is True and report["exit_code"] == 0, report
    for name in WORKER_CHECKS:
        assert checks[name]["result"] == PASS, checks[name]
        assert checks[name]["ms"] is not None and checks[name]["ms"] > 0
    assert "sum of rank+1 over 2 rank(s) = 3" in checks["all_reduce"]["detail"]
    assert "rank order" in checks["all_gather"]["detail"]
    assert "matches the CPU reference" in checks["device_op"]["detail"]
    # gloo in this torch has reduce_scatter_tensor: the real collective ran, not the fallback.
    assert "lacks" not in checks["reduce_scatter"]["detail"]
    assert checks["workers"]["result"] == PASS and "(gloo)" in checks["workers"]["detail"]


@slow
def test_every_rank_reports_its_own_timed_checks(healthy):
    _, report = healthy
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for rank in report["ranks"]:
        assert rank["backend"] == "gloo" and rank["platform"] == "cpu" and rank["error"] is None
        assert [c["name"] for c in rank["checks"]] == list(WORKER_CHECKS)
        assert all(c["result"] == PASS and c["ms"] > 0 for c in rank["checks"])


@slow
def test_json_output_has_a_stable_shape(healthy):
    _, report = healthy
    assert set(report) == {
        "ok",
        "exit_code",
        "device",
        "nproc",
        "python",
        "ran_on",
        "elapsed_s",
        "counts",
        "checks",
        "ranks",
    }
    assert report["device"] == "cpu" and report["nproc"] == 2 and report["ran_on"] == "cpu (gloo)"
    assert [c["name"] for c in report["checks"]] == [
        "neuron_driver",
        "neuron_ls",
        "torch_neuronx",
        "compile_cache_disk",
        "workers",
        *WORKER_CHECKS,
    ]
    for check in report["checks"]:
        assert set(check) == {"name", "result", "detail", "ms"}
        assert check["result"] in (PASS, FAIL, SKIP) and check["detail"]
    assert sum(report["counts"].values()) == len(report["checks"])


@slow
@pytest.mark.skipif(ON_NEURON, reason="this host has the Neuron driver")
def test_neuron_checks_are_skipped_off_trainium_with_the_reason(healthy):
    _, report = healthy
    checks = rows(report)
    for name in ("neuron_driver", "neuron_ls", "torch_neuronx"):
        assert checks[name]["result"] == SKIP, checks[name]
        assert checks[name]["detail"].startswith("--device cpu does not use Neuron: ")
    assert "no /dev/neuron* device nodes" in checks["neuron_driver"]["detail"]
    # The compile cache belongs to the Neuron compiler, which these workers never ran.
    assert checks["compile_cache_disk"]["result"] == SKIP
    assert "not used on cpu" in checks["compile_cache_disk"]["detail"]


# ---- checks failing for real ----


@pytest.fixture(scope="module")
def corrupted() -> tuple[int, str]:
    """Rank 1 adds 1000 to its all_reduce contribution; every rank treats reduce_scatter_tensor as missing,
    as gloo did before torch 2.7 for the list form."""
    return run_command(
        preflight_args(nproc=2, device="cpu"),
        **{FAULTS: "corrupt:all_reduce@1,no_reduce_scatter_tensor@*"},
    )


def table_row(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(name + " "))


@slow
def test_a_wrong_collective_result_fails_with_the_values_and_exit_code_1(corrupted):
    code, text = corrupted
    assert code == 1
    row = table_row(text, "all_reduce")
    assert " FAIL " in row
    assert "ranks 0-1: sum of rank+1: got [1003, 1003, 1003, 1003], expected [3, 3, 3, 3]" in row
    assert " PASS " in table_row(text, "all_gather")
    assert text.splitlines()[0].split() == ["CHECK", "RESULT", "DETAIL"]
    assert text.splitlines()[-1].startswith("preflight FAILED: ")


@slow
def test_a_backend_without_reduce_scatter_is_checked_through_all_reduce_and_says_so(corrupted):
    _, text = corrupted
    row = table_row(text, "reduce_scatter")
    assert " PASS " in row
    assert "gloo lacks reduce_scatter_tensor" in row
    assert "checked the equivalent all_reduce + slice instead" in row


@slow
def test_a_device_that_cannot_start_fails_the_workers_with_the_reason():
    # No GPU is visible to the worker, whatever this host has.
    report = run_preflight(1, "cuda", env={"CUDA_VISIBLE_DEVICES": ""})
    checks = {c.name: c for c in report.checks}
    assert report.exit_code == 1
    assert checks["workers"].result == FAIL
    assert checks["workers"].detail.startswith(
        "rank 0: setup failed: RuntimeError: --device cuda: no CUDA device is visible"
    )
    assert all(checks[n].detail == "not run: setup failed" for n in WORKER_CHECKS)
    assert all(checks[n].result == SKIP for n in WORKER_CHECKS)


@slow
def test_a_hung_collective_is_reported_as_a_timeout_naming_it():
    started = time.monotonic()
    report = run_preflight(2, "cpu", check_timeout_s=3, env={FAULTS: "stall:all_gather@1"})
    took = time.monotonic() - started
    checks = {c.name: c for c in report.checks}
    assert report.exit_code == 1
    assert checks["all_reduce"].result == PASS
    assert checks["all_gather"].result == FAIL
    assert "timed out: all_gather did not complete within 3 s" in checks["all_gather"].detail
    assert checks["reduce_scatter"].result == SKIP
    assert checks["reduce_scatter"].detail == "not run: all_gather timed out before it"
    # Rank 1 sleeps for days: the watchdog, not the sleep, ended the run.
    assert took < 120, took
    assert no_worker_left() == []


@slow
def test_the_overall_timeout_stops_torchrun_and_its_workers():
    report = run_preflight(2, "cpu", timeout_s=1.5)
    checks = {c.name: c for c in report.checks}
    assert checks["workers"].result == FAIL
    assert "0 of 2 rank(s) reported" in checks["workers"].detail
    assert "preflight stopped torchrun after 1.5 s (--timeout)" in checks["workers"].detail
    assert checks["device_op"].result == FAIL and "ranks 0-1: no result" in checks["device_op"].detail
    assert report.exit_code == 1
    assert no_worker_left() == []


def test_a_python_without_torch_fails_before_any_worker_starts(tmp_path):
    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    bare = str(tmp_path / "bare" / "bin" / "python")
    # A named cache is checked whatever the device; 0 GiB needed, so only an unreadable disk fails it.
    report = run_preflight(2, "cpu", python=bare, cache_dir=str(tmp_path / "cache"), min_free_gb=0)
    checks = {c.name: c for c in report.checks}
    assert checks["compile_cache_disk"].result == PASS
    assert f"{tmp_path / 'cache'} (from --cache-dir)" in checks["compile_cache_disk"].detail
    assert checks["workers"].result == FAIL
    assert checks["workers"].detail == f"torch is not installed in {bare}"
    assert all(checks[n].result == SKIP for n in WORKER_CHECKS)
    assert report.exit_code == 1


def test_bad_input_is_a_usage_error_naming_the_field(tmp_path):
    with pytest.raises(UsageError, match="--nproc"):
        run_preflight(0, "cpu")
    with pytest.raises(UsageError, match="--device"):
        run_preflight(1, "tpu")
    with pytest.raises(UsageError, match="--python"):
        run_preflight(1, "cpu", python=str(tmp_path / "no-such-python"))
    with pytest.raises(UsageError, match="--min-free-gb"):
        run_preflight(1, "cpu", min_free_gb=-1)


# ---- torch_xla on its CPU client ----


@slow
def test_xla_device_op_and_xla_backend_collectives_on_the_cpu_pjrt_client():
    report = run_preflight(1, "xla", env={"PJRT_DEVICE": "CPU"})
    checks = {c.name: c for c in report.checks}
    assert report.exit_code == 0, report_text(report)
    assert checks["device_op"].result == PASS
    assert "matmul on xla matches the CPU reference" in checks["device_op"].detail
    assert report.ranks[0].backend == "xla" and report.ranks[0].platform == "xla-cpu"
    for name in ("all_reduce", "all_gather", "reduce_scatter"):
        assert checks[name].result == PASS, checks[name]


# Recorded from `torchrun --nproc_per_node 2 preflight_worker.py --device xla` on this CPU host (torch_xla
# 2.9): each process's PJRT CPU client is a world of one, so the workers skip the collectives, saying why.
XLA_CPU_SKIP = (
    "torch_xla's CPU PJRT client makes each process a world of its own: xr.world_size() is 1 in each of the "
    "2 torchrun workers, so the xla backend cannot form one process group"
)


XLA_DEVICE_OP = "64x64 fp32 matmul on xla matches the CPU reference (relative error ~1e-07)"


def recorded_xla_line(rank: int, ms: float) -> str:
    checks = [{"name": "device_op", "result": "PASS", "detail": XLA_DEVICE_OP, "ms": ms}]
    checks += [{"name": n, "result": "SKIP", "detail": XLA_CPU_SKIP, "ms": None} for n in WORKER_CHECKS[1:]]
    payload = {
        "event": "result",
        "rank": rank,
        "world": 2,
        "kind": "xla",
        "backend": "xla",
        "torch": "2.9.0+cu128",
        "device": "xla:0",
        "platform": "xla-cpu",
        "checks": checks,
    }
    return MARKER + json.dumps(payload)


def test_xla_collectives_across_processes_on_the_cpu_client_are_a_skip_with_the_reason():
    output = WorkerOutput()
    for line in (
        MARKER + '{"event": "start", "rank": 1, "check": "setup"}',
        MARKER + '{"event": "start", "rank": 1, "check": "device_op"}',
        "WARNING:root:Defaulting to PJRT_DEVICE=CPU",
        recorded_xla_line(1, 232.029),
        MARKER + '{"event": "start", "rank": 0, "check": "setup"}',
        recorded_xla_line(0, 355.182),
    ):
        output.feed(line)
    merged = {c.name: c for c in merge_worker_checks(output, 2, "torchrun exited with code 0")}
    assert merged["device_op"].result == PASS and merged["device_op"].ms == 355.182
    assert merged["device_op"].detail == XLA_DEVICE_OP
    for name in WORKER_CHECKS[1:]:
        assert merged[name].result == SKIP and merged[name].detail == XLA_CPU_SKIP
    assert merged["workers"].result == PASS
    assert merged["workers"].detail.endswith("times include XLA graph compilation")


# ---- merging the ranks' lines ----


def test_a_rank_stopped_mid_run_keeps_what_it_finished_and_fails_where_it_was():
    # Rank 1 passed its device op, then torchrun stopped it inside all_gather (as when a peer's setup fails).
    output = WorkerOutput()
    for line in (
        MARKER + '{"event": "start", "rank": 1, "check": "device_op"}',
        MARKER
        + json.dumps(
            {
                "event": "check",
                "rank": 1,
                "check": {"name": "device_op", "result": "PASS", "detail": XLA_DEVICE_OP, "ms": 82.6},
            }
        ),
        MARKER + '{"event": "start", "rank": 1, "check": "all_gather"}',
        MARKER + "{not json",
        recorded_xla_line(0, 5.0),
    ):
        output.feed(line)
    merged = {c.name: c for c in merge_worker_checks(output, 2, "torchrun exited with code 1: boom")}
    assert output.malformed == 1
    assert merged["workers"].result == FAIL
    assert merged["workers"].detail == (
        "1 of 2 rank(s) reported (rank 1: was in all_gather); torchrun exited with code 1: boom"
    )
    assert merged["device_op"].result == PASS and merged["device_op"].ms == 82.6
    assert merged["device_op"].detail == XLA_DEVICE_OP
    assert merged["all_gather"].result == FAIL
    assert merged["all_gather"].detail == "rank 1: no result (it was still in all_gather)"
    assert merged["reduce_scatter"].detail == "rank 1: no result (last started all_gather)"


def test_a_check_passed_by_some_ranks_and_skipped_by_others_names_both():
    output = WorkerOutput()
    output.feed(recorded_xla_line(0, 5.0))
    skipped = [
        {"name": n, "result": "SKIP", "detail": "not run: setup failed", "ms": None} for n in WORKER_CHECKS
    ]
    output.feed(
        MARKER + json.dumps({"event": "result", "rank": 1, "error": "setup failed: x", "checks": skipped})
    )
    device_op = {c.name: c for c in merge_worker_checks(output, 2, "")}["device_op"]
    assert device_op.result == PASS
    assert device_op.detail == f"rank 0: {XLA_DEVICE_OP}; rank 1: not run: setup failed"


def test_ranks_sharing_a_detail_are_listed_as_spans():
    assert rank_span([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8"
    assert rank_span([3]) == "rank 3"
    assert by_ranks([(0, "a"), (1, "a"), (3, "b")]) == "ranks 0-1: a; rank 3: b"
    assert by_ranks([(0, "same"), (1, "same")], agreed=True) == "same"


# Recorded: torchrun 2.9's summary when one worker of two exits with code 1.
TORCHRUN_FAILURE = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/tmp/fail1.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_19:52:42
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 11797)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_torchruns_failure_summary_names_the_first_rank_to_fail():
    lines = TORCHRUN_FAILURE.splitlines()
    assert torchrun_failure(lines) == "rank 1 failed first (exit code 1)"
    killed = [line.replace("exitcode  : 1", "exitcode  : -9") for line in lines]
    assert torchrun_failure(killed) == "rank 1 failed first (killed by SIGKILL)"
    assert torchrun_failure(["Traceback (most recent call last):", "ValueError: x"]) is None


# ---- the compile cache's disk ----


def test_disk_check_passes_below_and_fails_above_the_free_space(tmp_path):
    free_gb = shutil.disk_usage(tmp_path).free / 1024**3
    cache = tmp_path / "neuron-cache"  # not created yet: measured at its parent
    ok = disk_check(str(cache), "--cache-dir", min_free_gb=max(0.0, free_gb - 1))
    assert ok.result == PASS and str(cache) in ok.detail and f"measured at {tmp_path}" in ok.detail
    short = disk_check(str(cache), "--cache-dir", min_free_gb=free_gb + 1000)
    assert short.result == FAIL
    assert f"below {free_gb + 1000:g} GiB" in short.detail and "NEURON_COMPILE_CACHE_URL" in short.detail


def test_disk_check_skips_a_remote_cache():
    check = disk_check("s3://bucket/neuron-cache", "NEURON_COMPILE_CACHE_URL", 20)
    assert check.result == SKIP and "remote" in check.detail


def test_cache_location_follows_the_neuron_precedence():
    url = {"NEURON_COMPILE_CACHE_URL": "/data/cache"}
    assert compile_cache_location({}) == ("/var/tmp/neuron-compile-cache", "the Neuron default")
    assert compile_cache_location(url) == ("/data/cache", "NEURON_COMPILE_CACHE_URL")
    flags = {**url, "NEURON_CC_FLAGS": "--model-type=transformer --cache_dir=/fast/cache -O1"}
    assert compile_cache_location(flags) == ("/fast/cache", "--cache_dir in NEURON_CC_FLAGS")
    spaced = {"NEURON_CC_FLAGS": "--retry_failed_compilation --cache_dir /home/u/neuron_cache/gpt"}
    assert compile_cache_location(spaced)[0] == "/home/u/neuron_cache/gpt"
    assert compile_cache_location(flags, override="/mine") == ("/mine", "--cache-dir")


def test_the_disk_check_applies_on_neuron_or_when_a_cache_is_named():
    assert disk_applies(explicit=False, platform="neuron", host_is_neuron=True)
    assert not disk_applies(explicit=False, platform="cpu", host_is_neuron=False)
    assert disk_applies(explicit=True, platform="cpu", host_is_neuron=False)
    assert disk_applies(explicit=False, platform=None, host_is_neuron=True)


# ---- Neuron visibility, from recorded neuron-ls output ----


@pytest.fixture
def fake_neuron_ls(monkeypatch):
    def use(recording: str) -> NeuronLs:
        monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(NEURON_DATA / recording))
        return read_neuron_ls(FAKES / "neuron-ls")

    return use


def fake_dev(tmp_path: Path, count: int) -> list[str]:
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in [*range(count), "_mon"]:
        (dev / f"neuron{i}").touch()
    (dev / "null").touch()
    return neuron_device_nodes(dev)


def test_device_nodes_are_found_in_numeric_order(tmp_path):
    assert fake_dev(tmp_path, 12)[:3] == [str(tmp_path / "dev" / f"neuron{i}") for i in (0, 1, 2)]
    assert neuron_device_nodes(tmp_path / "dev")[-1].endswith("neuron11")
    assert neuron_device_nodes(tmp_path / "missing") == []


def test_busy_neuroncores_fail_the_preflight_naming_their_holder(tmp_path, fake_neuron_ls):
    facts = fake_neuron_ls("neuron-ls-trn1-2xlarge.json")
    assert (facts.devices, facts.cores) == (1, 2)
    checks = neuron_checks("auto", 2, fake_dev(tmp_path, 1), facts, "2.9.0.2.11", "/opt/venv/bin/python")
    by = {c.name: c for c in checks}
    assert by["neuron_driver"].result == PASS
    assert by["torch_neuronx"].result == PASS and "2.9.0.2.11" in by["torch_neuronx"].detail
    assert by["neuron_ls"].result == FAIL
    assert "only 0 free for --nproc 2: pid 48213 (python3 runners/bert.py" in by["neuron_ls"].detail


def test_a_whole_trn1_32xlarge_is_the_default_process_count(tmp_path, fake_neuron_ls):
    facts = fake_neuron_ls("neuron-ls-trn1-32xlarge.json")
    idle = NeuronLs(facts.path, facts.devices, facts.cores)
    nodes = fake_dev(tmp_path, 16)
    assert default_nproc("auto", idle, "2.9.0", nodes) == 32
    assert default_nproc("cpu", idle, "2.9.0", nodes) == 2
    by = {c.name: c for c in neuron_checks("xla", 32, nodes, idle, "2.9.0", RUNNER_PY)}
    assert by["neuron_ls"].result == PASS and "16 device(s), 32 NeuronCore(s)" in by["neuron_ls"].detail
    busy = {c.name: c for c in neuron_checks("xla", 32, nodes, facts, "2.9.0", RUNNER_PY)}["neuron_ls"]
    assert busy.result == FAIL and "pid 65311 (python3 train.py --epochs 3) holds cores 30, 31" in busy.detail
    assert busy.detail.count("pid ") == 3 and "and 28 more process(es)" in busy.detail


def test_a_container_without_device_nodes_fails_when_torch_neuronx_is_there():
    facts = NeuronLs(path="/opt/aws/neuron/bin/neuron-ls", problem="neuron-ls -j exited with code 1")
    by = {c.name: c for c in neuron_checks("auto", 2, [], facts, "2.9.0", RUNNER_PY)}
    assert by["neuron_driver"].result == FAIL and "--device=/dev/neuron0" in by["neuron_driver"].detail
    assert by["neuron_ls"].result == FAIL and "exited with code 1" in by["neuron_ls"].detail


def test_missing_torch_neuronx_fails_on_a_neuron_host_unless_the_run_is_on_cpu(tmp_path):
    nodes = fake_dev(tmp_path, 1)
    facts = NeuronLs("/opt/aws/neuron/bin/neuron-ls", 1, 2)
    wanted = {c.name: c for c in neuron_checks("auto", 2, nodes, facts, None, RUNNER_PY)}["torch_neuronx"]
    assert (
        wanted.result == FAIL
        and f"torch-neuronx is not installed in {RUNNER_PY}: install it" in wanted.detail
    )
    on_cpu = {c.name: c for c in neuron_checks("cpu", 2, nodes, facts, None, RUNNER_PY)}["torch_neuronx"]
    assert on_cpu.result == SKIP and on_cpu.detail.startswith("--device cpu does not use Neuron: ")


def test_off_neuron_every_neuron_check_is_a_skip_saying_so():
    by = {c.name: c for c in neuron_checks("xla", 1, [], NeuronLs(path=None), None, RUNNER_PY)}
    assert [c.result for c in by.values()] == [SKIP, SKIP, SKIP]
    assert all(c.detail.startswith("not a Neuron host: ") for c in by.values())


@pytest.mark.slow
def test_launch_with_preflight_checks_first_and_launches_only_when_every_check_passed(
    tmp_path, monkeypatch, capsys
):
    from trnconsole.cli import main
    from trnconsole.service import Console

    monkeypatch.setenv("TRNCONSOLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    bad = ["launch", str(script), "--preflight", "--env", f"{FAULTS}=corrupt:all_reduce@0"]
    assert main(bad) == 1
    captured = capsys.readouterr()
    assert "all_reduce" in captured.out and "FAIL" in captured.out
    assert "not launched: a preflight check failed" in captured.err
    assert Console(tmp_path / "home").store.list() == []
    assert main(["launch", str(script), "--preflight", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)  # the record alone on stdout; the table went to stderr
    assert record["status"] in ("running", "completed")
