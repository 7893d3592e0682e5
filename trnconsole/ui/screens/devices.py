"""Devices full-screen: every NeuronCore with its utilisation history, TFLOP/s and memory, the devices, the
runtimes' errors and latency, the GPUs; and neuron-ls's list of processes holding cores, where a leftover
(no run of ours) can be killed after confirmation."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from ...devicefmt import snapshot_text


class DevicesScreen(Screen):
    BINDINGS = [
        Binding("escape,d", "back", "Back"),
        Binding("i", "inventory", "Reread neuron-ls"),
        Binding("k", "kill", "Kill leftover"),
    ]
    DEFAULT_CSS = """
    DevicesScreen #report { height: 3fr; }
    DevicesScreen #report Static { width: auto; text-wrap: nowrap; }
    DevicesScreen #holders-title { height: 1; padding: 0 1; color: $text-muted; }
    DevicesScreen DataTable { height: 1fr; min-height: 4; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.inventory: Any = None
        self.leftover_pids: set[int] = set()

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="report"):
            yield Static("sampling…", id="report-text", markup=False)
        yield Static("processes holding NeuronCores (neuron-ls): reading…", id="holders-title", markup=False)
        yield DataTable(id="holders", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("PID", "COMMAND", "DEVICES", "CORES", "RUNTIME", "OWNER")
        table.focus()
        self.draw()
        self.set_interval(1.0, self.draw)
        self.action_inventory()

    def draw(self) -> None:
        app: Any = self.app
        snapshot = app.snapshot
        if snapshot is None:
            return
        hub = app.monitor_hub
        history = hub.neuron.history if hub is not None and hasattr(hub, "neuron") else None
        labels = {}
        for run_id in snapshot.runs:
            record = app.live.record(run_id)
            if record is not None:
                labels[run_id] = record.name or record.runner
        text = snapshot_text(snapshot, history, max(80, self.size.width - 2), labels)
        self.query_one("#report-text", Static).update(text)

    def known_pids(self) -> set[int]:
        snapshot = self.app.snapshot  # type: ignore[attr-defined]
        if snapshot is None:
            return set()
        return {pid for devices in snapshot.runs.values() if devices.tree for pid in devices.tree.pids}

    # ---- neuron-ls ----

    @work(thread=True, exclusive=True, group="neuron-ls")
    def action_inventory(self) -> None:
        from ...monitors.neuron import neuron_ls

        inventory = neuron_ls()
        self.app.call_from_thread(self._show_inventory, inventory)

    def _show_inventory(self, inventory: Any) -> None:
        from ...monitors.neuron import leftovers

        self.inventory = inventory
        title = self.query_one("#holders-title", Static)
        table = self.query_one(DataTable)
        table.clear()
        if inventory.problem:
            title.update(f"neuron-ls: {inventory.problem}")
            return
        known = self.known_pids()
        self.leftover_pids = {h.pid for h in leftovers(inventory, known)}
        holders = inventory.holders()
        title.update(
            f"neuron-ls: {len(inventory.devices)} device(s), {inventory.core_count} NeuronCores; "
            f"{len(holders)} process(es) hold cores, {len(self.leftover_pids)} leftover(s)"
            + ("  ·  k kills the selected leftover" if self.leftover_pids else "")
        )
        for pid, holder in sorted(holders.items()):
            owner = "LEFTOVER" if pid in self.leftover_pids else self._owner(pid)
            table.add_row(
                str(pid),
                holder.command[:40],
                ",".join(map(str, holder.devices)),
                _ranges(holder.core_ids),
                holder.runtime_version,
                owner,
                key=str(pid),
            )

    def _owner(self, pid: int) -> str:
        snapshot = self.app.snapshot  # type: ignore[attr-defined]
        for run_id, devices in (snapshot.runs if snapshot else {}).items():
            if devices.tree and pid in devices.tree.pids:
                return f"run {run_id}"
        return "-"

    # ---- actions ----

    def action_kill(self) -> None:
        from .dialogs import ConfirmScreen

        table = self.query_one(DataTable)
        if not table.row_count:
            return
        pid = int(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value or 0)
        if pid not in self.leftover_pids:
            self.notify(f"process {pid} belongs to a run: stop the run instead (s on the dashboard)")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._kill(pid)

        self.app.push_screen(
            ConfirmScreen(
                f"Kill leftover process {pid}, which holds NeuronCores?\n"
                "SIGTERM to its process group, SIGKILL after 5 s (checked again with neuron-ls first)."
            ),
            answered,
        )

    @work(thread=True, group="kill")
    def _kill(self, pid: int) -> None:
        from ...monitors.neuron import kill_leftover

        outcome = kill_leftover(pid, grace_s=5.0)
        severity = "information" if outcome.action in ("terminated", "killed", "gone") else "error"
        self.app.call_from_thread(self.notify, outcome.message, severity=severity)
        self.action_inventory()

    def action_back(self) -> None:
        self.app.pop_screen()


def _ranges(ids: tuple[int, ...]) -> str:
    """Core ids as compact ranges: 0-3,8."""
    out: list[str] = []
    for i in sorted(ids):
        if out and "-" not in out[-1].split(",")[-1] and int(out[-1]) == i - 1:
            out[-1] = f"{out[-1]}-{i}"
        elif out and "-" in out[-1] and int(out[-1].split("-")[1]) == i - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)
