"""The Textual console: one app, the dashboard as its main screen, reader threads feeding a fixed-rate redraw.

Work stays off the event loop: statuses are refreshed and run files read in worker threads into `LiveRuns`;
a timer redraws from it a few times a second, never per event, so a chatty run cannot delay a key press.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches

from ..core.errors import UsageError
from .screens.dashboard import Dashboard
from .themes import DEFAULT_THEME, VARIABLE_DEFAULTS, discover_themes

if TYPE_CHECKING:
    from ..live import LiveRuns

DEFAULT_REFRESH_HZ = 4.0
STATUS_EVERY_S = 2.0
MONITOR_EVERY_S = 1.0  # neuron-monitor reports once a second; the hang rule counts these periods


class TrnConsoleApp(App):
    TITLE = "trnconsole"
    BINDINGS = [
        Binding("n", "launch", "Launch", id="launch"),
        Binding("r", "rerun", "Rerun", id="rerun"),
        Binding("c", "compare", "Compare", id="compare"),
        Binding("l", "logs", "Logs", id="logs"),
        Binding("s", "stop", "Stop", id="stop"),
        Binding("d", "devices", "Devices", id="devices"),
        Binding("t", "tensorboard", "TensorBoard", id="tensorboard"),
        Binding("w", "sweeps", "Sweeps", id="sweeps"),
        Binding("question_mark", "help", "Help", id="help"),
        Binding("q", "quit", "Quit", id="quit"),
    ]

    def __init__(
        self,
        service: Any = None,
        theme: str | None = None,
        refresh_hz: float | None = None,
        clock: Callable[[], float] = time.time,
        monitor_hub: Any = None,
        keymap: dict[str, str] | None = None,
        follow_run: str | None = None,
    ) -> None:
        super().__init__()
        self._service = service
        self._live: LiveRuns | None = None
        self._live_lock = threading.Lock()
        self._polling = threading.Lock()  # held while a file read runs
        self._refreshing = threading.Lock()  # held while a status refresh runs
        self.clock = clock
        self.refresh_hz = refresh_hz or DEFAULT_REFRESH_HZ
        self.monitor_hub = monitor_hub
        self.snapshot: Any = None  # the latest MonitorSnapshot
        self._sampling = threading.Lock()  # held while a monitoring sample runs
        self.follow_run = follow_run
        self.selected: str | None = None
        self._new_lines: deque[list[str]] = deque()
        self._theme_name = theme or DEFAULT_THEME
        self._keymap = keymap or {}
        self._theme_warning = self._choose_theme()

    # ---- set-up ----

    @property
    def service(self) -> Any:
        """The run store and backends (not `console`: App.console is Textual's own)."""
        return self.live.console

    @property
    def live(self) -> LiveRuns:
        """Created on first use, normally in the first status refresh's thread, after the first frame."""
        with self._live_lock:
            if self._live is None:
                from ..live import LiveRuns

                service = self._service
                if service is None:
                    from ..service import Console

                    service = Console()
                self._live = LiveRuns(service, clock=self.clock)
            return self._live

    def get_default_screen(self) -> Dashboard:
        return Dashboard()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return {**super().get_theme_variable_defaults(), **VARIABLE_DEFAULTS}

    def _choose_theme(self) -> str | None:
        """Register the theme files and set the chosen theme before the first screen is styled (switching
        after it would restyle everything once more); returns a warning for an unknown name."""
        for theme in discover_themes():
            self.register_theme(theme)
        warning = None
        if self._theme_name not in self.available_themes:
            known = ", ".join(sorted(self.available_themes))
            warning = f"theme {self._theme_name!r} not found; using {DEFAULT_THEME}. Known: {known}"
            self._theme_name = DEFAULT_THEME
        self.theme = self._theme_name
        return warning

    def on_mount(self) -> None:
        if self._theme_warning:
            self.notify(self._theme_warning, severity="warning")
        if self._keymap:
            self.set_keymap(self._keymap)
        self.call_after_refresh(self._refresh_records)  # the run store is opened after the first frame
        self.set_interval(STATUS_EVERY_S, self._refresh_records)
        self.set_interval(1.0 / self.refresh_hz, self._tick)
        self.call_after_refresh(self._sample_monitors)  # the monitors start after the first frame
        self.set_interval(MONITOR_EVERY_S, self._sample_monitors)

    @property
    def dashboard(self) -> Dashboard | None:
        for screen in self.screen_stack:
            if isinstance(screen, Dashboard):
                return screen
        return None

    # ---- background work ----

    def _refresh_records(self) -> None:
        """Ask the backends for statuses in a thread; skipped while the previous refresh still runs."""
        if self._refreshing.acquire(blocking=False):
            self._refresh_in_thread()

    @work(thread=True, group="status")
    def _refresh_in_thread(self) -> None:
        try:
            self.live.refresh_records()
        finally:
            self._refreshing.release()
        self.call_from_thread(self._after_refresh)

    def _after_refresh(self) -> None:
        for record in self.live.take_ended():
            severity = "information" if record.status == "completed" else "error"
            detail = f" (exit {record.exit_code})" if record.exit_code is not None else ""
            self.notify(
                f"run {record.id} {record.status}{detail}",
                title=record.name or record.runner,
                severity=severity,
                timeout=8,
            )
        if self.follow_run and self.dashboard is not None and self.dashboard.ready and self.is_running:
            table = self.dashboard.table
            if self.follow_run in table._order:
                table.move_cursor(row=table._order.index(self.follow_run))
                self.follow_run = None
        self.redraw()

    def _poll(self, run_ids: list[str]) -> None:
        """Read the runs' files in a thread; a tick while the last read still runs (a big backlog) skips."""
        if self._polling.acquire(blocking=False):
            self._poll_files(run_ids)

    @work(thread=True, group="poll")
    def _poll_files(self, run_ids: list[str]) -> None:
        try:
            lines = self.live.poll(run_ids)
            if lines and run_ids and run_ids[0] == self.selected:
                self._new_lines.append(lines)
        finally:
            self._polling.release()

    def _sample_monitors(self) -> None:
        if self._sampling.acquire(blocking=False):
            self._sample_in_thread()

    @work(thread=True, group="monitors")
    def _sample_in_thread(self) -> None:
        """Host, process trees, NeuronCores and GPUs; each active run's figures feed its alerts."""
        try:
            if self.monitor_hub is None:
                from ..monitors.hub import MonitorHub

                self.monitor_hub = MonitorHub()
            self.snapshot = self.monitor_hub.sample(self.live.monitor_roots())
            self.live.feed_monitors(self.snapshot.runs)
        finally:
            self._sampling.release()

    def on_unmount(self) -> None:
        if self.monitor_hub is not None:
            self.monitor_hub.close()  # neuron-monitor ends with the console; the jobs do not

    # ---- drawing ----

    def _tick(self) -> None:
        self._poll([self.selected] if self.selected else [])
        self.redraw()

    def _notify_alerts(self) -> None:
        for record, alert in self.live.take_alerts():
            self.notify(
                alert.message,
                title=f"{record.id} {record.name or record.runner}: {alert.kind.replace('_', ' ')}",
                severity="error" if alert.severity == "error" else "warning",
                timeout=15,
            )

    def redraw(self) -> None:
        if self._live is None:
            return  # nothing to draw before the first refresh
        self._notify_alerts()  # whichever screen is showing
        dashboard = self.dashboard
        if dashboard is None or self.screen is not dashboard or not dashboard.ready:
            return  # hidden screens are not redrawn
        lines: list[str] = []
        while self._new_lines:
            lines.extend(self._new_lines.popleft())
        views = [self.live.view(r, with_series=r.id == self.selected) for r in self.live.records]
        with contextlib.suppress(NoMatches):  # the app is closing: the dashboard's widgets are gone
            dashboard.draw(views, self.live.marked, self.clock(), self.snapshot, lines)

    def select_run(self, run_id: str | None) -> None:
        self.selected = run_id
        self._new_lines.clear()
        self.reload_log()
        if run_id:
            self._poll([run_id])

    def reload_log(self) -> None:
        dashboard = self.dashboard
        if dashboard is not None:
            dashboard.reset_log(self.live.log_tail(self.selected) if self.selected else [])

    def _selected_record(self) -> Any:
        record = self.live.record(self.selected) if self.selected else None
        if record is None:
            self.notify("no run selected", severity="warning")
        return record

    # ---- actions ----

    def action_launch(self) -> None:
        from .screens.launch import LaunchScreen

        self.push_screen(LaunchScreen(self.service, self._backends()), self._launch_requested)

    def action_rerun(self) -> None:
        from .screens.launch import LaunchScreen

        record = self._selected_record()
        if record is not None:
            self.push_screen(
                LaunchScreen(self.service, self._backends(), parent=record), self._launch_requested
            )

    def _backends(self) -> list[str]:
        from ..backends import REGISTRY

        return list(REGISTRY)

    def _launch_requested(self, request: Any) -> None:
        if request is not None:
            self._launch(request)

    @work(thread=True, group="launch")
    def _launch(self, request: Any) -> None:
        try:
            spec = request.build_spec(self.service)
            parent = self.service.store.get(request.parent_id) if request.parent_id else None
            record = self.service.launch(spec, parent=parent)
        except UsageError as exc:
            self.call_from_thread(self.notify, str(exc), title="not launched", severity="error", timeout=10)
            return
        self.follow_run = record.id
        self.call_from_thread(self.notify, f"launched {record.id} ({record.runner} on {record.backend})")
        self.live.refresh_records()
        self.call_from_thread(self._after_refresh)

    def action_compare(self) -> None:
        ids = [r.id for r in self.live.records if r.id in self.live.marked]
        if not ids and self.selected:
            ids = [self.selected]
        if not ids:
            self.notify("mark runs with space to compare them", severity="warning")
            return
        self._open_compare(ids)

    @work(thread=True, exclusive=True, group="compare")
    def _open_compare(self, ids: list[str]) -> None:
        from .screens.compare import CompareScreen

        runs = []
        for run_id in reversed(ids):  # oldest first: the first run is the baseline
            record = self.service.store.get(run_id)
            runs.append((record.id, record.name, self.service.summary(record)))
        self.call_from_thread(self.push_screen, CompareScreen(runs))

    def action_logs(self) -> None:
        from .screens.logs import LogsScreen

        record = self._selected_record()
        if record is not None:
            self.push_screen(LogsScreen(record.id, self.service.backend(record.backend), record))

    def action_devices(self) -> None:
        from .screens.devices import DevicesScreen

        if not isinstance(self.screen, DevicesScreen):
            self.push_screen(DevicesScreen())

    def action_tensorboard(self) -> None:
        from ..monitors.tensorboard import run_log_roots
        from .screens.tensorboard import TensorBoardScreen

        record = self.live.record(self.selected) if self.selected else None
        roots = run_log_roots(record.spec, record.run_dir, record.created_at) if record is not None else None
        if not isinstance(self.screen, TensorBoardScreen):
            self.push_screen(TensorBoardScreen(roots[0].path if roots else None, roots))

    def action_sweeps(self) -> None:
        from .screens.sweep import SweepScreen

        if not isinstance(self.screen, SweepScreen):
            self.push_screen(SweepScreen(self.service))

    def action_stop(self) -> None:
        from .screens.dialogs import ConfirmScreen

        record = self._selected_record()
        if record is None:
            return
        if record.finished:
            self.notify(f"run {record.id} already {record.status}")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify(f"stopping {record.id}…")
                self._stop(record.id)

        self.push_screen(
            ConfirmScreen(
                f"Stop run {record.id} ({record.name or record.runner})?\n"
                "SIGTERM to its process group, SIGKILL after 15 s."
            ),
            answered,
        )

    @work(thread=True, group="stop")
    def _stop(self, run_id: str) -> None:
        record = self.service.stop(self.service.store.get(run_id))
        self.call_from_thread(self.notify, f"run {record.id} {record.status}")
        self.live.refresh_records()
        self.call_from_thread(self._after_refresh)

    def action_help(self) -> None:
        from .screens.dialogs import HelpScreen

        rows = [(b.key, b.description) for b in self.BINDINGS if isinstance(b, Binding)]
        rows += [(b.key, b.description) for b in Dashboard.BINDINGS if isinstance(b, Binding)]
        rows += [
            ("up/down", "select a run"),
            ("l, then /", "search the full log; n / N next / previous match"),
            ("c, then b / s", "compare: set the baseline / sort by the column under the cursor"),
            ("ctrl+p", "command palette (themes, quit, ...)"),
        ]
        self.push_screen(HelpScreen(rows))


def run_app(theme: str | None = None, follow_run: str | None = None, service: Any = None) -> int:
    """Open the console; returns its exit code. Quitting never stops a job."""
    from ..core.paths import load_config

    config = load_config()
    app = TrnConsoleApp(
        service=service,
        theme=theme or config.get("theme"),
        refresh_hz=_positive(config.get("refresh_hz")),
        keymap=config.get("keys") if isinstance(config.get("keys"), dict) else None,
        follow_run=follow_run,
    )
    app.run()
    return app.return_code or 0


def _positive(value: Any) -> float | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or value <= 0:
        raise UsageError(f"config refresh_hz = {value!r}: must be a positive number (redraws per second)")
    return float(value)
