"""Sweeps: the grid, its variants and their table; a real sweep of two local runs through the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trnconsole.cli import main
from trnconsole.core.errors import UsageError
from trnconsole.core.sweep import Sweep, expand, load_sweeps, parse_grid, sweep_rows


def test_grid_expands_with_the_first_key_varying_slowest() -> None:
    grid = parse_grid(["batch_size=8,16", "precision=fp32,bf16"])
    assert expand(grid) == [
        {"batch_size": "8", "precision": "fp32"},
        {"batch_size": "8", "precision": "bf16"},
        {"batch_size": "16", "precision": "fp32"},
        {"batch_size": "16", "precision": "bf16"},
    ]


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["batch_size"], r"^--grid 'batch_size': expected key=v1,v2,..."),
        (["batch_size=8,,16"], r"^--grid 'batch_size=8,,16': expected key=v1,v2"),
        (["batch_size=8", "batch_size=16"], r"^--grid batch_size: given twice"),
        (["lr=1,1"], r"^--grid 'lr=1,1': a value is repeated$"),
        ([], r"^sweep: no --grid given"),
    ],
)
def test_a_bad_grid_is_one_line_naming_the_item(items: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_grid(items)


def test_rows_carry_speedup_against_the_first_variant_and_pending_ones() -> None:
    variants = expand(parse_grid(["batch_size=8,16,32"]))
    summaries = [
        {"id": "a", "status": "completed", "avg_samples_per_s": 100.0, "final_loss": 0.5, "compile_count": 3},
        {"id": "b", "status": "completed", "avg_samples_per_s": 150.0, "final_loss": 0.6, "compile_count": 3},
        None,
    ]
    rows = sweep_rows(variants, summaries)
    assert [r["speedup"] for r in rows] == [1.0, 1.5, None]
    assert rows[2]["status"] == "pending" and rows[1]["run"] == "b"


def test_sweeps_are_saved_and_listed_newest_first(tmp_path) -> None:
    old = Sweep.new("bert", parse_grid(["steps=1,2"]), [])
    old.created_at -= 10
    new = Sweep.new("gpt2", parse_grid(["steps=3"]), ["synthetic=true"])
    for sweep in (old, new):
        sweep.save(tmp_path)
    (tmp_path / "broken.json").write_text("{")
    assert [s.id for s in load_sweeps(tmp_path)] == [new.id, old.id]
    assert load_sweeps(tmp_path)[0].runs == [None]


# A training script whose throughput depends on its batch size, so the table's speed-up is known.
SCRIPT = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--batch_size", type=int)
p.add_argument("--steps", type=int)
a = p.parse_args()
for step in range(1, a.steps + 1):
    fields = f"step_loss : {1.0 / step:.4f} throughput : {a.batch_size * 10.0}"
    print(f"LOG Sun Nov 22 07:42:44 2026 - (0, {step}) " + fields)
"""


