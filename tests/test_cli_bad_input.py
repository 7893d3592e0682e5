"""Bad input to the CLI: one clear line on stderr, exit code 2, and nothing written to the store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trnconsole.cli import main
from trnconsole.core.spec import RunSpec
from trnconsole.core.store import Store


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNCONSOLE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TRNCONSOLE_PYTHON", raising=False)
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "no-config.toml"))
    return tmp_path / "home"


def run_count(home: Path) -> int:
    if not (home / "runs.db").exists():
        return 0
    with Store(home / "runs.db") as store:
        return store.count()


def usage_error(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["launch", "bert", "--set", "synthetic=true", "--set", "batchsize=4"], "did you mean batch_size?"),
        (["launch", "bert", "--set", "synthetic=true", "--set", "steps=-2"], "steps must be > 0"),
        (["launch", "bert", "--set", "synthetic=true", "--set", "precision=fp8"], "must be one of fp32"),
        (["launch", "bert", "--set", "steps"], "expected key=value"),
        (["launch", "bert"], "no training data; add --set synthetic=true or --set data=PATH"),
        (
            ["launch", "bert", "--set", "data=/nonexistent/reviews.csv"],
            "data=/nonexistent/reviews.csv: no such file",
        ),
        (["launch", "/nonexistent/train.py"], "RUNNER /nonexistent/train.py: no such script"),
        (["launch", "bert", "--set", "synthetic=true", "--nproc", "0"], "--nproc 0"),
        (["launch", "bert", "--set", "synthetic=true", "--nnodes", "2"], "--rdzv-endpoint HOST:PORT"),
        (
            ["launch", "bert", "--set", "synthetic=true", "--env", "HF_TOKEN=abc"],
            "credentials are never stored",
        ),
        (["launch", "bert", "--set", "synthetic=true", "--metric", "tp=no-group"], "--metric"),
        (["launch", "bert", "--set", "synthetic=true", "--backend", "slurm"], "--backend slurm"),
        (["show", "deadbeef"], "run deadbeef: no run id starts with that"),
        (["stop", "deadbeef"], "run deadbeef"),
        (["logs", "x"], "run x"),
        (["compare", "nope"], "run nope"),
        (["launch", "bert", "--nprocs", "2"], "unrecognized arguments"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_run_recorded(home, capsys, argv, expected):
    err = usage_error(capsys, argv)
    assert expected in err
    assert run_count(home) == 0


def test_an_ambiguous_prefix_lists_the_candidates(home, capsys):
    store = Store(home / "runs.db")
    ids = [store.create(RunSpec(runner="bert"), lambda i: home / "runs" / i).id for _ in range(40)]
    first = next(i[0] for i in ids if sum(j[0] == i[0] for j in ids) > 1)
    err = usage_error(capsys, ["show", first])
    assert "ambiguous" in err and "type more of the id" in err
    assert run_count(home) == 40


def test_no_torchrun_anywhere_is_a_clear_error(home, capsys, tmp_path, monkeypatch):
    bare = tmp_path / "bare-env" / "bin"
    bare.mkdir(parents=True)
    (bare / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    err = usage_error(capsys, ["launch", str(script), "--python", str(bare / "python")])
    assert f"torchrun: not found beside {bare / 'python'} nor on PATH" in err
    assert run_count(home) == 0


def test_a_home_that_is_a_file_is_a_clear_error(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TRNCONSOLE_HOME", str(blocker / "home"))
    err = usage_error(capsys, ["launch", "bert", "--set", "synthetic=true"])
    assert "TRNCONSOLE_HOME" in err and "not writable" in err
