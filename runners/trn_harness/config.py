"""Command-line flags shared by the bundled runners, and their validation before any device work.

This module imports nothing heavy, so `--flags-json` and every bad-input error answer in milliseconds.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from . import rundir
from .errors import UsageError
from .ranks import rank_from_env

DEVICES = ("auto", "xla", "cuda", "cpu")
PRECISIONS = ("fp32", "bf16", "autocast-bf16")
NEURON_AUTO_CAST = ("none", "matmult", "all")
LR_SCHEDULES = ("linear", "cosine", "constant")
MODEL_SIZES = ("tiny", "small", "base")
DEFAULT_STEPS = 100


class Switch(argparse.Action):
    """An on/off flag: `--synthetic` alone, or with a word (`--synthetic true`), which is how SageMaker's
    training toolkit passes a boolean hyperparameter (`--synthetic True`)."""

    WORDS: ClassVar[dict[str, bool]] = {
        **dict.fromkeys(("true", "1", "yes", "on"), True),
        **dict.fromkeys(("false", "0", "no", "off"), False),
    }

    def __init__(self, option_strings: Sequence[str], dest: str, default: bool = False, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs="?", const=True, default=default, **kwargs)

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        if isinstance(value, str):
            word = self.WORDS.get(value.strip().lower())
            if word is None:
                parser.error(f"{option_string} {value}: expected true or false, or the flag alone")
            value = word
        setattr(namespace, self.dest, value)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1), got {text!r}")
    return value


class RunnerArgumentParser(argparse.ArgumentParser):
    """argparse that reports every mistake on one line and suggests the nearest flag for a typo."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")

    lr_by_size: dict[str, float]

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):  # type: ignore[override]
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.error(self._describe_unknown(unknown))
        if getattr(parsed, "lr", 0) is None:
            parsed.lr = self.lr_by_size[parsed.model_size]
        return parsed

    def known_flags(self) -> list[str]:
        return [s for action in self._actions for s in action.option_strings if s.startswith("--")]

    def _describe_unknown(self, unknown: list[str]) -> str:
        first = next((u for u in unknown if u.startswith("-")), unknown[0])
        flag = first.split("=", 1)[0]
        if not flag.startswith("-"):
            return f"unexpected argument {first!r}; runner flags look like --name value (see --help)"
        close = difflib.get_close_matches(flag, self.known_flags(), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else "; see --help for the flags"
        return f"unknown flag {flag}{hint}"


@dataclass(frozen=True)
class RunnerDefaults:
    """The per-model defaults a runner passes to `build_parser`."""

    lr_by_size: dict[str, float]  # peak learning rate per --model-size preset
    batch_size: int = 8
    seq_len: int | None = 128  # None: the model takes no text
    images: bool = False
    num_labels: int | None = 2  # None: not a classifier


def build_parser(
    prog: str,
    description: str,
    defaults: RunnerDefaults,
    add_model_flags: Callable[[argparse.ArgumentParser], None] | None = None,
) -> RunnerArgumentParser:
    p = RunnerArgumentParser(prog=prog, description=description, allow_abbrev=False)
    p.lr_by_size = defaults.lr_by_size
    g = p.add_argument_group("schedule")
    g.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help=f"optimizer steps to run in total (default {DEFAULT_STEPS} unless --epochs is given)",
    )
    g.add_argument(
        "--epochs",
        type=positive_int,
        default=None,
        help="passes over the training data (with --steps, whichever ends first)",
    )
    g.add_argument(
        "--batch-size",
        type=positive_int,
        default=defaults.batch_size,
        help="samples per device per micro-batch",
    )
    g.add_argument("--grad-accum", type=positive_int, default=1, help="micro-batches per optimizer step")
    sizes = ", ".join(f"{size} {lr:g}" for size, lr in defaults.lr_by_size.items())
    g.add_argument(
        "--lr", type=positive_float, default=None, help=f"peak learning rate of AdamW (default: {sizes})"
    )
    g.add_argument("--warmup-steps", type=non_negative_int, default=0, help="linear warm-up steps")
    g.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="linear", help="decay after warm-up")
    g.add_argument("--weight-decay", type=non_negative_float, default=0.01)
    g.add_argument(
        "--max-grad-norm",
        type=non_negative_float,
        default=1.0,
        help="clip the global gradient norm to this (0 turns clipping off)",
    )
    g.add_argument("--seed", type=int, default=42)

    g = p.add_argument_group("model")
    g.add_argument(
        "--model-size",
        choices=MODEL_SIZES,
        default="tiny",
        help="preset shapes; base is the real published model's shape",
    )
    g.add_argument(
        "--model-path",
        default=None,
        help="local Hugging Face model directory (config, weights, tokenizer); nothing is downloaded",
    )
    if defaults.seq_len is not None:
        g.add_argument(
            "--seq-len",
            type=positive_int,
            default=defaults.seq_len,
            help="tokens per sample; every batch is padded to it (static shapes)",
        )
    if defaults.images:
        g.add_argument(
            "--image-size",
            type=positive_int,
            default=None,
            help="images are resized to this square size (default: the model size's own)",
        )
    if defaults.num_labels is not None:
        g.add_argument(
            "--num-labels", type=positive_int, default=defaults.num_labels, help="number of classes"
        )

    g = p.add_argument_group("data")
    g.add_argument("--synthetic", action=Switch, help="train on generated, learnable data")
    g.add_argument("--data", default=None, help="local training data file or directory")
    g.add_argument("--eval-data", default=None, help="local evaluation data (default: a held-out fraction)")
    g.add_argument(
        "--eval-fraction",
        type=fraction,
        default=0.1,
        help="fraction of --data held out for evaluation when --eval-data is not given",
    )
    g.add_argument("--synthetic-samples", type=positive_int, default=2048, help="size of the synthetic set")
    g.add_argument("--num-workers", type=non_negative_int, default=0, help="DataLoader worker processes")

    g = p.add_argument_group("device and precision")
    g.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="auto picks Neuron (torch-neuronx present), then CUDA, then CPU",
    )
    g.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="bf16 casts the model; autocast-bf16 runs matmuls in bf16 under torch.autocast",
    )
    g.add_argument(
        "--neuron-auto-cast",
        choices=NEURON_AUTO_CAST,
        default="none",
        help="the Neuron compiler's own auto-cast to bf16 (--auto-cast in NEURON_CC_FLAGS)",
    )
    g.add_argument("--compiler-flags", default="", help="extra neuronx-cc flags appended to NEURON_CC_FLAGS")
    g.add_argument(
        "--batches-per-execution",
        type=positive_int,
        default=1,
        help="batches the XLA device loader moves to the device per execution",
    )
    g.add_argument(
        "--device-prefetch-size",
        type=positive_int,
        default=8,
        help="batches the XLA device loader keeps on the device",
    )

    g = p.add_argument_group("outputs")
    g.add_argument("--output-dir", default="output", help="metrics.jsonl, tb/, checkpoints/, result.json")
    g.add_argument("--log-every", type=positive_int, default=10, help="steps between metric lines")
    g.add_argument(
        "--eval-every",
        type=non_negative_int,
        default=0,
        help="steps between evaluations (0: evaluate once at the end)",
    )
    g.add_argument(
        "--eval-batches",
        type=non_negative_int,
        default=0,
        help="evaluation batches per evaluation (0: the whole evaluation set)",
    )
    g.add_argument(
        "--save-every", type=non_negative_int, default=0, help="steps between checkpoints (0: none)"
    )
    g.add_argument("--keep-checkpoints", type=positive_int, default=3, help="newest checkpoints kept")
    g.add_argument(
        "--resume",
        default=None,
        help="checkpoint file to resume from, or 'auto' for the newest in --output-dir",
    )
    p.add_argument(
        "--flags-json",
        action="store_true",
        help="print this runner's flags as JSON and exit (used by the console)",
    )
    if add_model_flags is not None:
        add_model_flags(p.add_argument_group("model-specific"))
    return p


