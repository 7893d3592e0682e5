"""The output directory under many ranks and several runs: every rank starts, one run at a time holds it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RUNNERS, check_ok, read_events, read_result, run_runner, run_torchrun, runner_env

pytestmark = pytest.mark.slow

TINY_BERT = ["--device", "cpu", "--model-size", "tiny", "--batch-size", "2", "--seq-len", "16"]


def labelled_text(path: Path, rows: int = 64) -> Path:
    words = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "far", "away", "from", "home"]
    lines = ["text,label"]
    for i in range(rows):
        sentence = " ".join(words[(i + k) % len(words)] for k in range(6))
        lines.append(f"{sentence},{i % 2}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_eight_ranks_sharing_a_new_output_dir_all_finish_five_times_in_a_row(tmp_path):
    """Eight ranks create the directory, check it is writable, train and save a tokenizer and take the run
    lock at the same moment: each of five runs must have all eight ranks exit 0."""
    data = labelled_text(tmp_path / "train.csv")
    for attempt in range(5):
        out = tmp_path / f"attempt-{attempt}" / "out"  # does not exist yet: every rank races to create it
        proc = run_torchrun(
            "bert", 8, *TINY_BERT, "--data", str(data), "--steps", "2", "--eval-every", "0",
            "--log-every", "1", "--output-dir", str(out),
        )  # fmt: skip
        check_ok(proc)
        result = read_result(out)
        assert result["world_size"] == 8 and result["ranks_in_sync"] is True, f"attempt {attempt}"
        assert (out / "tokenizer.json").is_file()
        assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp") or ".write-test" in p.name]


def test_a_second_run_on_a_directory_in_use_is_refused_in_one_line_and_the_first_goes_on(tmp_path):
    out = tmp_path / "out"
    first = subprocess.Popen(
        [sys.executable, str(RUNNERS / "bert.py"), *TINY_BERT, "--synthetic", "--steps", "100000",
         "--log-every", "1", "--eval-every", "0", "--output-dir", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=runner_env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not _steps(out):
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline, "the first run wrote no step"
            time.sleep(0.5)

        second = run_runner("bert", *TINY_BERT, "--synthetic", "--steps", "2", "--output-dir", str(out))
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert "--output-dir" in lines[0] and "in use by another run" in lines[0]
        assert f"pid {first.pid} " in lines[0]

        before = _steps(out)
        time.sleep(2)
        assert first.poll() is None
        assert _steps(out) > before  # the first run kept going
        assert [e["state"] for e in read_events(out) if e["kind"] == "status"] == ["started"]
    finally:
        first.terminate()
        first.wait(timeout=60)

    # Its holder gone, the directory is free again.
    check_ok(run_runner("bert", *TINY_BERT, "--synthetic", "--steps", "2", "--output-dir", str(out)))


def _steps(out: Path) -> int:
    metrics = out / "metrics.jsonl"
    return metrics.read_text().count('"kind": "step"') if metrics.exists() else 0


RANK_SCRIPT = """
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from trn_harness import ranks
value = ranks.made_once("probe", lambda: f"made by pid {os.getpid()}", Path(sys.argv[2]))
# A file per rank: lines the ranks print on one shared pipe can interleave.
Path(sys.argv[3], f"rank-{os.environ['RANK']}.txt").write_text(f"pid {os.getpid()} got {value}")
"""


def test_a_value_made_once_by_rank_zero_reaches_every_rank_through_torchrun(tmp_path):
    script = tmp_path / "made_once.py"
    script.write_text(RANK_SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
         str(script), str(RUNNERS), str(tmp_path / "never-written"), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=runner_env(OMP_NUM_THREADS="1"),
    )  # fmt: skip
    check_ok(proc)
    got = [(tmp_path / f"rank-{rank}.txt").read_text().split() for rank in range(4)]
    maker = got[0][1]  # rank 0's own pid
    assert [words[2:] for words in got] == [["got", "made", "by", "pid", maker]] * 4
    assert len({words[1] for words in got}) == 4  # four processes


def test_without_torchrun_the_other_ranks_read_the_file_rank_zero_publishes(tmp_path, monkeypatch):
    from trn_harness import ranks
    from trn_harness.errors import UsageError

    for name in ("TORCHELASTIC_USE_AGENT_STORE", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    published = tmp_path / "tokenizer.json"

    def never_called() -> str:
        raise AssertionError("only rank 0 makes the value")

    with pytest.raises(UsageError, match=r"did not appear within 0\.3 s; put --output-dir on a file system"):
        ranks.made_once("tokenizer", never_called, published, wait_s=0.3)
    published.write_text('{"made": "by rank 0"}')
    assert ranks.made_once("tokenizer", never_called, published, wait_s=0.3) == '{"made": "by rank 0"}'

    monkeypatch.setenv("RANK", "0")
    assert ranks.made_once("tokenizer", lambda: "fresh", published) == "fresh"
