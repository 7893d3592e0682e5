"""Launch and rerun: a form with every runner flag (type and default shown), checked as the CLI checks it.

The form returns the CLI-shaped inputs (`--set` items, `--env` items, nproc...); the app builds the spec
with the same `Console.build_spec`, so every message is the CLI's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch

from ...core.errors import UsageError
from ...core.spec import BUNDLED, FlagInfo, check_value, flag_text

RUNNER_CHOICES = [*BUNDLED, "script"]


@dataclass
class LaunchRequest:
    """What the form asks for, in the CLI's terms."""

    runner: str
    sets: list[str] = field(default_factory=list)
    envs: list[str] = field(default_factory=list)
    nproc: int = 1
    backend: str = "local"
    name: str | None = None
    extra_args: list[str] = field(default_factory=list)
    parent_id: str | None = None
    nnodes: int = 1
    backend_options: dict[str, str] = field(default_factory=dict)

    def build_spec(self, service: Any) -> Any:
        """The checked RunSpec, by the CLI's own rules (UsageError otherwise)."""
        return service.build_spec(
            self.runner,
            self.sets,
            self.envs,
            backend=self.backend,
            nproc=self.nproc,
            nnodes=self.nnodes,
            name=self.name,
            extra_args=self.extra_args,
            backend_options=self.backend_options,
        )