@pytest.mark.slow
def test_a_sweep_runs_each_variant_and_prints_the_table(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRNCONSOLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    code = main(["sweep", str(script), "--grid", "batch_size=8,16", "--steps", "5", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    rows = out["rows"]
    assert [r["variant"] for r in rows] == [{"batch_size": "8"}, {"batch_size": "16"}]
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert [r["samples_per_s"] for r in rows] == [80.0, 160.0]
    assert rows[1]["speedup"] == pytest.approx(2.0)
    assert rows[0]["final_loss"] == pytest.approx(0.2)
    # The runs are ordinary runs, named after the sweep; the table can be printed again later.
    assert main(["sweep", "--show", out["sweep"]]) == 0
    table = capsys.readouterr().out
    assert "BATCH_SIZE" in table and "2.00x" in table
    assert main(["runs", "--json"]) == 0
    names = sorted(r["name"] for r in json.loads(capsys.readouterr().out))
    assert names == [f"sweep {out['sweep']} batch_size=16", f"sweep {out['sweep']} batch_size=8"]


def test_a_swept_flag_also_set_and_a_bad_value_are_refused_before_anything_runs(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("TRNCONSOLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert main(["sweep", str(script), "--grid", "batch_size=8,16", "--set", "batch_size=4"]) == 2
    assert "--grid batch_size: also given with --set" in capsys.readouterr().err
    assert main(["sweep", str(script), "--grid", "batch_size=8", "--parallel", "0"]) == 2
    assert "--parallel 0: must be at least 1" in capsys.readouterr().err
    assert main(["sweep", "--show", "nope"]) == 2
    assert "--show nope: no sweep matches" in capsys.readouterr().err
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())


def recorded_trn1_32xlarge(tmp_path, busy_devices: int) -> str:
    """The recorded trn1.32xlarge neuron-ls output with only its first `busy_devices` devices in use."""
    data = Path(__file__).resolve().parent / "data" / "neuron" / "neuron-ls-trn1-32xlarge.json"
    devices = json.loads(data.read_text())
    for device in devices[busy_devices:]:
        device["neuron_processes"] = []
    path = tmp_path / f"neuron-ls-{busy_devices}-busy.json"
    path.write_text(json.dumps(devices, indent=4))
    return str(path)


@pytest.mark.parametrize("busy,nproc,parallel", [(4, 8, 3), (0, 8, 4), (0, 32, 1), (15, 2, 1)])
def test_parallel_auto_fits_as_many_variants_as_the_free_neuroncores_hold(
    tmp_path, monkeypatch, busy: int, nproc: int, parallel: int
) -> None:
    from trnconsole.cli import build_parser
    from trnconsole.commands.sweep import plan_sweep
    from trnconsole.service import Console

    fakes = Path(__file__).resolve().parent / "fakes"
    monkeypatch.setenv("PATH", f"{fakes}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NEURON_LS_FIXTURE", recorded_trn1_32xlarge(tmp_path, busy))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    args = build_parser().parse_args(
        ["sweep", str(script), "--grid", "batch_size=1,2,3,4", "--nproc", str(nproc), "--parallel", "auto"]
    )
    console = Console(tmp_path / "home")
    try:
        assert plan_sweep(console, args)[2] == parallel
        args.parallel = "4"  # a number asked for is held to the ranges that fit as well
        assert plan_sweep(console, args)[2] == parallel
        args.parallel = "auto"
        if busy == 15:  # device 15 (cores 30-31) is the only one free: one variant of 2 cores at a time
            args.nproc = 4
            with pytest.raises(
                UsageError, match=r"^--parallel auto: no 4 free contiguous NeuronCores .*pid 71200"
            ):
                plan_sweep(console, args)
    finally:
        console.close()


@pytest.mark.slow
def test_the_sweeps_screen_starts_a_sweep_in_its_own_process_and_tables_it(tmp_path, monkeypatch) -> None:
    import asyncio

    from test_ui_app import make_app, settle, text_of, wait_until
    from textual.widgets import DataTable, Input

    from trnconsole.ui.screens.sweep import SweepScreen

    home = tmp_path / "home"
    monkeypatch.setenv("TRNCONSOLE_HOME", str(home))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)

    async def scenario() -> None:
        app = make_app(home)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot, app)
            await pilot.press("w")
            await wait_until(pilot, app, lambda: isinstance(app.screen, SweepScreen), timeout=20)
            await wait_until(pilot, app, lambda: "no sweeps yet" in text_of(app, "#sweep-status"), timeout=20)
            await pilot.press("n")
            box = app.screen.query_one("#sweep-args", Input)
            box.value = f"{script} --grid batch_size=8,16 --grid bogus"
            await pilot.press("enter")
            await wait_until(
                pilot, app, lambda: "--grid 'bogus'" in text_of(app, "#sweep-status"), timeout=30
            )
            box.value = f"{script} --grid batch_size=8,16 --steps 5"
            await pilot.press("enter")
            table = app.screen.query_one(DataTable)

            def both_done() -> bool:
                return table.row_count == 2 and "2/2 variants ended" in text_of(app, "#sweep-status")

            await wait_until(pilot, app, both_done, timeout=120)
            cells = [table.get_row_at(i) for i in range(2)]
            assert [c[0] for c in cells] == ["8", "16"]
            assert [c[2] for c in cells] == ["completed", "completed"]
            assert cells[1][4] == "2.00x"

    asyncio.run(scenario())