# The checking types above as (value type, constraint) for the console's own `--set` checks.
_CHECKED_TYPES = {
    "positive_int": ("int", "positive"),
    "non_negative_int": ("int", "non_negative"),
    "positive_float": ("float", "positive"),
    "non_negative_float": ("float", "non_negative"),
    "fraction": ("float", "fraction"),
}


def flags_as_json(parser: argparse.ArgumentParser) -> str:
    """Every flag with its type, default and choices, for forms and `--set` checks in the console."""
    flags = []
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if not longs or longs[0] in ("--help", "--flags-json"):
            continue
        constraint = None
        if isinstance(action, (argparse._StoreTrueAction, Switch)):
            kind = "switch"
        else:
            kind = {int: "int", float: "float", str: "str", None: "str"}.get(action.type, "")
            if not kind:
                kind, constraint = _CHECKED_TYPES[action.type.__name__]
        flags.append(
            {
                "flag": longs[0],
                "name": action.dest,
                "type": kind,
                "default": action.default,
                "choices": list(action.choices) if action.choices else None,
                "constraint": constraint,
                "help": action.help or "",
            }
        )
    return json.dumps(flags, indent=1)


def validate(args: argparse.Namespace) -> None:
    """Check all that needs no device; raise UsageError on the first problem."""
    if args.synthetic and args.data:
        raise UsageError("--synthetic and --data both given; choose one source of training data")
    if not args.synthetic and not args.data:
        raise UsageError("no training data; pass --synthetic or --data PATH")
    for flag, value in (("--data", args.data), ("--eval-data", args.eval_data)):
        if value and not Path(value).exists():
            raise UsageError(f"{flag} {value}: no such file or directory")
    if args.model_path:
        model_dir = Path(args.model_path)
        if not (model_dir / "config.json").is_file():
            raise UsageError(
                f"--model-path {model_dir}: no config.json there; pass a local Hugging Face model directory"
            )
    if args.resume and args.resume != "auto" and not Path(args.resume).is_file():
        raise UsageError(f"--resume {args.resume}: no such checkpoint file; pass a path or 'auto'")
    if args.device == "xla":
        require_torch_xla()
    output = Path(args.output_dir)
    rundir.check_writable(output)
    if rank_from_env() == 0:
        rundir.claim(output)
    if os.environ.get("XLA_USE_BF16") or os.environ.get("XLA_DOWNCAST_BF16"):
        print(
            "warning: XLA_USE_BF16/XLA_DOWNCAST_BF16 are deprecated in torch-neuronx; "
            "use --precision bf16 or autocast-bf16 instead",
            file=sys.stderr,
        )


