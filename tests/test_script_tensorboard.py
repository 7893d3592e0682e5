"""Where a launched script's TensorBoard files are found: TRNCONSOLE_RUN_DIR in every job's environment,
`--tb DIR` kept with the run, and a Hugging Face Trainer's <output_dir>/runs/<date>_<host> read by
`trnconsole tb RUN` and the console's TensorBoard screen."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli_local import cli_env, launched_id, ok
from test_tb_reader import scalar_records

from trnconsole.commands.tensorboard import logdir_args
from trnconsole.core.errors import UsageError
from trnconsole.core.spec import RunSpec, flag_values
from trnconsole.monitors.tensorboard import LogDirReader, LogRoot, WalkLimits, run_log_roots

TRAINER_SCRIPT = '''
"""A tiny Hugging Face Trainer job: a 2-layer BERT built from its config (nothing downloaded), random ids."""
import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RandomIds(torch.utils.data.Dataset):
    def __init__(self, n):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 100, (n, 16), generator=generator)
        self.labels = torch.randint(0, 2, (n,), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


parser = argparse.ArgumentParser()
parser.add_argument("--output_dir", required=True)
args = parser.parse_args()
config = BertConfig(
    vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
)
training = TrainingArguments(
    output_dir=args.output_dir,
    max_steps=6,
    per_device_train_batch_size=8,
    logging_steps=1,
    report_to="tensorboard",
    save_strategy="no",
    use_cpu=True,
    disable_tqdm=True,
)
Trainer(model=BertForSequenceClassification(config), args=training, train_dataset=RandomIds(64)).train()
'''

# Prints where it was told its run directory is, and writes TensorBoard scalars wherever --events-dir says.
LOGS_SCRIPT = """
import argparse, os
from torch.utils.tensorboard import SummaryWriter
parser = argparse.ArgumentParser()
parser.add_argument("--events-dir", required=True)
args = parser.parse_args()
print("run dir:", os.environ["TRNCONSOLE_RUN_DIR"], flush=True)
writer = SummaryWriter(os.path.join(args.events_dir, "job"))
for step in range(4):
    writer.add_scalar("val/acc", step / 4, step)
writer.close()
"""


REPO = Path(__file__).resolve().parents[1]


def run_cli(home: Path, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """The CLI started in `cwd` (a run's working directory is where it was launched), on this checkout."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "trnconsole.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=cli_env(home, PYTHONPATH=path, **env),
    )


def event_file(path: Path, records: int = 2, tags: tuple[str, ...] = ("loss", "lr")) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(scalar_records(records, tags)))
    return path


def script_spec(tmp_path: Path, **fields) -> RunSpec:
    return RunSpec(runner=str(tmp_path / "train.py"), cwd=str(tmp_path / "work"), **fields)


# ---- where a run's event files may be ----


def test_flag_values_reads_both_spellings_in_both_forms() -> None:
    argv = ["--output_dir", "out", "--lr", "1", "--logging-dir=logs", "--output-dir", "--x", "--output_dir="]
    assert flag_values(argv, ("output_dir", "output-dir", "logging_dir", "logging-dir")) == ["out", "logs"]


