"""`trnconsole sweep`: every variant of a flag grid launched (one after another, or side by side where the
accelerator has room), then the table of throughput, speed-up, final loss and compiles."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ..core.errors import UsageError
from ..core.sweep import Sweep, expand, load_sweeps, parse_grid, sweep_rows, variant_label
from ..textfmt import duration, json_text, number, table

POLL_S = 1.0


def sweeps_dir(console: Any) -> Any:
    return console.home / "sweeps"


def cmd_sweep(args: argparse.Namespace, console_factory: Any) -> int:
    console = console_factory()
    if args.show:
        sweep = find_sweep(console, args.show)
        return print_table(console, sweep, sys.stdout, args.json)
    sweep, specs, parallel = plan_sweep(console, args)
    sweep.save(sweeps_dir(console))
    out = sys.stdout
    if not args.json:
        how = "one after another" if parallel == 1 else f"{parallel} side by side"
        out.write(f"sweep {sweep.id}: {len(specs)} variants of {args.runner}, {how}\n")
        out.flush()
    try:
        run_variants(console, sweep, specs, parallel, out, quiet=args.json)
    except KeyboardInterrupt:
        running = [r for r in sweep.runs if r]
        out.write(
            f"\nsweep {sweep.id}: no more variants started; runs already started go on "
            f"({', '.join(running)}). The table so far: trnconsole sweep --show {sweep.id}\n"
        )
        return 130
    return print_table(console, sweep, out, args.json)


def plan_sweep(console: Any, args: argparse.Namespace) -> tuple[Sweep, list[Any], int]:
    """The sweep, every variant's checked spec and how many run at once; UsageError before anything starts."""
    from ..cli import backend_options

    if not args.runner:
        raise UsageError("sweep: give a RUNNER (bert, gpt2, vit or a script), or --show SWEEP")
    grid = parse_grid(args.grid)
    sets = list(args.set) + ([f"steps={args.steps}"] if args.steps is not None else [])
    fixed = {item.partition("=")[0].strip() for item in sets}
    for key, _ in grid:
        if key in fixed:
            raise UsageError(
                f"--grid {key}: also given with --set; a swept flag takes its values from the grid"
            )
    variants = expand(grid)
    sweep = Sweep.new(args.runner, grid, sets)
    # Every variant is checked before the first one starts: a typo in the last value costs nothing.
    specs = [
        console.build_spec(
            args.runner,
            [*sets, *(f"{k}={v}" for k, v in variant.items())],
            args.env,
            backend=args.backend,
            nproc=args.nproc,
            nnodes=args.nnodes,
            node_rank=args.node_rank,
            rdzv_endpoint=args.rdzv_endpoint,
            name=f"sweep {sweep.id} {variant_label(variant)}",
            python=args.python,
            metrics=args.metric,
            backend_options=backend_options(args),
            cores=args.cores,
            tb_dir=args.tb,
        )
        for variant in variants
    ]
    if args.cores is not None and args.parallel not in ("auto", "1"):
        raise UsageError(
            f"--cores {args.cores} with --parallel {args.parallel}: every variant would ask for the same "
            "cores; leave --cores out (each variant gets its own free range) or use --parallel 1"
        )
    room = None
    if args.backend == "local" and args.cores is None:
        room = console.core_room(args.nproc)
    return sweep, specs, side_by_side(args.parallel, args.nproc, len(specs), args.backend, room)


