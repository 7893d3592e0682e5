"""The `trnconsole` command line. Heavy modules are imported inside the commands, so `--help` stays fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from .core.errors import UsageError
from .textfmt import json_text


class OneLineParser(argparse.ArgumentParser):
    """argparse whose mistakes are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


class RaisingParser(OneLineParser):
    """For arguments typed inside the console: a mistake is a UsageError to show, not a print and an exit."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser(parser_class: type[OneLineParser] = OneLineParser) -> argparse.ArgumentParser:
    parser = parser_class(
        prog="trnconsole",
        description="Launch, watch, compare and rerun PyTorch/XLA training jobs on Trainium, GPUs and CPUs.",
    )
    parser.add_argument("--version", action="version", version=f"trnconsole {__version__}")
    parser.add_argument(
        "--theme", default=None, help="colour theme of the console (trn-dark, trn-light, ...)"
    )
    sub = parser.add_subparsers(dest="command", parser_class=parser_class, metavar="COMMAND")

    launch = sub.add_parser("launch", help="start a run (returns at once unless --follow)")
    launch.add_argument("runner", metavar="RUNNER", help="bert, gpt2, vit or a path to a training script")
    _add_spec_options(launch)
    launch.add_argument("--follow", "-f", action="store_true", help="show live progress until the run ends")
    launch.add_argument("--json", action="store_true", help="print the new run's record as JSON")
    launch.add_argument(
        "--preflight",
        action="store_true",
        help="first check the devices and collectives with the run's process count (trnconsole preflight)",
    )
    launch.add_argument(
        "--precompile",
        action="store_true",
        help="first compile the run's graphs into the Neuron cache with neuron_parallel_compile",
    )

    runs = sub.add_parser("runs", help="list runs, newest first")
    runs.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    runs.add_argument("--json", action="store_true", help="machine-readable output")

    show = sub.add_parser("show", help="one run: its spec, status and figures")
    show.add_argument("run", metavar="RUN", help="run id or unique prefix")
    show.add_argument("--json", action="store_true", help="machine-readable output")

    logs = sub.add_parser("logs", help="a run's log (stdout and stderr)")
    logs.add_argument("run", metavar="RUN")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    logs.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines")

    stop = sub.add_parser("stop", help="stop a run: SIGTERM to its process group, SIGKILL after --grace")
    stop.add_argument("run", metavar="RUN")
    stop.add_argument("--grace", type=float, default=15.0, help="seconds before SIGKILL (default 15)")

    rerun = sub.add_parser("rerun", help="a new run from an old one's spec, with flags changed")
    rerun.add_argument("run", metavar="RUN")
    rerun.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change a flag")
    rerun.add_argument("--unset", action="append", default=[], metavar="KEY", help="drop a flag")
    rerun.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    rerun.add_argument("--nproc", type=int, default=None)
    rerun.add_argument("--cores", default=None, metavar="RANGE", help="NeuronCores, e.g. 0-7 (see launch)")
    rerun.add_argument("--tb", default=None, metavar="DIR", help="TensorBoard directory (see launch)")
    rerun.add_argument("--name", default=None)
    rerun.add_argument("--follow", "-f", action="store_true")
    rerun.add_argument("--json", action="store_true")

    compare = sub.add_parser("compare", help="figures of several runs side by side, with ratios")
    compare.add_argument("runs", nargs="+", metavar="RUN")
    compare.add_argument(
        "--baseline", default=None, metavar="RUN", help="ratios against this run (default: first)"
    )
    compare.add_argument("--json", action="store_true")

    demo = sub.add_parser("demo", help="the console on a tiny BERT run on the CPU, for a first look")
    demo.add_argument("--steps", type=int, default=300)
    demo.add_argument("--plain", action="store_true", help="follow in plain text instead of the console")

    flags = sub.add_parser("flags", help="a bundled runner's flags with their types and defaults")
    flags.add_argument("runner", choices=("bert", "gpt2", "vit"))
    flags.add_argument("--json", action="store_true")

    runners = sub.add_parser("runners", help="list the bundled training runners and their scripts")
    runners.add_argument("--json", action="store_true", help="machine-readable output")

    monitor = sub.add_parser("monitor", help="device and host utilisation (neuron-monitor, NVML, psutil)")
    monitor.add_argument("--once", action="store_true", help="one snapshot, then exit")
    monitor.add_argument("--json", action="store_true", help="machine-readable output (one object a line)")
    monitor.add_argument("--interval", type=float, default=1.0, help="seconds between snapshots (default 1)")

    tb = sub.add_parser("tb", help="scalars from TensorBoard event files (any log directory or a run)")
    tb.add_argument("target", metavar="PATH|RUN", help="a log directory, an event file or a run id")
    tb.add_argument("--json", action="store_true", help="machine-readable output")

    tensorboard = sub.add_parser("tensorboard", help="start TensorBoard on 127.0.0.1 for a run's logs")
    tensorboard.add_argument("target", metavar="RUN|PATH", help="a run id (or prefix) or a log directory")
    tensorboard.add_argument("--port", type=int, default=None, help="default 6006, or a free one if taken")
    preflight = sub.add_parser("preflight", help="device sanity and collective checks before a long run")
    preflight.add_argument(
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help="worker processes (default: every NeuronCore on a Neuron host, else 2)",
    )
    preflight.add_argument(
        "--device",
        choices=("auto", "xla", "cuda", "cpu"),
        default="auto",
        help="where the workers run (default auto: Neuron, then CUDA, then CPU)",
    )
    preflight.add_argument(
        "--python", default=None, help="the runner's Python (default: runner_python or ours)"
    )
    preflight.add_argument(
        "--cache-dir",
        default=None,
        metavar="PATH",
        help="Neuron compile cache whose disk to check (default: NEURON_CC_FLAGS, NEURON_COMPILE_CACHE_URL)",
    )
    preflight.add_argument(
        "--min-free-gb",
        type=float,
        default=20.0,
        metavar="GIB",
        help="free GiB the cache's disk needs (default 20)",
    )
    preflight.add_argument(
        "--check-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds one check may take before it counts as hung (default 120)",
    )
    preflight.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="seconds for the whole preflight (default 900)",
    )
    preflight.add_argument("--json", action="store_true", help="machine-readable output")

    precompile = sub.add_parser(
        "precompile", help="compile a runner's graphs into the Neuron compile cache (neuron_parallel_compile)"
    )
    precompile.add_argument("runner", metavar="RUNNER", help="bert, gpt2, vit or a path to a training script")
    precompile.add_argument(
        "--nproc", type=int, default=1, help="processes per node, as the real run will use"
    )
    precompile.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a runner flag, as for launch"
    )
    precompile.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="environment (e.g. NEURON_CC_FLAGS)"
    )
    precompile.add_argument(
        "--python", default=None, help="the runner's Python (default: runner_python or ours)"
    )
    precompile.add_argument(
        "--precompile-steps", type=int, default=10, metavar="N", help="steps of the trial run (default 10)"
    )
    precompile.add_argument(
        "--steps-flag",
        default=None,
        metavar="NAME",
        help="a script's step-limit flag, if not steps/max_steps/...",
    )
    precompile.add_argument(
        "--num-parallel",
        type=int,
        default=None,
        metavar="N",
        help="compile workers (--num_parallel of the tool)",
    )
    precompile.add_argument("--json", action="store_true", help="the summary as JSON (progress on stderr)")

    serve = sub.add_parser("serve", help="the console in a browser on 127.0.0.1 (a console per browser tab)")
    serve.add_argument(
        "--port", type=int, default=None, help="default 8000, or a free one if taken; 0: any free port"
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1); any other lets anyone reaching it use the console",
    )
    serve.add_argument("--json", action="store_true", help="print the URL as one JSON line once serving")

    sweep = sub.add_parser("sweep", help="run a grid of flag variants and print the comparison table")
    sweep.add_argument("runner", metavar="RUNNER", nargs="?", help="bert, gpt2, vit or a training script")
    sweep.add_argument(
        "--grid", action="append", default=[], metavar="KEY=V1,V2", help="a flag and the values to try"
    )
    sweep.add_argument("--steps", type=int, default=None, help="steps of every variant")
    sweep.add_argument(
        "--parallel", default="1", metavar="N|auto", help="variants at once (default 1; auto: as cores allow)"
    )
    sweep.add_argument("--show", default=None, metavar="SWEEP", help="print the table of an earlier sweep")
    sweep.add_argument("--json", action="store_true", help="machine-readable output")
    _add_spec_options(sweep)

    prices = sub.add_parser("prices", help="hourly prices per instance type, with their sources")
    prices.add_argument(
        "--refresh", action="store_true", help="fetch current on-demand prices from the AWS Price List API"
    )
    prices.add_argument(
        "--region", default="us-east-1", help="the region the prices are for (default us-east-1)"
    )
    prices.add_argument(
        "--type", action="append", default=[], metavar="INSTANCE", help="only (or also fetch) this type"
    )
    prices.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _add_spec_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="local", help="local (default), sagemaker, batch or k8s")
    p.add_argument("--nproc", type=int, default=1, help="processes per node (NeuronCores, GPUs)")
    p.add_argument(
        "--cores",
        default=None,
        metavar="RANGE",
        help="NeuronCores for a local run, e.g. 0-7 (one per process; default: the lowest free range)",
    )
    p.add_argument(
        "--tb",
        default=None,
        metavar="DIR",
        help="where a local run's script writes TensorBoard event files, if not in its run directory "
        "($TRNCONSOLE_RUN_DIR) or a Trainer's --output_dir; read by the console and `trnconsole tb RUN`",
    )
    p.add_argument("--nnodes", type=int, default=1, help="nodes for multi-node torchrun")
    p.add_argument("--node-rank", type=int, default=0, help="this node's rank when --nnodes > 1")
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT", help="rendezvous for --nnodes > 1")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a runner flag, e.g. batch_size=16"
    )
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment of the job")
    p.add_argument("--name", default=None, help="a name to recognise the run by")
    p.add_argument("--python", default=None, help="the runner's Python (default: runner_python or this one)")
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="a metric read from log lines by a regex with one group (as SageMaker metric definitions)",
    )
    _add_backend_options(p)


def _add_backend_options(p: argparse.ArgumentParser) -> None:
    """One option per remote-backend setting (options.BY_BACKEND), e.g. --s3-prefix, --namespace, --spot."""
    from .backends.options import BY_BACKEND, SWITCHES

    group = p.add_argument_group("remote backends (--backend sagemaker, batch or k8s)")
    seen: set[str] = set()
    for table in BY_BACKEND.values():
        for key, text in table.items():
            if key in seen:
                continue
            seen.add(key)
            owners = [name for name, t in BY_BACKEND.items() if key in t]
            help_text = f"[{', '.join(owners)}] {text}".replace("%", "%%")
            flag = "--" + key.replace("_", "-")
            if key in SWITCHES:
                group.add_argument(flag, dest=f"opt_{key}", action="store_true", help=help_text)
            else:
                group.add_argument(flag, dest=f"opt_{key}", default=None, metavar="VALUE", help=help_text)


def backend_options(args: argparse.Namespace) -> dict[str, str]:
    """The remote-backend options given on the command line, as spec.backend_options."""
    options: dict[str, str] = {}
    for name, value in vars(args).items():
        if not name.startswith("opt_") or value in (None, False):
            continue
        options[name[4:]] = "true" if value is True else str(value)
    return options


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:  # everything after `--` goes to the runner verbatim
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if extra and args.command != "launch":
            parser.error("arguments after -- are only for launch")
    except SystemExit as exc:  # --help, --version and argument errors
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if args.command is None:
            from .ui.app import run_app

            return run_app(theme=args.theme)
        return COMMANDS[args.command](args, extra)
    except UsageError as exc:
        print(f"trnconsole: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


def _console() -> Any:
    from .service import Console

    return Console()


# ---- launch, rerun, demo ----


def cmd_launch(args: argparse.Namespace, extra: list[str]) -> int:
    console = _console()
    spec = console.build_spec(
        args.runner,
        args.set,
        args.env,
        backend=args.backend,
        nproc=args.nproc,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        rdzv_endpoint=args.rdzv_endpoint,
        name=args.name,
        python=args.python,
        metrics=args.metric,
        extra_args=extra,
        backend_options=backend_options(args),
        cores=args.cores,
        tb_dir=args.tb,
    )
    if args.preflight:
        from .commands.preflight import report_text, run_preflight

        if spec.backend != "local":
            raise UsageError(
                f"--preflight: checks this host's devices; it does not apply to --backend {spec.backend}"
            )
        device = spec.flags.get("device")
        report = run_preflight(
            spec.nproc, device if isinstance(device, str) else "auto", python=spec.python, env=spec.env
        )
        print(report_text(report), file=sys.stderr if args.json else sys.stdout)
        if not report.ok:
            print("trnconsole: not launched: a preflight check failed", file=sys.stderr)
            return report.exit_code or 1
    if args.precompile:
        from .commands.precompile import run_precompile

        result = run_precompile(spec, console, sys.stderr if args.json else sys.stdout)
        if not result.ok:
            print(
                f"trnconsole: not launched: precompilation failed (log: {result.log_path})", file=sys.stderr
            )
            return result.exit_code or 1
    record = console.launch(spec)
    return _after_launch(console, record, args.follow, args.json)


def cmd_rerun(args: argparse.Namespace, extra: list[str]) -> int:
    console = _console()
    parent = console.store.resolve(args.run)
    options = {"name": args.name, "nproc": args.nproc, "cores": args.cores, "tb_dir": args.tb}
    record = console.rerun(parent, args.set, args.env, args.unset, **options)
    return _after_launch(console, record, args.follow, args.json)


def cmd_demo(args: argparse.Namespace, extra: list[str]) -> int:
    console = _console()
    spec = console.build_spec(
        "bert",
        [
            "synthetic=true",
            "model_size=tiny",
            "device=cpu",
            f"steps={args.steps}",
            "log_every=5",
            f"eval_every={max(1, args.steps // 2)}",
        ],
        name="demo",
    )
    record = console.launch(spec)
    if args.plain or not (sys.stdin.isatty() and sys.stdout.isatty()):
        return _after_launch(console, record, follow=True, as_json=False)
    from .ui.app import run_app

    return run_app(theme=args.theme, follow_run=record.id, service=console)


def _after_launch(console: Any, record: Any, follow: bool, as_json: bool) -> int:
    if as_json and not follow:
        print(json_text(record.to_json()))
        return 0
    diff = f" (changed: {_diff_text(record.diff)})" if record.diff else ""
    print(f"{record.id}  {record.spec.runner_label} on {record.backend}, run dir {record.run_dir}{diff}")
    if not follow:
        print(f"follow it: trnconsole logs -f {record.id}   figures: trnconsole show {record.id}")
        return 0
    from .follow import follow_run

    return follow_run(console, record, sys.stdout)


def _diff_text(diff: dict[str, Any]) -> str:
    return ", ".join(f"{k} {_plain(old)} -> {_plain(new)}" for k, (old, new) in diff.items())


def _plain(value: Any) -> str:
    return "(unset)" if value is None else str(value)


# ---- runs, show, logs, compare ----


def cmd_runs(args: argparse.Namespace, extra: list[str]) -> int:
    from . import textfmt as fmt

    console = _console()
    records = console.refresh_all(limit=args.limit)
    rows = [(r, console.quick_summary(r)) for r in records]
    if args.json:
        print(json_text([{**r.to_json(), "summary": s} for r, s in rows]))
        return 0
    if not rows:
        print("no runs yet: trnconsole launch bert --set synthetic=true   (or trnconsole demo)")
        return 0
    headers = ("ID", "NAME", "RUNNER", "BACKEND", "STATUS", "STARTED", "ELAPSED", "STEP", "LOSS", "SAMPLES/S")
    body = []
    for r, s in rows:
        total = s.get("total_steps")
        step = "-" if s.get("step") is None else f"{s['step']}/{total}" if total else str(s["step"])
        body.append(
            (
                r.id,
                r.name or "-",
                r.runner,
                r.backend,
                r.status,
                fmt.ago(r.started_at or r.created_at),
                fmt.duration(r.elapsed()),
                step,
                fmt.number(s.get("final_loss")),
                fmt.number(s.get("avg_samples_per_s") or s.get("last_samples_per_s")),
            )
        )
    print(fmt.table(headers, body))
    return 0


def cmd_show(args: argparse.Namespace, extra: list[str]) -> int:
    from pathlib import Path

    from . import textfmt as fmt

    console = _console()
    record = console.refresh(console.store.resolve(args.run))
    summary = console.summary(record)
    if args.json:
        print(json_text({**record.to_json(), "summary": summary}))
        return 0
    spec = record.spec
    lines = [
        ("run", f"{record.id}" + (f" ({record.name})" if record.name else "")),
        ("status", record.status + (f", exit {record.exit_code}" if record.exit_code is not None else "")),
        ("runner", spec.runner),
        ("backend", f"{record.backend}, {spec.nproc} process(es) x {spec.nnodes} node(s)"),
        *(
            [("NeuronCores", f"{spec.visible_cores} ({spec.core_version or 'version unknown'})")]
            if spec.visible_cores
            else []
        ),
        ("flags", " ".join(spec.runner_args()) or "-"),
        *([("tb dir", str(Path(spec.cwd or ".") / Path(spec.tb_dir).expanduser()))] if spec.tb_dir else []),
        ("started", fmt.ago(record.started_at)),
        ("elapsed", fmt.duration(record.elapsed())),
    ]
    if record.parent_id:
        lines.append(("rerun of", f"{record.parent_id}: {_diff_text(record.diff or {}) or 'no change'}"))
    if record.error:
        lines.append(("note", record.error))
    lines += [(f"{record.backend} {key}", value) for key, value in fmt.detail_rows(record.detail)]
    if summary.get("usd_per_hour") is not None:
        where = f"{summary.get('instances')} x {summary['instance_type']}"
        price = f"${summary['usd_per_hour']:g}/h; {summary.get('price_source')}"
        lines.append(("cost", f"${fmt.money(summary.get('cost_usd'))} ({where} at {price})"))
    total = summary.get("total_steps")
    lines += [
        ("step", f"{summary.get('step')}" + (f" of {total}" if total else "")),
        ("final loss", fmt.number(summary.get("final_loss"))),
        (f"eval {summary.get('eval_metric') or ''}".rstrip(), fmt.number(summary.get("eval_value"))),
        (
            "samples/s",
            f"{fmt.number(summary.get('avg_samples_per_s'))} avg, "
            f"{fmt.number(summary.get('peak_samples_per_s'))} peak",
        ),
        ("MFU", fmt.number(summary.get("mfu"))),
        (
            "compiles",
            f"{fmt.number(summary.get('compile_count'))} "
            f"({fmt.number(summary.get('compile_seconds'))} s, "
            f"{fmt.number(summary.get('compiles_after_warmup'))} after warm-up)",
        ),
        ("wall time", fmt.duration(summary.get("wall_time_s"))),
        ("run dir", str(record.run_dir)),
    ]
    if summary.get("malformed_lines"):
        lines.append(("skipped", f"{summary['malformed_lines']} malformed metric lines"))
    for alert in summary.get("alerts") or []:
        lines.append((f"alert {alert['kind']}", alert["message"]))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key:<{width}}  {value}")
    return 0


def cmd_logs(args: argparse.Namespace, extra: list[str]) -> int:
    import time

    console = _console()
    record = console.refresh(console.store.resolve(args.run), force=True)  # a remote log mirrored first
    backend = console.backend(record.backend)
    stream = getattr(backend, "follow", None)
    if args.follow and stream is not None and not record.finished:
        return _stream_remote(console, record, stream, args.tail)
    lines, cursor = console.read_log(record, None)
    if args.tail is not None:
        lines = lines[-args.tail :] if args.tail > 0 else []
    _print_lines(lines)
    if not args.follow:
        return 0
    try:
        while True:
            record = console.refresh(record)
            lines, cursor = console.read_log(record, cursor)
            _print_lines(lines)
            if record.finished and not lines:
                lines, cursor = console.read_log(record, cursor)
                _print_lines(lines)
                return 0
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0


def _stream_remote(console: Any, record: Any, stream: Any, tail: int | None) -> int:
    """`logs -f` of a backend that streams (every pod's log as it is written): the mirrored log up to the
    saved cursor, then the stream from that very cursor, so nothing is skipped or printed twice."""
    from .core.watch import LOG_FILE

    saved = console.store.get(record.id).log_cursor or {}
    mirrored = (record.run_dir / LOG_FILE).read_bytes()[: int(saved.get("log_bytes", 0))] if saved else b""
    lines = mirrored.decode("utf-8", errors="replace").splitlines()
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    _print_lines(lines)
    try:
        for new, _ in stream(record, saved.get("remote")):
            _print_lines(new)
    except KeyboardInterrupt:
        pass
    return 0


def _print_lines(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()


def cmd_stop(args: argparse.Namespace, extra: list[str]) -> int:
    console = _console()
    record = console.store.resolve(args.run)
    if record.finished:
        print(f"{record.id} already {record.status}")
        return 0
    record = console.stop(record, grace_s=args.grace)
    code = f" (exit {record.exit_code})" if record.exit_code is not None else ""
    print(f"{record.id} {record.status}{code}")
    return 0


def cmd_compare(args: argparse.Namespace, extra: list[str]) -> int:
    from . import textfmt as fmt
    from .core.compare import compare_rows

    console = _console()
    records = [console.refresh(console.store.resolve(r)) for r in args.runs]
    baseline = 0
    if args.baseline:
        base_id = console.store.resolve(args.baseline).id
        ids = [r.id for r in records]
        if base_id not in ids:
            records.insert(0, console.store.get(base_id))
            ids.insert(0, base_id)
        baseline = ids.index(base_id)
    rows = compare_rows([(r.id, r.name, console.summary(r)) for r in records], baseline)
    if args.json:
        print(json_text(rows))
        return 0
    headers = (
        "RUN",
        "STATUS",
        "STEPS",
        "LOSS",
        "EVAL",
        "SAMPLES/S",
        "PEAK",
        "MFU",
        "COMPILES",
        "WALL",
        "INSTANCE",
        "$/H",
        "BILLED",
        "COST $",
        "$/1K SAMPLES",
        "x SAMPLES/S",
        "x LOSS",
        "x WALL",
        "x COST",
    )
    body = []
    for row in rows:
        eval_text = (
            "-" if row["eval_value"] is None else f"{row['eval_metric']} {fmt.number(row['eval_value'])}"
        )
        body.append(
            (
                row["id"] + (f" {row['name']}" if row["name"] else ""),
                row["status"] or "-",
                fmt.number(row["steps"]),
                fmt.number(row["final_loss"]),
                eval_text,
                fmt.number(row["avg_samples_per_s"]),
                fmt.number(row["peak_samples_per_s"]),
                fmt.number(row["mfu"]),
                fmt.number(row["compile_count"]),
                fmt.duration(row["wall_time_s"]),
                _instances(row),
                fmt.number(row["usd_per_hour"]),
                "-" if row["billed_seconds"] is None else f"{row['billed_seconds']:.0f} s",
                fmt.money(row["cost_usd"]),
                fmt.money(row["usd_per_1k_samples"], digits=4),
                _ratio(row["avg_samples_per_s_ratio"]),
                _ratio(row["final_loss_ratio"]),
                _ratio(row["wall_time_s_ratio"]),
                _ratio(row["cost_usd_ratio"]),
            )
        )
    print(fmt.table(headers, body))
    return 0


def _instances(row: dict[str, Any]) -> str:
    if not row.get("instance_type"):
        return "-"
    count = row.get("instances") or 1
    return f"{count} x {row['instance_type']}" if count > 1 else row["instance_type"]


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


# ---- runner catalogue ----


def cmd_flags(args: argparse.Namespace, extra: list[str]) -> int:
    from . import textfmt as fmt

    console = _console()
    table = console.flag_table(args.runner)
    if args.json:
        print(json_text([vars(f) for f in table]))
        return 0
    rows = [
        (
            f.name,
            f.type + (f" ({f.constraint})" if f.constraint else ""),
            "|".join(f.choices) if f.choices else fmt.number(f.default) if f.default is not None else "-",
            f.help,
        )
        for f in table
    ]
    print(fmt.table(("FLAG", "TYPE", "DEFAULT / CHOICES", "HELP"), rows))
    return 0


def cmd_runners(args: argparse.Namespace, extra: list[str]) -> int:
    from .resources import BUNDLED_RUNNERS, runner_script

    rows = [{"runner": name, "script": str(runner_script(name))} for name in BUNDLED_RUNNERS]
    if args.json:
        print(json_text(rows))
    else:
        for row in rows:
            print(f"{row['runner']:<6} {row['script']}")
    return 0


COMMANDS = {
    "launch": cmd_launch,
    "rerun": cmd_rerun,
    "demo": cmd_demo,
    "runs": cmd_runs,
    "show": cmd_show,
    "logs": cmd_logs,
    "stop": cmd_stop,
    "compare": cmd_compare,
    "flags": cmd_flags,
    "runners": cmd_runners,
    "monitor": lambda args, extra: _command("monitor", "cmd_monitor")(args, _console),
    "tb": lambda args, extra: _command("tensorboard", "cmd_tb")(args, _console),
    "tensorboard": lambda args, extra: _command("tensorboard", "cmd_tensorboard")(args, _console),
    "preflight": lambda args, extra: _command("preflight", "cmd_preflight")(args, _console),
    "precompile": lambda args, extra: _command("precompile", "cmd_precompile")(args, _console),
    "serve": lambda args, extra: _command("serve", "cmd_serve")(args, _console),
    "sweep": lambda args, extra: _command("sweep", "cmd_sweep")(args, _console),
    "prices": lambda args, extra: _command("prices", "cmd_prices")(args, _console),
}


def _command(module: str, name: str) -> Any:
    import importlib

    return getattr(importlib.import_module(f".commands.{module}", __package__), name)


if __name__ == "__main__":
    sys.exit(main())
