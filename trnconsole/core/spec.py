"""The run spec (what to run, where, with which flags) and its validation against a runner's own flags.

Validation is pure: the caller supplies the runner's flag table (`--flags-json` of a bundled runner), so
every message here is testable without a process.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError

BUNDLED = ("bert", "gpt2", "vit")
BACKENDS = ("local", "sagemaker", "batch", "k8s")
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
# Flags the console sets itself for a bundled runner.
CONSOLE_OWNED = {"output_dir": "the console writes every run into its own run directory"}
# Environment variable names that carry credentials: they never enter a spec, the store or a log.
SECRET_ENV = re.compile(r"(SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY)", re.IGNORECASE)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class FlagInfo:
    """One flag of a bundled runner, as its `--flags-json` describes it."""

    flag: str
    name: str
    type: str  # "int", "float", "str" or "switch"
    default: Any = None
    choices: tuple[str, ...] | None = None
    constraint: str | None = None  # "positive", "non_negative" or "fraction"
    help: str = ""

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> FlagInfo:
        choices = row.get("choices")
        return cls(
            flag=row["flag"],
            name=row["name"],
            type=row.get("type") or "str",
            default=row.get("default"),
            choices=tuple(str(c) for c in choices) if choices else None,
            constraint=row.get("constraint"),
            help=row.get("help") or "",
        )


@dataclass(frozen=True)
class RunSpec:
    """Everything needed to start a run, and to start it again."""

    runner: str  # "bert", "gpt2", "vit" or the absolute path of a training script
    flags: dict[str, str | bool] = field(default_factory=dict)  # flag name (as given) -> value or switch
    extra_args: tuple[str, ...] = ()  # after `--`, passed verbatim
    env: dict[str, str] = field(default_factory=dict)
    backend: str = "local"
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    name: str | None = None
    python: str | None = None  # the runner's interpreter (on trn1: the Neuron virtualenv's)
    cwd: str | None = None  # where the run starts, so a script's relative paths mean what they meant
    metrics: tuple[str, ...] = ()  # user metric regexes, "name=REGEX"
    backend_options: dict[str, str] = field(default_factory=dict)
    # NeuronCores the user asked for (`--cores`, or NEURON_RT_VISIBLE_CORES in env); None: any free range.
    cores: str | None = None
    # What the launch gave a local run on a Neuron host: NEURON_RT_VISIBLE_CORES and the NeuronCore version.
    visible_cores: str | None = None
    core_version: str | None = None
    # Where the script writes TensorBoard event files (`--tb`), as given; relative to cwd.
    tb_dir: str | None = None

    @property
    def bundled(self) -> bool:
        return self.runner in BUNDLED

    @property
    def runner_label(self) -> str:
        return self.runner if self.bundled else self.runner.rsplit("/", 1)[-1]

    def runner_args(self) -> list[str]:
        """The runner's argv after the script: flags as `--name value` items, then the extra arguments."""
        args: list[str] = []
        for key, value in self.flags.items():
            flag = "--" + (key.replace("_", "-") if self.bundled else key)
            if value is True:
                args.append(flag)
            elif value is False:
                continue
            else:
                args += [flag, str(value)]
        return [*args, *self.extra_args]

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["extra_args"] = list(self.extra_args)
        data["metrics"] = list(self.metrics)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["extra_args"] = tuple(values.get("extra_args", ()))
        values["metrics"] = tuple(values.get("metrics", ()))
        return cls(**values)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