def test_a_scripts_run_is_looked_for_in_its_run_dir_its_tb_dir_and_its_trainer_directories(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "home" / "runs" / "abc"
    spec = script_spec(
        tmp_path,
        flags={"output_dir": "out"},
        extra_args=("--logging-dir=logs/tb",),
        env={"TENSORBOARD_LOGGING_DIR": "~/tb5"},
        tb_dir="/abs/tb",
    )
    roots = run_log_roots(spec, run_dir, since=100.0)
    work = tmp_path / "work"
    assert roots == [
        LogRoot(run_dir),
        LogRoot(Path("/abs/tb"), "/abs/tb", 100.0),
        LogRoot(work / "out", "out", 100.0),
        LogRoot(work / "logs" / "tb", "logs/tb", 100.0),
        LogRoot(Path("~/tb5").expanduser(), "~/tb5", 100.0),
    ]
    # The same directory named twice is looked at once.
    twice = script_spec(tmp_path, flags={"output_dir": "out"}, tb_dir=str(work / "out"))
    assert [r.label for r in run_log_roots(twice, run_dir)] == [".", str(work / "out")]


def test_a_bundled_run_is_read_from_its_tb_dir_and_a_remote_one_from_its_run_dir_only(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_log_roots(RunSpec(runner="bert", tb_dir="elsewhere", cwd=str(tmp_path)), run_dir) == [
        LogRoot(run_dir / "tb"),
        LogRoot(tmp_path / "elsewhere", "elsewhere"),
    ]
    remote = script_spec(tmp_path, backend="sagemaker", flags={"output_dir": "/opt/ml/model"})
    assert run_log_roots(remote, run_dir) == [LogRoot(run_dir)]


def test_a_shared_output_dir_shows_only_the_directories_written_since_the_run_began(tmp_path: Path) -> None:
    out = tmp_path / "out"
    old = event_file(out / "runs" / "Jan01_old" / "events.out.tfevents.1", 3)
    os.utime(old, (1000.0, 1000.0))
    new = out / "runs" / "Nov24_new"
    event_file(new / "events.out.tfevents.2", 2, ("acc",))
    reader = LogDirReader([LogRoot(tmp_path / "run"), LogRoot(out, "out", since=2000.0)], limits=WalkLimits())
    reader.poll()
    assert set(reader.scalars) == {("out/runs/Nov24_new", "acc")}
    assert reader.run_dirs() == [("out/runs/Nov24_new", new)]


def test_a_directory_reached_from_two_roots_is_read_once_under_the_first(tmp_path: Path) -> None:
    event_file(tmp_path / "run" / "out" / "events.out.tfevents.1", 2)
    reader = LogDirReader(
        [LogRoot(tmp_path / "run"), LogRoot(tmp_path / "run" / "out", "out")], limits=WalkLimits()
    )
    new = reader.poll()
    assert set(new) == {("out", "loss"), ("out", "lr")} and len(reader.run_dirs()) == 1
    assert sum(map(len, new.values())) == 2


def test_a_huge_directory_is_looked_through_within_limits_and_that_is_said(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / "big" / f"d{i:02d}").mkdir(parents=True)
    event_file(tmp_path / "big" / "a" / "events.out.tfevents.1", 1)
    deep = tmp_path / "big" / "b" / "1" / "2" / "3" / "4"
    event_file(deep / "events.out.tfevents.1", 1)
    event_file(tmp_path / "big" / ".hidden" / "events.out.tfevents.1", 1)
    reader = LogDirReader([LogRoot(tmp_path / "big", "big")], limits=WalkLimits(depth=4, dirs=10))
    reader.poll()
    assert [run for run, _ in reader.run_dirs()] == ["big/a"]  # not too deep, not hidden
    assert reader.cut_short == reader.roots and "too many directories" in reader.walk_notes[0]
    roomy = LogDirReader([LogRoot(tmp_path / "big", "big")], limits=WalkLimits(depth=5, dirs=100))
    assert [run for run, _ in roomy.run_dirs()] == ["big/a", "big/b/1/2/3/4"] and not roomy.cut_short


def test_tensorboard_is_given_each_place_of_a_run_named_as_the_console_names_it(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.data_ingester import _parse_event_files_spec

    run_dir, out = tmp_path / "run", tmp_path / "work" / "out"
    event_file(out / "runs" / "Nov24_host" / "events.out.tfevents.1", 1)
    event_file(tmp_path / "odd:name" / "events.out.tfevents.1", 1)
    assert logdir_args([LogRoot(run_dir)]) == ["--logdir", str(run_dir)]
    args = logdir_args([LogRoot(run_dir), LogRoot(out, "out"), LogRoot(tmp_path / "odd:name", "/x:y")])
    assert args[0] == "--logdir_spec"
    assert _parse_event_files_spec(args[1]) == {
        os.path.realpath(run_dir): "run",
        os.path.realpath(out / "runs" / "Nov24_host"): "out/runs/Nov24_host",
        os.path.realpath(tmp_path / "odd:name"): "x_y",
    }


def test_tb_is_refused_for_a_remote_backend(tmp_path: Path) -> None:
    from trnconsole.service import Console

    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    with pytest.raises(UsageError, match=r"^--tb logs: names a directory on this host; a batch job"):
        Console(tmp_path / "home").build_spec(str(script), backend="batch", tb_dir="logs")


# ---- launched for real ----


@pytest.mark.slow
def test_a_local_job_gets_its_run_dir_and_its_tb_dir_is_kept_shown_read_and_rerun(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    script = tmp_path / "logs.py"
    script.write_text(LOGS_SCRIPT)
    out = ok(
        run_cli(
            home,
            "launch",
            str(script),
            "--tb",
            "mylogs",
            "--follow",
            "--",
            "--events-dir",
            "mylogs",
            cwd=work,
        )
    )
    run_id = launched_id(out)
    record = json.loads(ok(run_cli(home, "show", run_id, "--json")))
    run_dir = record["run_dir"]
    assert record["status"] == "completed" and record["spec"]["tb_dir"] == "mylogs"
    assert f"run dir: {run_dir}\n" in (Path(run_dir) / "stdout.log").read_text()
    shown = re.search(r"^tb dir +(.+)$", ok(run_cli(home, "show", run_id)), re.MULTILINE)
    assert shown and shown.group(1) == str(work / "mylogs")

    found = json.loads(ok(run_cli(home, "tb", run_id, "--json")))
    (row,) = found["scalars"]
    assert (row["run"], row["tag"], row["count"]) == ("mylogs/job", "val/acc", 4)
    assert found["roots"] == [{"run": ".", "path": run_dir}, {"run": "mylogs", "path": str(work / "mylogs")}]

    rerun = launched_id(ok(run_cli(home, "rerun", run_id, "--follow")))
    child = json.loads(ok(run_cli(home, "show", rerun, "--json")))
    assert child["spec"]["tb_dir"] == "mylogs" and child["spec"]["cwd"] == str(work)
    assert "tb_dir" not in (child["diff"] or {})
    assert f"run dir: {child['run_dir']}\n" in (Path(child["run_dir"]) / "stdout.log").read_text()


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A Trainer job launched with `trnconsole launch SCRIPT -- --output_dir out`, finished; its output
    directory already held an older job's event files."""
    root = tmp_path_factory.mktemp("trainer")
    home, work = root / "home", root / "work"
    old = event_file(work / "out" / "runs" / "Jan01_00-00-00_old" / "events.out.tfevents.1", 3)
    os.utime(old, (1000.0, 1000.0))
    script = root / "train.py"
    script.write_text(TRAINER_SCRIPT)
    started = time.monotonic()
    out = run_cli(
        home,
        "launch",
        str(script),
        "--env",
        "USE_TORCH_XLA=0",  # the CPU, where torch-xla is installed too
        "--env",
        "OMP_NUM_THREADS=1",
        "--follow",
        "--",
        "--output_dir",
        "out",
        cwd=work,
    )
    ok(out)
    print(f"Trainer job launched and done in {time.monotonic() - started:.1f} s")
    return home, launched_id(out.stdout), work


@pytest.mark.slow
def test_the_tb_command_finds_a_trainer_jobs_scalars_under_its_output_dir(trainer_run) -> None:
    home, run_id, _ = trainer_run
    found = json.loads(ok(run_cli(home, "tb", run_id, "--json")))
    runs = {row["run"] for row in found["scalars"]}
    (run,) = runs  # the older job's directory is not this run's
    assert run.startswith("out/runs/") and not run.endswith("_old")
    loss = next(row for row in found["scalars"] if row["tag"] == "train/loss")
    assert (loss["count"], loss["first_step"], loss["last_step"]) == (6, 1, 6)
    assert found["problems"] == []


@pytest.mark.slow
def test_the_console_charts_a_trainer_jobs_scalars(trainer_run, monkeypatch, tmp_path) -> None:
    from test_ui_app import make_app
    from test_ui_tensorboard import open_tensorboard

    home, _, _ = trainer_run
    monkeypatch.setenv("TRNCONSOLE_HOME", str(home))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "config.toml"))

    async def scenario() -> None:
        app = make_app(home)
        async with app.run_test(size=(120, 36)) as pilot:
            table = await open_tensorboard(pilot, app, lambda t: t.row_count > 0)
            rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
            loss = next(r for r in rows if r[1] == "train/loss")
            assert loss[0].startswith("out/runs/") and loss[2:4] == ["6", "1-6"]

    asyncio.run(scenario())
