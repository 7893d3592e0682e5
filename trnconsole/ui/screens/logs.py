"""A run's whole log full-screen, with search (/ to type, Enter or n for the next match, N the previous)."""

from __future__ import annotations

import re

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Log, Static

from .dashboard import clean_line

MAX_LINES = 200_000


class LogsScreen(Screen):
    BINDINGS = [
        Binding("escape,l", "back", "Back"),
        Binding("slash", "search", "Search"),
        Binding("n", "next_match(1)", "Next match"),
        Binding("N", "next_match(-1)", "Previous match"),
        Binding("G", "end", "End"),
    ]
    DEFAULT_CSS = """
    LogsScreen #search { height: 1; border: none; padding: 0 1; }
    LogsScreen #status { height: 1; padding: 0 1; color: $text-muted; }
    LogsScreen Log { height: 1fr; }
    """

    def __init__(self, run_id: str, backend: object, record: object) -> None:
        super().__init__()
        self.run_id = run_id
        self.backend = backend
        self.record = record
        self.lines: list[str] = []
        self.matches: list[int] = []
        self.current = -1
        self.cursor: dict | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="search (regex), Enter: first match", id="search")
        yield Static(f"log of {self.run_id}: loading…", id="status")
        yield Log(max_lines=MAX_LINES, auto_scroll=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Log).focus()
        self._load()
        self.set_interval(1.0, self._load)

    @work(thread=True, exclusive=True, group="log-screen")
    def _load(self) -> None:
        new, cursor = self.backend.logs(self.record, self.cursor)  # type: ignore[attr-defined]
        self.cursor = cursor
        if new:
            self.app.call_from_thread(self._append, [clean_line(line) for line in new])
        elif not self.lines:
            self.app.call_from_thread(self._status, f"log of {self.run_id}: empty so far")

    def _append(self, lines: list[str]) -> None:
        log = self.query_one(Log)
        at_end = log.is_vertical_scroll_end or not self.lines
        self.lines.extend(lines)
        log.write_lines(lines, scroll_end=at_end)
        self._status(f"log of {self.run_id}: {len(self.lines)} lines" + self._match_text())

    def _status(self, text: str) -> None:
        self.query_one("#status", Static).update(text)

    def _match_text(self) -> str:
        if not self.matches:
            return ""
        return f", match {self.current + 1} of {len(self.matches)} (line {self.matches[self.current] + 1})"

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        try:
            pattern = re.compile(text, re.IGNORECASE)
        except re.error:
            pattern = re.compile(re.escape(text), re.IGNORECASE)
        self.matches = [i for i, line in enumerate(self.lines) if text and pattern.search(line)]
        self.current = -1
        self.query_one(Log).focus()
        if not self.matches:
            self._status(f"log of {self.run_id}: {len(self.lines)} lines, no match for {text!r}")
            return
        self.action_next_match(1)

    def action_next_match(self, direction: int) -> None:
        if not self.matches:
            return
        self.current = (self.current + direction) % len(self.matches)
        line = self.matches[self.current]
        log = self.query_one(Log)
        log.scroll_to(y=max(0, line - log.size.height // 2), animate=False)
        self._status(f"log of {self.run_id}: {len(self.lines)} lines" + self._match_text())

    def action_end(self) -> None:
        self.query_one(Log).scroll_end(animate=False)

    def action_back(self) -> None:
        self.app.pop_screen()
