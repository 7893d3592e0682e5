"""Run specs: --set checking against a runner's flag table, argv building, env rules, rerun diffs."""

from __future__ import annotations

import pytest

from trnconsole.core.errors import UsageError
from trnconsole.core.spec import (
    FlagInfo,
    RunSpec,
    check_flags,
    check_resources,
    flag_diff,
    parse_assignments,
    parse_env,
)

TABLE = [
    FlagInfo("--batch-size", "batch_size", "int", 8, constraint="positive"),
    FlagInfo("--lr", "lr", "float", None, constraint="positive"),
    FlagInfo("--warmup-steps", "warmup_steps", "int", 0, constraint="non_negative"),
    FlagInfo("--eval-fraction", "eval_fraction", "float", 0.1, constraint="fraction"),
    FlagInfo("--seed", "seed", "int", 42),
    FlagInfo("--synthetic", "synthetic", "switch", False),
    FlagInfo("--precision", "precision", "str", "fp32", choices=("fp32", "bf16", "autocast-bf16")),
    FlagInfo("--data", "data", "str", None),
    FlagInfo("--output-dir", "output_dir", "str", "output"),
]


def test_set_values_are_checked_and_keyed_by_flag_name():
    flags = check_flags(
        {"batch-size": "16", "synthetic": "yes", "precision": "bf16", "seed": "-3", "lr": "1e-4"},
        TABLE,
        "bert",
    )
    assert flags == {"batch_size": "16", "synthetic": True, "precision": "bf16", "seed": "-3", "lr": "1e-4"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"batch_sise": "4"}, "--set batch_sise: bert has no such flag; did you mean batch_size?"),
        ({"zzz": "4"}, "--set zzz: bert has no such flag; `trnconsole flags bert` lists them"),
        ({"batch_size": "four"}, "--set batch_size=four: batch_size must be an integer"),
        ({"batch_size": "0"}, "--set batch_size=0: batch_size must be > 0"),
        ({"warmup_steps": "-1"}, "--set warmup_steps=-1: warmup_steps must be >= 0"),
        ({"eval_fraction": "1.5"}, "--set eval_fraction=1.5: eval_fraction must be in [0, 1)"),
        ({"lr": "fast"}, "--set lr=fast: lr must be a number"),
        ({"synthetic": "maybe"}, "--set synthetic=maybe: synthetic is a switch; use true or false"),
        (
            {"precision": "bf61"},
            "--set precision=bf61: must be one of fp32, bf16, autocast-bf16; did you mean bf16?",
        ),
        (
            {"output_dir": "/tmp/x"},
            "--set output_dir: the console writes every run into its own run directory; leave it out",
        ),
    ],
)
def test_a_bad_set_names_the_flag_and_the_fix(raw, message):
    with pytest.raises(UsageError) as err:
        check_flags(raw, TABLE, "bert")
    assert str(err.value) == message
    assert "\n" not in str(err.value)


def test_runner_args_for_a_bundled_runner_use_dashed_flags_and_switches():
    spec = RunSpec(
        runner="bert",
        flags={"batch_size": "16", "synthetic": True, "eval_every": "0", "gone": False},
        extra_args=("--foo", "a b"),
    )
    assert spec.runner_args() == ["--batch-size", "16", "--synthetic", "--eval-every", "0", "--foo", "a b"]


def test_runner_args_for_a_foreign_script_keep_the_flag_as_typed():
    spec = RunSpec(runner="/x/train.py", flags={"per_device_train_batch_size": "8", "lr": "; rm -rf /"})
    assert spec.runner_args() == ["--per_device_train_batch_size", "8", "--lr", "; rm -rf /"]


def test_spec_round_trips_through_json():
    spec = RunSpec(
        runner="vit", flags={"synthetic": True}, extra_args=("--x",), env={"A": "1"}, metrics=("a=(\\d)",)
    )
    assert RunSpec.from_json(spec.to_json()) == spec


def test_assignments_need_key_and_equals():
    assert parse_assignments(["a=1", "b==2", "c="], "--set") == {"a": "1", "b": "=2", "c": ""}
    with pytest.raises(UsageError, match="--set 'novalue': expected key=value"):
        parse_assignments(["novalue"], "--set")


def test_credentials_never_enter_a_spec():
    assert parse_env(["NEURON_RT_LOG_LEVEL=INFO"]) == {"NEURON_RT_LOG_LEVEL": "INFO"}
    for key in ("AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "DB_PASSWORD", "AWS_ACCESS_KEY_ID"):
        with pytest.raises(UsageError, match=f"--env {key}: credentials are never stored"):
            parse_env([f"{key}=x"])
    with pytest.raises(UsageError, match="not a valid environment variable name"):
        parse_env(["1BAD=x"])


def test_multi_node_needs_a_rendezvous_endpoint():
    check_resources(8, 2, 1, "10.0.0.5:29500")
    with pytest.raises(UsageError, match="--rdzv-endpoint HOST:PORT"):
        check_resources(8, 2, 0, None)
    with pytest.raises(UsageError, match="expected HOST:PORT"):
        check_resources(8, 2, 0, "10.0.0.5")
    with pytest.raises(UsageError, match="--node-rank 2: must be in"):
        check_resources(8, 2, 2, "h:1")
    with pytest.raises(UsageError, match="--nproc 0"):
        check_resources(0, 1, 0, None)


def test_rerun_diff_lists_changed_added_and_removed_flags():
    parent = RunSpec(runner="bert", flags={"batch_size": "8", "synthetic": True, "lr": "1e-3"}, nproc=1)
    child = RunSpec(runner="bert", flags={"batch_size": "16", "synthetic": True, "seed": "1"}, nproc=2)
    assert flag_diff(parent, child) == {
        "batch_size": ["8", "16"],
        "lr": ["1e-3", None],
        "seed": [None, "1"],
        "nproc": [1, 2],
    }
