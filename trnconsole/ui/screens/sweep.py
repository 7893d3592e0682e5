"""Sweeps: the newest sweep's table (variant, status, throughput, speed-up, loss, compiles), redrawn as its
runs progress; `[` and `]` step through older sweeps; `n` starts a new one with the CLI's arguments, in its
own process, so it goes on when the console quits."""

from __future__ import annotations

import shlex
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static

from ... import textfmt as fmt
from ...core.errors import UsageError

REFRESH_S = 2.0
EXAMPLE = "bert --grid batch_size=8,16 --grid precision=fp32,bf16 --steps 50 --set synthetic=true"


class SweepScreen(Screen):
    BINDINGS = [
        Binding("escape,w", "back", "Back"),
        Binding("n", "new", "New sweep"),
        Binding("left_square_bracket", "older", "Older"),
        Binding("right_square_bracket", "newer", "Newer"),
    ]
    DEFAULT_CSS = """
    SweepScreen #sweep-args { height: 1; border: none; padding: 0 1; }
    SweepScreen #sweep-args.hidden { display: none; }
    SweepScreen #sweep-status { height: auto; padding: 0 1; color: $text-muted; }
    SweepScreen DataTable { height: 1fr; }
    """

    def __init__(self, console: Any) -> None:
        super().__init__()
        self.console = console
        self.index = 0  # 0: the newest sweep
        self.sweep_id: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(
            placeholder=f"sweep arguments, e.g. {EXAMPLE}; Enter starts it", id="sweep-args", classes="hidden"
        )
        yield Static("reading sweeps…", id="sweep-status", markup=False)
        yield DataTable(id="sweep-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self._load()
        self.set_interval(REFRESH_S, self._load)

    # ---- reading ----

    @work(thread=True, exclusive=True, group="sweep-read")
    def _load(self) -> None:
        from ...commands.sweep import rows_of, sweeps_dir
        from ...core.sweep import load_sweeps

        sweeps = load_sweeps(sweeps_dir(self.console))
        if not sweeps:
            self.app.call_from_thread(self._show, None, [], 0)
            return
        self.index = min(self.index, len(sweeps) - 1)
        sweep = sweeps[self.index]
        self.app.call_from_thread(self._show, sweep, rows_of(self.console, sweep), len(sweeps))

    def _show(self, sweep: Any, rows: list[dict[str, Any]], count: int) -> None:
        status = self.query_one("#sweep-status", Static)
        table = self.query_one(DataTable)
        if sweep is None:
            status.update(f"no sweeps yet: press n and give e.g. {EXAMPLE}")
            table.clear(columns=True)
            return
        done = sum(1 for r in rows if r["status"] in ("completed", "failed", "stopped", "lost"))
        status.update(
            f"sweep {sweep.id} ({self.index + 1} of {count}): {sweep.runner} {' '.join(sweep.sets)}  "
            f"{done}/{len(rows)} variants ended   [ ]: older/newer  n: new sweep"
        )
        keys = [k for k, _ in sweep.grid]
        if sweep.id != self.sweep_id:
            self.sweep_id = sweep.id
            table.clear(columns=True)
            table.add_columns(
                *(k.upper() for k in keys),
                "RUN",
                "STATUS",
                "SAMPLES/S",
                "SPEED-UP",
                "LOSS",
                "COMPILES",
                "WALL",
            )
        else:
            table.clear()
        for row in rows:
            table.add_row(
                *(row["variant"][k] for k in keys),
                row["run"] or "-",
                row["status"],
                fmt.number(row["samples_per_s"]),
                "-" if row["speedup"] is None else f"{row['speedup']:.2f}x",
                fmt.number(row["final_loss"]),
                fmt.number(row["compile_count"]),
                fmt.duration(row["wall_time_s"]),
            )

    # ---- keys ----

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_older(self) -> None:
        self.index += 1
        self._load()

    def action_newer(self) -> None:
        self.index = max(0, self.index - 1)
        self._load()

    def action_new(self) -> None:
        box = self.query_one("#sweep-args", Input)
        box.remove_class("hidden")
        box.focus()

    @on(Input.Submitted, "#sweep-args")
    def on_args(self, event: Input.Submitted) -> None:
        self._start(event.value)

    @work(thread=True, exclusive=True, group="sweep-start")
    def _start(self, text: str) -> None:
        """The CLI's own checks first (every variant's spec), then `trnconsole sweep` in its own process."""
        from ...cli import RaisingParser, build_parser
        from ...commands.sweep import plan_sweep, start_detached

        try:
            argv = shlex.split(text)
            args = build_parser(RaisingParser).parse_args(["sweep", *argv])
            if args.show:
                raise UsageError("--show: pick a sweep with [ and ] here")
            plan_sweep(self.console, args)
        except (UsageError, ValueError) as exc:
            self.app.call_from_thread(self._problem, str(exc))
            return
        except SystemExit:
            self.app.call_from_thread(self._problem, f"not sweep arguments: {text!r}; e.g. {EXAMPLE}")
            return
        log = start_detached(self.console, argv)
        self.app.call_from_thread(self._started, str(log))

    def _problem(self, message: str) -> None:
        self.query_one("#sweep-status", Static).update(message)
        self.app.notify(message, title="sweep not started", severity="error", timeout=10)

    def _started(self, log: str) -> None:
        self.query_one("#sweep-args", Input).add_class("hidden")
        self.index = 0
        self.app.notify(f"sweep started; its output: {log}")
        self.set_timer(1.0, self._load)