def start_detached(console: Any, argv: list[str]) -> Path:
    """`trnconsole sweep ARGV` in its own session, so the sweep goes on when the console that started it
    quits; its output goes to a log under the sweeps directory, whose path is returned."""
    import os
    import subprocess

    directory = sweeps_dir(console)
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / f"started-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    env = {**os.environ, "TRNCONSOLE_HOME": str(console.home)}
    with log.open("ab") as out:
        subprocess.Popen(
            [sys.executable, "-m", "trnconsole.cli", "sweep", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return log


def side_by_side(
    requested: str, nproc: int, variants: int, backend: str, room: tuple[int, str] | None = None
) -> int:
    """How many variants run at once: a number, or `auto` — as many as fit on the free NeuronCores now
    (`room`: how many `nproc`-core ranges are free and who holds the rest, from Console.core_room; remote
    backends: all of them, each job has its own instances); on a CPU or GPU host (room None), one, so that
    timings do not disturb each other. On a Neuron host a number is held to the ranges that fit, so no
    variant is refused its cores while another waits its turn."""
    if requested != "auto":
        try:
            count = int(requested)
        except ValueError:
            raise UsageError(f"--parallel {requested}: expected a number or auto") from None
        if count < 1:
            raise UsageError(f"--parallel {requested}: must be at least 1")
        return min(count, variants, _fitting(requested, nproc, room))
    if backend != "local":
        return variants
    return 1 if room is None else min(variants, _fitting(requested, nproc, room))


def _fitting(requested: str, nproc: int, room: tuple[int, str] | None) -> int:
    if room is None:
        return sys.maxsize
    fits, holders = room
    if fits < 1:
        raise UsageError(
            f"--parallel {requested}: no {nproc} free contiguous NeuronCores for even one variant; "
            f"held: {holders}"
        )
    return fits


def run_variants(
    console: Any, sweep: Sweep, specs: list[Any], parallel: int, out: TextIO, quiet: bool
) -> None:
    """Launch the variants in order, at most `parallel` at once, until every one has ended."""
    pending = list(range(len(specs)))
    active: dict[int, Any] = {}
    labels = [variant_label(v) for v in sweep.variants]
    while pending or active:
        while pending and len(active) < parallel:
            index = pending.pop(0)
            try:
                record = console.launch(specs[index])
            except UsageError as exc:
                if not quiet:
                    out.write(f"  [{index + 1}/{len(specs)}] {labels[index]}: not launched: {exc}\n")
                continue
            active[index] = record
            sweep.runs[index] = record.id
            sweep.save(sweeps_dir(console))
            if not quiet:
                out.write(f"  [{index + 1}/{len(specs)}] {labels[index]}: run {record.id} started\n")
                out.flush()
        time.sleep(POLL_S)
        for index, record in list(active.items()):
            record = console.refresh(record)
            active[index] = record
            if not record.finished:
                continue
            del active[index]
            if not quiet:
                summary = console.summary(record)
                speed = summary.get("avg_samples_per_s")
                out.write(
                    f"  [{index + 1}/{len(specs)}] {labels[index]}: {record.status}, "
                    f"{number(speed)} samples/s, loss {number(summary.get('final_loss'))}\n"
                )
                out.flush()


def find_sweep(console: Any, prefix: str) -> Sweep:
    matches = [s for s in load_sweeps(sweeps_dir(console)) if s.id.startswith(prefix)]
    if len(matches) != 1:
        known = ", ".join(s.id for s in load_sweeps(sweeps_dir(console))[:10]) or "none yet"
        what = "no sweep" if not matches else "more than one sweep"
        raise UsageError(f"--show {prefix}: {what} matches; known sweeps: {known}")
    return matches[0]


def rows_of(console: Any, sweep: Sweep) -> list[dict[str, Any]]:
    summaries: list[dict[str, Any] | None] = []
    for run_id in sweep.runs:
        if run_id is None:
            summaries.append(None)
            continue
        record = console.refresh(console.store.get(run_id))
        summary = console.summary(record) if record.finished else console.quick_summary(record)
        summaries.append({**summary, "id": record.id, "status": record.status})
    return sweep_rows(sweep.variants, summaries)


def print_table(console: Any, sweep: Sweep, out: TextIO, as_json: bool) -> int:
    rows = rows_of(console, sweep)
    if as_json:
        out.write(
            json_text({"sweep": sweep.id, "runner": sweep.runner, "sets": sweep.sets, "rows": rows}) + "\n"
        )
    else:
        keys = [k for k, _ in sweep.grid]
        headers = (
            *(k.upper() for k in keys),
            "RUN",
            "STATUS",
            "SAMPLES/S",
            "SPEED-UP",
            "FINAL LOSS",
            "COMPILES",
            "WALL",
        )
        body = [
            (
                *(row["variant"][k] for k in keys),
                row["run"] or "-",
                row["status"],
                number(row["samples_per_s"]),
                "-" if row["speedup"] is None else f"{row['speedup']:.2f}x",
                number(row["final_loss"]),
                number(row["compile_count"]),
                duration(row["wall_time_s"]),
            )
            for row in rows
        ]
        out.write(table(headers, body) + "\n")
    out.flush()
    return 0 if all(row["status"] == "completed" for row in rows) else 1