def parse_assignments(items: Iterable[str], option: str) -> dict[str, str]:
    """`key=value` items of a repeatable option; UsageError naming the option on a bad item."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{option} {item!r}: expected key=value, e.g. {option} batch_size=16")
        result[key] = value
    return result


def parse_env(items: Iterable[str]) -> dict[str, str]:
    env = parse_assignments(items, "--env")
    for key in env:
        if not ENV_NAME.match(key):
            raise UsageError(f"--env {key}: not a valid environment variable name; use letters, digits and _")
        if SECRET_ENV.search(key):
            raise UsageError(
                f"--env {key}: credentials are never stored with a run; export {key} in the shell "
                "that starts trnconsole instead (local jobs inherit it)"
            )
    return env


def check_flags(raw: Mapping[str, str], schema: Sequence[FlagInfo], runner: str) -> dict[str, str | bool]:
    """Check `--set` values against a bundled runner's flags; return them keyed by flag name."""
    by_name: dict[str, FlagInfo] = {}
    for info in schema:
        by_name[info.name] = info
        by_name[info.flag.lstrip("-")] = info
    checked: dict[str, str | bool] = {}
    for key, value in raw.items():
        info = by_name.get(key.lstrip("-"))
        if info is None:
            names = sorted({i.name for i in schema})
            close = difflib.get_close_matches(key.lstrip("-").replace("-", "_"), names, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else f"; `trnconsole flags {runner}` lists them"
            raise UsageError(f"--set {key}: {runner} has no such flag{hint}")
        if info.name in CONSOLE_OWNED:
            raise UsageError(f"--set {info.name}: {CONSOLE_OWNED[info.name]}; leave it out")
        checked[info.name] = check_value(info, value)
    return checked


def check_value(info: FlagInfo, value: str) -> str | bool:
    """The value as the runner will receive it; UsageError naming the flag and what it accepts."""
    text = value.strip()
    where = f"--set {info.name}={value}"
    if info.type == "switch":
        if text.lower() in TRUE_WORDS:
            return True
        if text.lower() in FALSE_WORDS:
            return False
        raise UsageError(f"{where}: {info.name} is a switch; use true or false")
    if info.choices is not None:
        if text not in info.choices:
            close = difflib.get_close_matches(text, info.choices, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise UsageError(f"{where}: must be one of {', '.join(info.choices)}{hint}")
        return text
    if info.type == "int":
        try:
            number: float = int(text)
        except ValueError:
            raise UsageError(f"{where}: {info.name} must be an integer") from None
    elif info.type == "float":
        try:
            number = float(text)
        except ValueError:
            raise UsageError(f"{where}: {info.name} must be a number") from None
    else:
        return value
    bounds = {
        "positive": (number > 0, "> 0"),
        "non_negative": (number >= 0, ">= 0"),
        "fraction": (0 <= number < 1, "in [0, 1)"),
    }
    if info.constraint in bounds and not bounds[info.constraint][0]:
        raise UsageError(f"{where}: {info.name} must be {bounds[info.constraint][1]}")
    return text


def check_resources(
    nproc: int, nnodes: int, node_rank: int, rdzv_endpoint: str | None, backend: str = "local"
) -> None:
    if nproc < 1:
        raise UsageError(f"--nproc {nproc}: must be a positive integer (processes per node)")
    if nnodes < 1:
        raise UsageError(f"--nnodes {nnodes}: must be a positive integer")
    if not 0 <= node_rank < nnodes:
        raise UsageError(f"--node-rank {node_rank}: must be in [0, {nnodes}) for --nnodes {nnodes}")
    if nnodes > 1 and backend == "local":  # remote platforms place the nodes and their rendezvous
        if not rdzv_endpoint:
            raise UsageError(
                f"--nnodes {nnodes}: multi-node torchrun needs --rdzv-endpoint HOST:PORT "
                "(the same on every node, e.g. node 0's address)"
            )
        host, _, port = rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(f"--rdzv-endpoint {rdzv_endpoint}: expected HOST:PORT, e.g. 10.0.0.5:29500")


def flag_diff(parent: RunSpec, child: RunSpec) -> dict[str, list[Any]]:
    """What a rerun changed: {field or flag: [old, new]}, flags under their names."""
    diff: dict[str, list[Any]] = {}
    for key in sorted(set(parent.flags) | set(child.flags)):
        old, new = parent.flags.get(key), child.flags.get(key)
        if old != new:
            diff[key] = [old, new]
    names = (
        "env",
        "nproc",
        "nnodes",
        "extra_args",
        "backend",
        "python",
        "metrics",
        "backend_options",
        "cores",
        "tb_dir",
    )
    for name in names:
        old, new = getattr(parent, name), getattr(child, name)
        if old != new:
            diff[name] = [_plain(old), _plain(new)]
    return diff


def flag_text(value: str | bool) -> str:
    """A flag value as `--set` takes it: switches as true/false."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def flag_values(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """The values of `--name VALUE` and `--name=VALUE` items of an argv, for each of `names`, in order."""
    values = []
    for i, item in enumerate(argv):
        if not item.startswith("--"):
            continue
        name, eq, value = item[2:].partition("=")
        if name not in names:
            continue
        if eq:
            values.append(value)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            values.append(argv[i + 1])
    return [value for value in values if value]


# A script's output directory flag, in both spellings HfArgumentParser accepts (a Trainer's checkpoints,
# trainer_state.json and, by default, its TensorBoard runs/ go there).
OUTPUT_DIR_FLAGS = ("output_dir", "output-dir")


def script_dirs(spec: RunSpec, names: Sequence[str] = OUTPUT_DIR_FLAGS) -> list[Path]:
    """The directories a local script was told to write to with these flags, relative to its working
    directory; none for a bundled runner or a remote job (whose directories are in its container)."""
    if spec.bundled or spec.backend != "local":
        return []
    cwd = Path(spec.cwd or ".")
    return [cwd / Path(text).expanduser() for text in flag_values(spec.runner_args(), names)]
