"""NeuronCore allocation as pure logic, host facts from recorded neuron-ls / neuron-monitor output, the
runner's MFU peak per NeuronCore version, and the allocator over the run store and a recorded neuron-ls."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trn_harness import device
from trnconsole.core.cores import (
    Holder,
    allocate,
    describe,
    format_cores,
    parse_cores,
    pick_range,
    ranges_that_fit,
)
from trnconsole.core.errors import UsageError
from trnconsole.core.spec import RunSpec
from trnconsole.monitors.neuron import (
    core_version_of,
    cores_per_device,
    neuron_ls,
    parse_neuron_ls,
    parse_report,
)
from trnconsole.service import Console

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "neuron"
FAKES = REPO / "tests" / "fakes"
HOST32 = tuple(range(32))


@pytest.mark.parametrize(
    "text,ids,canonical",
    [
        ("4", (4,), "4"),
        ("4-7", (4, 5, 6, 7), "4-7"),
        ("0-1,4-5", (0, 1, 4, 5), "0-1,4-5"),
        (" 3,1,2 ", (1, 2, 3), "1-3"),
    ],
)
def test_core_lists_parse_and_format_as_the_runtime_writes_them(
    text: str, ids: tuple, canonical: str
) -> None:
    assert parse_cores(text, "--cores") == ids
    assert format_cores(ids) == canonical


@pytest.mark.parametrize("text", ["", "a-b", "5-2", "-1", "0-"])
def test_a_bad_core_list_is_one_line_naming_the_field(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--cores"):
        parse_cores(text, "--cores")
    with pytest.raises(UsageError, match=r"^--env NEURON_RT_VISIBLE_CORES[=:]"):
        parse_cores(text, "--env NEURON_RT_VISIBLE_CORES")


def test_the_lowest_contiguous_free_range_is_picked() -> None:
    assert pick_range(HOST32, {0, 1, 2, 3}, 4) == (4, 5, 6, 7)
    assert pick_range(HOST32, {1, 5}, 4) == (6, 7, 8, 9)  # 0 alone and 2-4 are too short
    assert pick_range((0, 1), {0, 1}, 1) is None
    assert ranges_that_fit(HOST32, set(range(8)), 8) == 3
    assert ranges_that_fit(HOST32, {1}, 16) == 1  # 2-17 fits, nothing after it


def test_no_free_range_names_every_holder() -> None:
    holders = [Holder("run 3f2a9c1e (running)", (0,)), Holder("pid 4242 (python3 train.py)", (1,))]
    with pytest.raises(UsageError) as caught:
        allocate(None, "--cores", 1, (0, 1), holders)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("--nproc 1: no 1 free contiguous NeuronCores")
    assert "cores 0: run 3f2a9c1e (running); cores 1: pid 4242 (python3 train.py)" in line


def test_a_users_range_is_checked_for_size_host_and_holders() -> None:
    holders = [Holder("run aaaa (running)", (0, 1, 2, 3))]
    assert allocate((8, 9, 10, 11), "--cores", 4, HOST32, holders) == (8, 9, 10, 11)
    with pytest.raises(UsageError, match=r"^--cores 0-7: 8 NeuronCore\(s\) for --nproc 4; give 4"):
        allocate(tuple(range(8)), "--cores", 4, HOST32, holders)
    with pytest.raises(UsageError, match=r"^--cores 30-33: this host has NeuronCores 0-31 only"):
        allocate((30, 31, 32, 33), "--cores", 4, HOST32, holders)
    with pytest.raises(UsageError) as caught:
        allocate((2, 3, 4, 5), "--env NEURON_RT_VISIBLE_CORES", 4, HOST32, holders)
    assert str(caught.value).startswith(
        "--env NEURON_RT_VISIBLE_CORES=2-5: already held (cores 0-3: run aaaa"
    )
    assert "e.g. --env NEURON_RT_VISIBLE_CORES=4-7" in str(caught.value)
    assert describe([]) == "nobody"


# ---- host facts from recordings ----


def test_neuron_ls_of_a_trn2_lists_logical_cores_and_names_the_core_version() -> None:
    inventory = parse_neuron_ls((DATA / "neuron-ls-trn2-48xlarge.json").read_text())
    assert inventory.core_ids == (0, 1, 2, 3) and inventory.cores_per_device == 4
    assert inventory.core_version() == "v3d"  # LNC 2: two physical NeuronCore-v3 per logical core
    assert {pid: h.core_ids for pid, h in inventory.holders().items()} == {
        1966680: (0, 1, 2, 3),
        1966681: (0, 1, 2, 3),
    }


def test_neuron_ls_of_a_trn1_takes_the_core_version_from_the_host_instance_type() -> None:
    inventory = parse_neuron_ls((DATA / "neuron-ls-trn1-2xlarge-idle.json").read_text())
    assert inventory.core_ids == (0, 1) and inventory.holders() == {}
    assert inventory.core_version() is None  # this release's neuron-ls names no instance type
    assert inventory.core_version("trn1.2xlarge") == "v2"
    assert inventory.core_version("trn1n.32xlarge") == "v2"
    assert inventory.core_version("inf2.xlarge") == "v2"
    assert inventory.core_version("m5.large") is None


@pytest.mark.parametrize(
    "recording,version,per_device,device_type",
    [
        ("hardware-trn1-2xlarge.jsonl", "v2", 2, "trainium"),
        ("hardware-trn1-32xlarge-doc.jsonl", "v2", 2, "trainium"),
        ("hardware-inf2-xlarge.jsonl", "v2", 2, "inferentia2"),
        ("hardware-trn2-48xlarge-doc.jsonl", "v3d", 4, "trainium2"),
    ],
)
def test_neuron_monitor_hardware_info_gives_core_version_and_cores_per_device(
    recording: str, version: str, per_device: int, device_type: str
) -> None:
    report = parse_report((DATA / recording).read_text().splitlines()[0])
    assert report.hardware.device_type == device_type
    assert core_version_of(report.hardware) == version
    assert report.cores_per_device == cores_per_device(report.hardware) == per_device


def test_without_a_stated_version_the_device_type_answers() -> None:
    line = json.loads((DATA / "hardware-trn2-48xlarge-doc.jsonl").read_text())
    for key in ("neuroncore_version", "neuroncore_per_device_count"):
        del line["neuron_hardware_info"][key]
    hardware = parse_report(json.dumps(line)).hardware
    assert core_version_of(hardware) == "v3d" and cores_per_device(hardware) == 4


# ---- the runner's MFU peak ----


@pytest.mark.parametrize(
    "version,bf16,fp32",
    [("v2", 95.5e12, 24e12), ("v3", 83.375e12, 22.625e12), ("v3d", 166.75e12, 45.25e12)],
)
def test_the_runners_peak_follows_the_neuroncore_version(version: str, bf16: float, fp32: float) -> None:
    assert device.neuroncore_peak(version, low_precision=True) == pytest.approx(bf16)
    assert device.neuroncore_peak(version, low_precision=False) == pytest.approx(fp32)


def test_the_runner_finds_the_core_version_at_run_time(tmp_path: Path) -> None:
    absent = str(tmp_path / "absent")
    assert device.neuroncore_version({"TRNCONSOLE_NEURONCORE_VERSION": "v3d"}, absent, absent)[0] == "v3d"
    sysfs = tmp_path / "neuron0"
    (sysfs / "neuron_core0" / "info" / "architecture").mkdir(parents=True)
    (sysfs / "neuron_core0" / "info" / "architecture" / "arch_type").write_text("NCv2\n")
    assert device.neuroncore_version({}, str(sysfs), absent) == ("v2", "Neuron driver sysfs")
    device_dir = tmp_path / "inf2" / "info" / "architecture"
    device_dir.mkdir(parents=True)
    (device_dir / "arch_type").write_text("NDv3\n")  # the device generation: not the core's
    (device_dir / "device_name").write_text("Inferentia2\n")
    assert device.neuroncore_version({}, str(tmp_path / "inf2"), absent)[0] == "v2"
    target = {"NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"}
    assert device.neuroncore_version(target, absent, absent) == ("v3d", "NEURON_PLATFORM_TARGET_OVERRIDE")
    lnc1 = {**target, "NEURON_LOGICAL_NC_CONFIG": "1"}
    assert device.neuroncore_version(lnc1, absent, absent)[0] == "v3"
    dmi = tmp_path / "product_name"
    dmi.write_text("trn1n.32xlarge\n")
    assert device.neuroncore_version({}, absent, str(dmi)) == ("v2", "instance type")
    assert device.neuroncore_version({}, absent, absent) == (None, "not found")


# ---- the allocator over the store and a recorded neuron-ls ----


@pytest.fixture
def neuron_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A console whose PATH has the fake neuron-ls; returns a function that points it at a recording."""
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    console = Console(tmp_path / "home")

    def replay(devices: list[dict]) -> Console:
        path = tmp_path / "neuron-ls.json"
        path.write_text(json.dumps(devices, indent=4))
        monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", str(path))
        return console

    yield replay
    console.close()