class LaunchScreen(ModalScreen[LaunchRequest | None]):
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "submit", "Launch"),
    ]
    DEFAULT_CSS = """
    LaunchScreen { align: center middle; }
    LaunchScreen > Vertical { width: 96%; max-width: 120; height: 94%; border: thick $primary;
                              background: $surface; padding: 0 1; }
    LaunchScreen #title { text-style: bold; height: 1; }
    LaunchScreen .row { height: 3; }
    LaunchScreen .row Label { width: 26; padding: 1 1 0 0; }
    LaunchScreen .row Input, LaunchScreen .row Select { width: 1fr; }
    LaunchScreen #flags { height: 1fr; border: round $panel; }
    LaunchScreen #remote { height: auto; max-height: 12; border: round $accent; }
    LaunchScreen #remote .row Label { width: 18; }
    LaunchScreen #flags .help { color: $text-muted; width: 1fr; padding: 1 0 0 1; }
    LaunchScreen #diff { height: auto; color: $warning; }
    LaunchScreen #error { height: auto; color: $error; }
    LaunchScreen #buttons { height: 3; align-horizontal: right; }
    LaunchScreen Button { margin-left: 2; }
    """

    def __init__(
        self,
        console: Any,
        backends: list[str],
        runner: str = "bert",
        parent: Any | None = None,
    ) -> None:
        super().__init__()
        self.console = console
        self.backends = backends
        self.parent_record = parent
        spec = parent.spec if parent is not None else None
        self.runner = spec.runner if spec is not None and spec.bundled else ("script" if spec else runner)
        self.script = spec.runner if spec is not None and not spec.bundled else ""
        self.initial: dict[str, str | bool] = dict(spec.flags) if spec is not None else {}
        self.table: list[FlagInfo] = []

    def compose(self) -> ComposeResult:
        spec = self.parent_record.spec if self.parent_record is not None else None
        title = f"Rerun {self.parent_record.id}" if self.parent_record is not None else "Launch a run"
        with Vertical():
            yield Static(title + "   (ctrl+s launches, Esc cancels)", id="title")
            with Horizontal(classes="row"):
                yield Label("runner")
                yield Select(
                    [(r, r) for r in RUNNER_CHOICES], value=self.runner, allow_blank=False, id="runner"
                )
                yield Input(self.script, placeholder="path/to/train.py", id="script")
            with Horizontal(classes="row"):
                yield Label("backend / procs / nodes")
                yield Select(
                    [(b, b) for b in self.backends],
                    value=spec.backend if spec else self.backends[0],
                    allow_blank=False,
                    id="backend",
                )
                yield Input(str(spec.nproc if spec else 1), type="integer", id="nproc")
                yield Input(str(spec.nnodes if spec else 1), type="integer", placeholder="nodes", id="nnodes")
            yield VerticalScroll(id="remote")
            with Horizontal(classes="row"):
                yield Label("name / env KEY=VALUE ...")
                yield Input(spec.name or "" if spec else "", placeholder="name", id="name")
                env = " ".join(f"{k}={v}" for k, v in spec.env.items()) if spec else ""
                yield Input(env, placeholder="NEURON_RT_LOG_LEVEL=INFO ...", id="env")
            with Horizontal(classes="row"):
                yield Label("quick flags key=value ...")
                yield Input(
                    placeholder="steps=200 batch_size=16 synthetic=true (wins over the rows below)",
                    id="quick",
                )
            yield VerticalScroll(id="flags")
            yield Static(id="diff")
            yield Static(id="error")
            with Horizontal(id="buttons"):
                yield Button("Launch", id="launch", variant="success")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self._runner_changed(self.runner)
        self._backend_changed(str(self.query_one("#backend", Select).value))
        self.query_one("#quick", Input).focus()

    # ---- a remote backend's options ----

    @on(Select.Changed, "#backend")
    def on_backend(self, event: Select.Changed) -> None:
        self._backend_changed(str(event.value))

    def _backend_changed(self, backend: str) -> None:
        from ...backends.options import BY_BACKEND, SWITCHES, config_defaults
        from ...core.paths import load_config

        box = self.query_one("#remote", VerticalScroll)
        box.remove_children()
        table = BY_BACKEND.get(backend, {})
        box.display = bool(table)
        if not table:
            return
        box.border_title = f"{backend} options (config.toml [backends.{backend}] fills the defaults)"
        parent = self.parent_record.spec if self.parent_record is not None else None
        try:
            initial = config_defaults(backend, load_config())
        except UsageError as exc:
            initial = {}
            self._show_error(str(exc))
        if parent is not None and parent.backend == backend:
            initial.update(parent.backend_options)
        rows = []
        for key, help_text in table.items():
            label = Label(key.replace("_", "-"))
            if key in SWITCHES:
                on_value = initial.get(key, "").lower() in ("true", "1", "yes", "on")
                widget: Any = Switch(value=on_value, id=f"opt-{key}")
                rows.append(Horizontal(label, widget, Static(help_text, classes="help"), classes="row"))
            else:
                widget = Input(initial.get(key, ""), placeholder=help_text, id=f"opt-{key}")
                rows.append(Horizontal(label, widget, classes="row"))
        box.mount_all(rows)

    def _backend_options(self, backend: str) -> dict[str, str]:
        from ...backends.options import BY_BACKEND

        options: dict[str, str] = {}
        for key in BY_BACKEND.get(backend, {}):
            found = self.query(f"#opt-{key}")
            if not found:
                continue
            widget = found.first()
            if isinstance(widget, Switch):
                if widget.value:
                    options[key] = "true"
            elif isinstance(widget, Input) and widget.value.strip():
                options[key] = widget.value.strip()
        return options

    # ---- the flag rows ----

    @on(Select.Changed, "#runner")
    def on_runner(self, event: Select.Changed) -> None:
        if event.value != self.runner:
            self.initial = {}
            self._runner_changed(str(event.value))

    def _runner_changed(self, runner: str) -> None:
        self.runner = runner
        script = self.query_one("#script", Input)
        script.display = runner == "script"
        flags = self.query_one("#flags", VerticalScroll)
        flags.remove_children()
        if runner == "script":
            flags.mount(Static("Flags for your script: one per line as key=value (passed as --key value)."))
            text = " ".join(f"{k}={v}" for k, v in self.initial.items())
            flags.mount(Input(text, placeholder="epochs=3 lr=1e-4", id="script-flags"))
            self.table = []
            return
        flags.mount(Static("reading the runner's flags…", id="loading"))
        self._load_flags(runner)

    @work(thread=True, exclusive=True, group="flags")
    def _load_flags(self, runner: str) -> None:
        try:
            table = self.console.flag_table(runner)
        except UsageError as exc:
            self.app.call_from_thread(self._show_error, str(exc))
            return
        self.app.call_from_thread(self._show_flags, runner, table)

    def _show_flags(self, runner: str, table: list[FlagInfo]) -> None:
        if runner != self.runner:
            return  # the user picked another runner meanwhile
        self.table = table
        flags = self.query_one("#flags", VerticalScroll)
        flags.remove_children()
        rows = []
        for info in table:
            if info.name == "output_dir":
                continue
            rows.append(Horizontal(*_flag_widgets(info, self.initial.get(info.name)), classes="row"))
        flags.mount_all(rows)
        self._update_diff()

    # ---- values ----

    def _sets(self) -> list[str]:
        """The flags the user set (those that differ from the runner's default), as --set items."""
        if self.runner == "script":
            text = self.query_one("#script-flags", Input).value
            return [item for item in text.split() if item]
        sets = []
        for info in self.table:
            if info.name == "output_dir":
                continue
            widget = self.query_one(f"#flag-{info.name}")
            if isinstance(widget, Switch):
                if widget.value != bool(info.default):
                    sets.append(f"{info.name}={'true' if widget.value else 'false'}")
            elif isinstance(widget, Select):
                if widget.value is not Select.NULL and widget.value != info.default:
                    sets.append(f"{info.name}={widget.value}")
            elif isinstance(widget, Input) and widget.value.strip():
                sets.append(f"{info.name}={widget.value.strip()}")
        return sets

    def _request(self) -> LaunchRequest:
        nproc_text = self.query_one("#nproc", Input).value.strip() or "1"
        if not nproc_text.isdigit() or int(nproc_text) < 1:
            raise UsageError(f"processes {nproc_text!r}: must be a positive integer")
        nnodes_text = self.query_one("#nnodes", Input).value.strip() or "1"
        if not nnodes_text.isdigit() or int(nnodes_text) < 1:
            raise UsageError(f"nodes {nnodes_text!r}: must be a positive integer")
        backend = str(self.query_one("#backend", Select).value)
        runner = self.runner
        if runner == "script":
            runner = self.query_one("#script", Input).value.strip()
            if not runner:
                raise UsageError("script: give the path of your training script")
        quick = self.query_one("#quick", Input).value.split()
        for item in quick:
            if "=" not in item:
                raise UsageError(f"quick flags {item!r}: expected key=value, e.g. steps=200")
        return LaunchRequest(
            runner=runner,
            sets=[*self._sets(), *quick],
            envs=self.query_one("#env", Input).value.split(),
            nproc=int(nproc_text),
            nnodes=int(nnodes_text),
            backend=backend,
            backend_options=self._backend_options(backend),
            name=self.query_one("#name", Input).value.strip() or None,
            extra_args=list(self.parent_record.spec.extra_args) if self.parent_record else [],
            parent_id=self.parent_record.id if self.parent_record else None,
        )

    @on(Input.Changed)
    def on_input_changed(self, event: Input.Changed) -> None:
        name = (event.input.id or "").removeprefix("flag-")
        info = next((f for f in self.table if f.name == name), None)
        error = ""
        if info is not None and event.value.strip():
            try:
                check_value(info, event.value.strip())
            except UsageError as exc:
                error = str(exc)
        self._show_error(error)
        self._update_diff()

    @on(Switch.Changed)
    @on(Select.Changed)
    def on_choice_changed(self) -> None:
        self._update_diff()

    def _update_diff(self) -> None:
        if self.parent_record is None:
            return
        try:
            sets = dict(item.split("=", 1) for item in self._sets() if "=" in item)
        except Exception:  # a widget is being replaced: the next change redraws the diff
            return
        before = {k: flag_text(v) for k, v in self.parent_record.spec.flags.items()}
        changed = [
            f"{k}: {before.get(k, '(default)')} -> {sets.get(k, '(default)')}"
            for k in sorted(set(before) | set(sets))
            if before.get(k) != sets.get(k)
        ]
        self.query_one("#diff", Static).update(
            "changes: " + "; ".join(changed) if changed else "no changes yet"
        )

    def _show_error(self, message: str) -> None:
        self.query_one("#error", Static).update(message)

    # ---- buttons ----

    @on(Button.Pressed, "#launch")
    def action_submit(self) -> None:
        try:
            request = self._request()
        except UsageError as exc:
            self._show_error(str(exc))
            return
        self._show_error("checking…")
        self._check(request)

    @work(thread=True, exclusive=True, group="launch-check")
    def _check(self, request: LaunchRequest) -> None:
        """The CLI's own checks, so the form stays open with the message when something is wrong."""
        try:
            request.build_spec(self.console)
        except UsageError as exc:
            self.app.call_from_thread(self._show_error, str(exc))
            return
        self.app.call_from_thread(self.dismiss, request)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


def _flag_widgets(info: FlagInfo, initial: str | bool | None) -> list[Any]:
    kind = info.type + (f", {info.constraint.replace('_', '-')}" if info.constraint else "")
    label = Label(f"{info.name} ({kind})")
    if info.type == "switch":
        value = bool(initial) if initial is not None else bool(info.default)
        return [label, Switch(value=value, id=f"flag-{info.name}"), Static(info.help, classes="help")]
    if info.choices:
        value = (
            str(initial) if initial is not None else (info.default if info.default in info.choices else None)
        )
        select = Select(
            [(c, c) for c in info.choices],
            value=value if value is not None else Select.NULL,
            allow_blank=value is None,
            id=f"flag-{info.name}",
        )
        return [label, select, Static(info.help, classes="help")]
    placeholder = f"default {info.default}" if info.default is not None else "unset"
    value = "" if initial is None else str(initial)
    return [
        label,
        Input(value, placeholder=placeholder, id=f"flag-{info.name}"),
        Static(info.help, classes="help"),
    ]
