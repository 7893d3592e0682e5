"""Data parallel under a real torchrun: two CPU processes with gloo stay in sync."""

from __future__ import annotations

import pytest
from conftest import check_ok, read_events, read_result, run_torchrun

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("runner", ["bert", "gpt2", "vit"])
def test_torchrun_two_processes_keep_identical_parameters(runner, tmp_path):
    proc = run_torchrun(
        runner,
        2,
        "--synthetic",
        "--device",
        "cpu",
        "--steps",
        "6",
        "--log-every",
        "2",
        "--eval-every",
        "3",
        "--batch-size",
        "4",
        "--synthetic-samples",
        "256",
        "--output-dir",
        str(tmp_path),
    )
    check_ok(proc)
    result = read_result(tmp_path)
    assert result["world_size"] == 2 and result["global_batch"] == 8
    assert len(result["param_checksums"]) == 2
    assert result["param_checksums"][0] == result["param_checksums"][1]
    assert result["ranks_in_sync"] is True
    # Only rank 0 writes: one LOG line per logged step, one started event.
    assert proc.stdout.count(") step_loss : ") == 3
    assert [e["state"] for e in read_events(tmp_path) if e["kind"] == "status"] == ["started", "completed"]