def trn1_32xlarge_with_devices_busy(busy: int) -> list[dict]:
    """The recorded trn1.32xlarge with only its first `busy` devices still listing their processes."""
    devices = json.loads((DATA / "neuron-ls-trn1-32xlarge.json").read_text())
    for d in devices[busy:]:
        d["neuron_processes"] = []
    return devices


def test_a_neuron_ls_holders_cores_are_avoided(neuron_host) -> None:
    console = neuron_host(trn1_32xlarge_with_devices_busy(2))
    placed = console.place_on_cores(RunSpec(runner="x.py", nproc=2))
    assert placed.visible_cores == "4-5"
    with pytest.raises(UsageError) as caught:
        console.place_on_cores(RunSpec(runner="x.py", nproc=2, cores="2-3"))
    assert "cores 2-3: pid 71202 (python3 /opt/trnconsole/runners/bert.py" in str(caught.value)
    fits, holders = console.core_room(8)
    assert fits == 3 and "cores 0-1: pid 71200" in holders and "cores 2-3: pid 71203" in holders


def test_a_recorded_run_holds_its_range_until_it_ends(neuron_host) -> None:
    console = neuron_host(trn1_32xlarge_with_devices_busy(0))
    first = console.place_on_cores(RunSpec(runner="x.py", nproc=4))
    record = console.store.create(first, console.run_dir)
    assert first.visible_cores == "0-3"
    assert console.place_on_cores(RunSpec(runner="x.py", nproc=4)).visible_cores == "4-7"
    console.store.update(record.id, status="completed", ended_at=1.0)
    assert console.place_on_cores(RunSpec(runner="x.py", nproc=4)).visible_cores == "0-3"


def test_a_host_without_neuron_devices_is_left_as_today(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no neuron-ls
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setattr("trnconsole.monitors.neuron.NEURON_BIN_DIR", tmp_path)
    console = Console(tmp_path / "home")
    spec = RunSpec(runner="x.py", nproc=2)
    assert console.place_on_cores(spec) == spec
    assert console.core_room(2) is None
    with pytest.raises(UsageError, match=r"^--cores 0-1: this host has no NeuronCores .*; leave --cores out"):
        console.place_on_cores(RunSpec(runner="x.py", nproc=2, cores="0-1"))
    assert neuron_ls().problem
