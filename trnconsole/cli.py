"""The `trnconsole` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trnconsole",
        description="Launch, watch, compare and rerun PyTorch/XLA training jobs on Trainium, GPUs and CPUs.",
    )
    parser.add_argument("--version", action="version", version=f"trnconsole {__version__}")
    sub = parser.add_subparsers(dest="command")
    runners = sub.add_parser("runners", help="list the bundled training runners and their scripts")
    runners.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "runners":
        return list_runners(args.json)
    parser.print_help()
    return 0


def list_runners(as_json: bool) -> int:
    from .resources import BUNDLED_RUNNERS, runner_script

    rows = [{"runner": name, "script": str(runner_script(name))} for name in BUNDLED_RUNNERS]
    if as_json:
        print(json.dumps(rows, indent=1))
    else:
        for row in rows:
            print(f"{row['runner']:<6} {row['script']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