def model_dir_config(args: argparse.Namespace) -> dict:
    """The local model directory's config.json ({} without --model-path)."""
    if not args.model_path:
        return {}
    return json.loads((Path(args.model_path) / "config.json").read_text())


def require_torch_xla() -> None:
    if importlib.util.find_spec("torch_xla") is None:
        raise UsageError(
            "--device xla needs torch_xla, which is not installed; "
            "pip install torch-xla (torch-neuronx on trn1) or pick --device cpu|cuda"
        )


def torch_neuronx_present() -> bool:
    return importlib.util.find_spec("torch_neuronx") is not None


def resolve_steps(args: argparse.Namespace, batches_per_epoch: int) -> tuple[int, int]:
    """(total optimizer steps, optimizer steps per epoch) from --steps/--epochs and the data size."""
    steps_per_epoch = batches_per_epoch // args.grad_accum
    if steps_per_epoch < 1:
        raise UsageError(
            f"one epoch has {batches_per_epoch} batches, fewer than --grad-accum {args.grad_accum}; "
            "lower --grad-accum or --batch-size, or add data"
        )
    if args.epochs and args.steps:
        return min(args.steps, args.epochs * steps_per_epoch), steps_per_epoch
    if args.epochs:
        return args.epochs * steps_per_epoch, steps_per_epoch
    return args.steps or DEFAULT_STEPS, steps_per_epoch
