"""The Neuron source: neuron-monitor reports parsed from recorded lines, the monitor run as a real process
(a fake neuron-monitor replaying those lines), neuron-ls inventories and stopping leftover processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from trnconsole.monitors import neuron
from trnconsole.monitors.neuron import (
    NO_DRIVER,
    NeuronHistory,
    NeuronMonitor,
    kill_leftover,
    leftovers,
    missing_text,
    model_growth,
    monitor_config,
    neuron_ls,
    parse_report,
    runtimes_for,
)

REPO = Path(__file__).resolve().parents[1]
FAKES = REPO / "tests" / "fakes"
DATA = REPO / "tests" / "data" / "neuron"
GIB = 1 << 30


def lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def reports(name: str) -> list[neuron.NeuronReport]:
    return [parse_report(line) for line in lines(name)]


@pytest.fixture
def fakes_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NEURON_MONITOR_PERIOD", "0.02")
    for name in ("FAKE_NEURON_MONITOR_LOOP", "FAKE_NEURON_MONITOR_IGNORE_TERM"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_neuron_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(neuron, "NEURON_BIN_DIR", tmp_path / "no-neuron-bin")


# --- parsing recorded reports ------------------------------------------------------------------------------


def test_trn1_2xlarge_report_reads_every_group() -> None:
    report = reports("trn1-2xlarge.jsonl")[1]
    assert report.problems == () and report.driver_visible
    (rt,) = report.runtimes
    assert (rt.pid, rt.tag, rt.error, rt.tag_is_default) == (48213, "3fa9c21e", "", False)
    assert {i: c.utilization for i, c in rt.cores.items()} == {0: 87.31, 1: 85.94}
    assert rt.cores[0].tflops == pytest.approx(41.82)
    assert rt.core_memory[0] == neuron.CoreMemory(
        constants=4194304,
        model_code=168427520,
        model_shared_scratchpad=33554432,
        runtime_memory=67108864,
        tensors=8 * GIB,
    )
    assert rt.device_bytes == sum(m.total for m in rt.core_memory.values()) == 17726439424
    assert rt.host_memory == neuron.HostMemory(application_memory=612368384, dma_buffers=4194304)
    assert rt.host_bytes == rt.host_memory.total == 616562688
    assert rt.model_count == 2
    assert rt.loaded_models[0].uuid == "2b28572e7dd811edb0250e0372b2eb59"
    assert rt.loaded_models[0].name.endswith("MODULE_13190871343506053659+4eda8c4b/model.neff")
    assert rt.execution["completed"] == 38 and rt.execution["timed_out"] == 0
    assert sum(rt.errors.values()) == 0 and set(rt.errors) >= {"generic", "numerical", "hardware"}
    assert (
        rt.total_latency is not None and rt.total_latency.p50 == 0.0262 and rt.total_latency.p99 == 0.031702
    )
    assert rt.device_latency is not None and rt.device_latency.p50 == 0.023842
    assert (rt.vcpu_user, rt.vcpu_system) == (21.4, 3.2)

    system = report.system
    assert system.vcpu_average["user"] == pytest.approx(17.99) and system.vcpu_average["system"] == 2.94
    assert (system.vcpu_count, system.context_switches) == (8, 85801)
    assert (system.memory_total, system.memory_used, system.swap_total) == (33117732864, 11338436608, 0)
    assert system.ecc == (neuron.EccCounters(device=0),)
    assert report.instance.instance_type == "trn1.2xlarge"
    assert report.instance.instance_id == "i-01db7a16f4c054239"
    assert (report.instance.region, report.instance.availability_zone) == ("us-west-2", "us-west-2d")
    assert report.hardware == neuron.HardwareInfo(
        device_count=1,
        cores_per_device=2,
        device_memory_size=32 * GIB,
        device_type="trainium",
        device_version="v2",
        core_version="v2",
        logical_neuroncore_config=1,
    )
    assert report.device_memory() == {0: rt.core_memory[0].plus(rt.core_memory[1])}


def test_latency_is_unknown_for_a_period_in_which_nothing_ran() -> None:
    (rt,) = reports("trn1-2xlarge.jsonl")[0].runtimes
    assert rt.execution["completed"] == 0
    assert rt.total_latency is None and rt.device_latency is None


def test_busy_trn1_32xlarge_has_one_runtime_per_core() -> None:
    report = reports("trn1-32xlarge-busy.jsonl")[0]
    assert len(report.runtimes) == 32
    assert [rt.pid for rt in report.runtimes] == list(range(71200, 71232))
    totals = report.core_totals()
    assert sorted(totals) == list(range(32))
    assert all(t.pids == (71200 + i,) for i, t in totals.items())
    assert totals[0].utilization == 71.5 and totals[0].flops == pytest.approx(33.6765e12)
    assert all(t.flops is not None and t.flops > 0 for t in totals.values())
    per_device = report.device_memory()
    assert sorted(per_device) == list(range(16))
    assert per_device[7].tensors == 2 * 12 * GIB
    assert report.device_bytes == sum(m.total for m in per_device.values())
    ecc = {e.device: e for e in report.system.ecc or ()}
    assert len(ecc) == 16
    assert (ecc[5].mem_corrected, ecc[5].sram_corrected, ecc[5].uncorrected) == (3, 1, 0)
    assert sum(e.corrected for d, e in ecc.items() if d != 5) == 0
    assert (report.hardware.device_count, report.hardware.cores_per_device) == (16, 2)
    assert report.instance.instance_type == "trn1.32xlarge"
    assert report.system.vcpu_count == 128
    assert reports("trn1-32xlarge-busy.jsonl")[1].system.ecc[5].mem_corrected == 4


def test_runtimes_for_matches_a_run_by_tag_and_by_pid() -> None:
    report = reports("trn1-32xlarge-busy.jsonl")[0]
    by_tag = runtimes_for(report, "r-busy32", [])
    assert [rt.pid for rt in by_tag] == list(range(71200, 71230))
    untagged = [rt for rt in report.runtimes if rt.tag_is_default]
    assert [(rt.pid, rt.tag) for rt in untagged] == [(71230, "71230"), (71231, "71231")]
    assert len(runtimes_for(report, "r-busy32", {71230, 71231})) == 32
    assert [rt.pid for rt in runtimes_for(report, "r-other", iter([71231]))] == [71231]
    # A run id made of digits does not claim the process whose pid it spells.
    assert runtimes_for(report, "71230", []) == []


def test_old_sdk_report_has_utilization_only() -> None:
    report = reports("old-sdk.jsonl")[0]
    (rt,) = report.runtimes
    assert rt.tag_is_default and rt.label == "runtime pid 1337"
    assert rt.cores[0].utilization == pytest.approx(1.3631567613356375) and rt.cores[1].utilization == 0
    assert all(c.flops is None and c.tflops is None for c in rt.cores.values())
    assert rt.execution == {} and rt.errors == {} and rt.total_latency is None
    assert rt.vcpu_user is None and rt.vcpu_system is None
    assert rt.core_memory[0].model_shared_scratchpad == 0 and rt.core_memory[0].model_code == 101125344
    assert rt.device_bytes == 102298328 and rt.host_bytes == 610705408
    assert report.system.ecc is None
    assert report.hardware.device_memory_size is None and report.hardware.device_type is None
    assert report.cores_per_device == 2
    assert report.core_totals()[0].flops is None
    assert report.problems == ()


def test_effective_flops_is_read_as_flops() -> None:
    text = lines("trn1-2xlarge.jsonl")[1].replace('"flops":', '"effective_flops":')
    (rt,) = parse_report(text).runtimes
    assert rt.cores[0].flops == 41820000000000


def test_no_driver_report_names_the_problem_and_its_fix() -> None:
    report = reports("no-driver.jsonl")[0]
    assert report.runtimes == () and not report.driver_visible
    assert report.problems == (NO_DRIVER,)
    assert "driver is not visible in this container" in NO_DRIVER and "--privileged" in NO_DRIVER
    assert report.system.ecc is None and report.system.memory_total == 33110204416
    assert report.core_totals() == {} and report.device_bytes == 0


def test_an_idle_host_is_not_a_missing_driver() -> None:
    data = json.loads(lines("trn1-2xlarge.jsonl")[0])
    data["neuron_runtime_data"] = []
    report = parse_report(json.dumps(data))
    assert report.driver_visible and report.problems == ()


def test_group_errors_are_surfaced() -> None:
    data = json.loads(lines("trn1-2xlarge.jsonl")[1])
    data["neuron_runtime_data"][0]["report"]["memory_used"]["error"] = "failed to read memory stats"
    data["neuron_runtime_data"].append({"pid": 5120, "neuron_runtime_tag": "5120", "error": "runtime gone"})
    data["system_data"]["vcpu_usage"] = {"error": "not supported in a container"}
    report = parse_report(json.dumps(data))
    assert report.problems == (
        "runtime pid 48213 tag 3fa9c21e: memory_used: failed to read memory stats",
        "runtime pid 5120: runtime gone",
        "system vcpu_usage: not supported in a container",
    )
    assert report.runtimes[1].error == "runtime gone" and report.runtimes[1].cores == {}
    assert report.system.vcpu_average == {}


@pytest.mark.parametrize("line", ["", "not json", "[1, 2]", "null", '"text"', lines("malformed.jsonl")[1]])
def test_a_line_that_is_not_a_json_object_is_a_value_error(line: str) -> None:
    with pytest.raises(ValueError):
        parse_report(line)


def test_odd_field_types_read_as_unknown() -> None:
    odd = {
        "neuron_runtime_data": [
            {
                "pid": "x",
                "report": {
                    "neuroncore_counters": {
                        "neuroncores_in_use": {"a": 1, "0": {"neuroncore_utilization": "hi"}}
                    }
                },
            },
            "not a runtime",
        ],
        "system_data": [],
        "instance_info": None,
        "neuron_hardware_info": {"neuron_device_count": True},
    }
    report = parse_report(json.dumps(odd))
    (rt,) = report.runtimes
    assert rt.pid is None and rt.tag == "" and rt.cores == {0: neuron.CoreSample(0, None, None)}
    assert report.hardware.device_count is None and report.instance.instance_type is None


# --- loaded models and history -----------------------------------------------------------------------------


def test_loaded_model_growth_is_reported_once() -> None:
    small = reports("trn1-2xlarge.jsonl")
    (grown,) = model_growth(small)
    assert (grown.pid, grown.tag, grown.previous, grown.current) == (48213, "3fa9c21e", 2, 3)
    (name,) = grown.new_models
    assert "MODULE_4471083902214398317" in name and name.endswith(".neff")
    # A model unloaded and loaded again is not a new compilation.
    assert len(list(model_growth([small[0], small[2], small[1], small[3]]))) == 1
    assert len(list(model_growth(small, warmup_reports=1))) == 1
    assert list(model_growth(small, warmup_reports=2)) == []


def test_history_keeps_the_last_reports_per_core_and_runtime() -> None:
    history = NeuronHistory(maxlen=3)
    for report in reports("trn1-2xlarge.jsonl"):
        history.add(report)
    assert len(history) == 3 and history.cores() == [0, 1]
    assert history.utilization(0) == [87.31, 62.05, 89.62]
    assert history.utilization(5) == [0.0, 0.0, 0.0]
    assert history.runtimes() == [(48213, "3fa9c21e")]
    assert history.model_counts((48213, "3fa9c21e")) == [2, 3, 3]


# --- the monitor, running the fake neuron-monitor ----------------------------------------------------------


def test_missing_neuron_monitor_gives_a_status_not_an_exception(
    no_neuron_tools: None, tmp_path: Path
) -> None:
    assert missing_text("neuron-monitor") == (
        f"neuron-monitor not found: install aws-neuronx-tools (it lives in {neuron.NEURON_BIN_DIR})"
    )
    monitor = NeuronMonitor()
    assert monitor.start() is False
    assert monitor.status == missing_text("neuron-monitor")
    assert monitor.pid is None and monitor.latest is None
    monitor.stop()
    explicit = NeuronMonitor(executable=tmp_path / "nowhere" / "neuron-monitor")
    assert not explicit.start()
    assert explicit.status.startswith(
        f"neuron-monitor not found at {tmp_path}/nowhere/neuron-monitor: install"
    )


def test_install_hint_names_the_neuron_tools_directory() -> None:
    assert missing_text("neuron-monitor") == (
        "neuron-monitor not found: install aws-neuronx-tools (it lives in /opt/aws/neuron/bin)"
    )


def test_monitor_reads_reports_and_skips_a_malformed_line(
    fakes_on_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NEURON_MONITOR_FIXTURE", str(DATA / "malformed.jsonl"))
    with NeuronMonitor() as monitor:
        assert monitor.running and monitor.pid is not None
        monitor.wait_for_reports(4, timeout_s=10)  # only 3 good lines: returns when the replay ends
        assert monitor.exit_reason == "neuron-monitor exited with code 0"
        assert (monitor.reports, monitor.malformed) == (3, 1)
        assert monitor.status == "neuron-monitor exited with code 0"
        assert monitor.latest is not None and monitor.latest.runtimes[0].cores[0].utilization == 89.62
        assert monitor.history.utilization(0) == [0.0, 87.31, 89.62]
        assert [(g.previous, g.current) for g in monitor.take_model_growth()] == [(2, 3)]
        assert monitor.take_model_growth() == []


def test_stop_leaves_no_process(fakes_on_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NEURON_MONITOR_FIXTURE", str(DATA / "trn1-2xlarge.jsonl"))
    monkeypatch.setenv("FAKE_NEURON_MONITOR_LOOP", "1")
    monitor = NeuronMonitor(history_len=5)
    assert monitor.start()
    pid = monitor.pid
    assert monitor.wait_for_reports(7, timeout_s=10)
    assert monitor.status.startswith("neuron-monitor: ") and "report(s)" in monitor.status
    assert len(monitor.history) == 5  # bounded
    config = next(Path(a) for a in psutil.Process(pid).cmdline() if a.endswith(".json"))
    assert json.loads(config.read_text()) == monitor_config(1)
    monitor.stop()
    assert not psutil.pid_exists(pid)
    assert not config.exists()
    assert monitor.status == "neuron-monitor: stopped" and monitor.exit_reason is None
    assert not monitor.running
    monitor.stop()  # twice is fine


def test_stop_kills_a_monitor_that_ignores_sigterm(
    fakes_on_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NEURON_MONITOR_FIXTURE", str(DATA / "trn1-2xlarge.jsonl"))
    monkeypatch.setenv("FAKE_NEURON_MONITOR_LOOP", "1")
    monkeypatch.setenv("FAKE_NEURON_MONITOR_IGNORE_TERM", "1")
    monitor = NeuronMonitor(stop_timeout_s=0.3)
    assert monitor.start() and monitor.wait_for_reports(1, timeout_s=10)
    pid = monitor.pid
    monitor.stop()
    assert not psutil.pid_exists(pid)


def test_exit_reason_keeps_the_last_stderr_line(fakes_on_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NEURON_MONITOR_FIXTURE", "/nonexistent/reports.jsonl")
    with NeuronMonitor() as monitor:
        assert not monitor.wait_for_reports(1, timeout_s=10)
        assert monitor.exit_reason is not None
        assert monitor.exit_reason.startswith(
            "neuron-monitor exited with code 1: neuron-monitor: no recorded"
        )
        assert monitor.status == monitor.exit_reason


def test_monitor_stops_at_interpreter_exit(fakes_on_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NEURON_MONITOR_FIXTURE", str(DATA / "trn1-2xlarge.jsonl"))
    monkeypatch.setenv("FAKE_NEURON_MONITOR_LOOP", "1")
    script = (
        "from trnconsole.monitors.neuron import NeuronMonitor\n"
        "m = NeuronMonitor()\n"
        "assert m.start() and m.wait_for_reports(1, 10)\n"
        "print(m.pid, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout)
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(pid)


def test_fake_neuron_monitor_rejects_a_config_without_the_groups(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"period": "1s", "neuron_runtimes": [{"tag_filter": ".*", "metrics": []}]}))
    done = subprocess.run([str(FAKES / "neuron-monitor"), "-c", str(config)], capture_output=True, text=True)
    assert done.returncode == 2 and "neuroncore_counters" in done.stderr


# --- neuron-ls and leftover processes ----------------------------------------------------------------------


def test_neuron_ls_trn1_2xlarge(fakes_on_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(DATA / "neuron-ls-trn1-2xlarge.json"))
    inventory = neuron_ls()
    assert inventory.problem is None and inventory.core_count == 2
    (device,) = inventory.devices
    assert (device.index, device.bdf, device.cpu_affinity, device.numa_node) == (
        0,
        "0000:00:1e.0",
        "0-7",
        "-1",
    )
    assert (device.connected_to, device.nc_count, device.memory_size) == ((), 2, 32 * GIB)
    assert device.core_ids == (0, 1) and device.logical_neuroncore_config == 1
    (proc,) = device.processes
    assert (proc.pid, proc.runtime_version) == (48213, "2.21.41.0")
    assert leftovers(inventory, [48213]) == []


def test_neuron_ls_trn1_32xlarge_finds_the_leftover(
    fakes_on_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(DATA / "neuron-ls-trn1-32xlarge.json"))
    inventory = neuron_ls()
    assert len(inventory.devices) == 16 and inventory.core_count == 32
    assert inventory.devices[0].connected_to == (12, 3, 4, 1)
    assert inventory.devices[9].numa_node == "1" and inventory.devices[9].core_ids == (18, 19)
    assert len(inventory.holders()) == 31
    (left,) = leftovers(inventory, range(71200, 71230))
    assert (left.pid, left.devices, left.core_ids) == (65311, (15,), (30, 31))
    assert left.command == "python3 train.py --epochs 3"


def test_missing_neuron_ls_gives_a_status_not_an_exception(no_neuron_tools: None) -> None:
    inventory = neuron_ls()
    assert inventory.devices == () and inventory.problem == missing_text("neuron-ls")


def test_neuron_ls_failures_are_texts(
    fakes_on_path: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(tmp_path / "absent.json"))
    failed = neuron_ls(FAKES / "neuron-ls")
    assert failed.devices == () and failed.problem is not None
    assert failed.problem.startswith("neuron-ls -j exited with code 1: neuron-ls (fake): no recorded output")
    (tmp_path / "bad.json").write_text('{"neuron_device": 0}')
    monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(tmp_path / "bad.json"))
    assert "expected a list of devices" in (neuron_ls(FAKES / "neuron-ls").problem or "")


def _listing(path: Path, pid: int | None) -> None:
    procs = (
        [] if pid is None else [{"pid": pid, "command": "sleep 60", "neuron_runtime_version": "2.21.41.0"}]
    )
    device = {"neuron_device": 0, "nc_count": 2, "neuroncore_ids": [0, 1], "neuron_processes": procs}
    path.write_text(json.dumps([device]))


def _start_in_own_session(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE, text=True)


def test_kill_leftover_stops_a_listed_process_group(
    fakes_on_path: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    proc = _start_in_own_session("sleep", "60")
    try:
        _listing(tmp_path / "ls.json", proc.pid)
        monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(tmp_path / "ls.json"))
        outcome = kill_leftover(proc.pid, grace_s=5)
        assert (outcome.action, outcome.pgid) == ("terminated", proc.pid)
        assert proc.wait(timeout=5) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


def test_kill_leftover_escalates_to_sigkill(
    fakes_on_path: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = _start_in_own_session(sys.executable, "-c", stubborn)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        _listing(tmp_path / "ls.json", proc.pid)
        monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(tmp_path / "ls.json"))
        assert kill_leftover(proc.pid, grace_s=0.3).action == "killed"
        assert proc.wait(timeout=5) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_kill_leftover_refuses_a_pid_no_longer_listed(
    fakes_on_path: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    proc = _start_in_own_session("sleep", "60")
    try:
        _listing(tmp_path / "ls.json", None)
        monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(tmp_path / "ls.json"))
        outcome = kill_leftover(proc.pid, grace_s=0.1)
        assert outcome.action == "refused" and "no longer holds a NeuronCore" in outcome.message
        monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(tmp_path / "absent.json"))
        assert kill_leftover(proc.pid, grace_s=0.1).action == "refused"
        time.sleep(0.1)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
