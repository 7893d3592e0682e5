"""`trnconsole serve`: the real console in a real browser (headless Chromium over the DevTools protocol),
served from 127.0.0.1 with nothing fetched from anywhere else, and refused to pages from other sites."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import psutil
import pytest
from conftest import make_recorded_home

from trnconsole.commands.serve import DEFAULT_PORT, bind, browser_url, exposure_warning
from trnconsole.core.errors import UsageError
from trnconsole.web.server import host_names, request_problem

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's chromium: apt-get update && apt-get install -y --no-install-recommends chromium",
)

SERVE = ["-m", "trnconsole.cli", "serve", "--port", "0", "--json"]


class Served:
    """A running `trnconsole serve --port 0 --json` process and what it printed first."""

    def __init__(self, home: Path, cwd: Path) -> None:
        env = {**os.environ, "TRNCONSOLE_HOME": str(home), "TRNCONSOLE_CONFIG": str(home / "config.toml")}
        self.stderr_path = cwd / "serve.stderr"
        with self.stderr_path.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, *SERVE],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        line = self.process.stdout.readline()
        assert line, f"serve exited {self.process.wait()}: {self.stderr}"
        self.info = json.loads(line)
        self.url: str = self.info["url"]

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def consoles(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait()


@pytest.fixture
def served(tmp_path):
    home = tmp_path / "home"
    (run_id,) = make_recorded_home(home)
    cwd = tmp_path / "elsewhere"  # the consoles must find the home through the environment, not the cwd
    cwd.mkdir()
    server = Served(home, cwd)
    server.run_id = run_id
    try:
        yield server
    finally:
        server.stop()


def fetch(url: str, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


# ---- who may connect ----


def test_only_same_origin_requests_by_address_or_own_name_are_served():
    names = host_names("127.0.0.1")
    assert request_problem("127.0.0.1:8000", None, names) is None
    assert request_problem("localhost:8000", "http://localhost:8000", names) is None
    assert request_problem("[::1]:8000", "http://[::1]:8000", names) is None
    assert request_problem(f"{socket.gethostname()}:8000", None, names) is None
    assert request_problem("10.1.2.3:8000", "http://10.1.2.3:8000", names) is None  # reached by address
    # Another site's page opening the websocket, and a DNS-rebound name pointing at this server:
    assert "http://evil.example" in request_problem("127.0.0.1:8000", "http://evil.example", names)
    assert "'evil.example'" in request_problem("evil.example:8000", "http://evil.example:8000", names)
    assert request_problem("127.0.0.1:8000", "null", names) is not None  # a sandboxed or file: page
    assert request_problem(None, None, names) == "no Host header"
    assert request_problem("box.lan:8000", None, host_names("box.lan")) is None  # the name given to --host


def test_only_non_loopback_binds_warn_and_wildcards_open_through_loopback():
    assert exposure_warning("127.0.0.1", 8000) is None and exposure_warning("::1", 8000) is None
    everywhere = exposure_warning("0.0.0.0", 8000)
    assert (
        "every interface" in everywhere
        and "anyone who can reach this port controls the console" in everywhere
    )
    assert "ssh -L 8000:127.0.0.1:8000" in everywhere
    assert "10.1.2.3" in exposure_warning("10.1.2.3", 9000)
    assert browser_url("0.0.0.0", 8000) == "http://127.0.0.1:8000/"
    assert browser_url("::", 8000) == "http://[::1]:8000/"
    assert browser_url("127.0.0.1", 8123) == "http://127.0.0.1:8123/"


def test_bind_takes_a_free_port_unless_one_was_asked_for():
    try:
        default = socket.create_server(("127.0.0.1", DEFAULT_PORT))
    except OSError:
        default = None  # something else holds it already: the same situation
    try:
        sock = bind("127.0.0.1", None)
        with sock:
            assert sock.getsockname()[1] != DEFAULT_PORT
            taken = sock.getsockname()[1]
            with pytest.raises(UsageError, match=rf"--port {taken}: already in use.*--port 0"):
                bind("127.0.0.1", taken)
    finally:
        if default is not None:
            default.close()
    with bind("127.0.0.1", 0) as sock:
        assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] > 0
    with pytest.raises(UsageError, match=r"--port 70000: must be 0-65535"):
        bind("127.0.0.1", 70000)
    with pytest.raises(UsageError, match=r"--host no-such-host\.invalid: cannot resolve"):
        bind("no-such-host.invalid", 0)
    with pytest.raises(UsageError, match=r"--host 192\.0\.2\.1: not an address of this machine"):
        bind("192.0.2.1", 0)


# ---- the server process ----


def test_the_page_and_its_assets_come_only_from_the_server(served):
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", served.url) and served.stderr == ""
    status, page = fetch(served.url)
    assert status == 200 and "<title>trnconsole</title>" in page
    port = served.info["port"]
    assert f'data-session-websocket-url="ws://127.0.0.1:{port}/ws"' in page
    # xmlns names a namespace, it loads nothing; every other reference is a path on this server.
    references = re.findall(r'(?:src|href)="([^"]+)"|url\("([^"]+)"\)', page)
    paths = [a or b for a, b in references]
    assert "/static/js/textual.js" in paths and "/static/fonts/RobotoMono-VariableFont_wght.ttf" in paths
    assert [p for p in paths if not p.startswith("/static/")] == []
    assert re.findall(r"https?://(?!www\.w3\.org/2000/svg)", page) == []
    for path in paths:
        assert fetch(served.url.rstrip("/") + path)[0] == 200, path
    # Reached under another name (a tunnel, an interface), the page points the websocket at that name.
    assert 'websocket-url="ws://localhost:' in fetch(served.url, Host=f"localhost:{port}")[1]


def test_pages_from_other_sites_get_no_console(served):
    port = served.info["port"]
    status, text = fetch(served.url + "ws", Origin="http://evil.example")
    assert status == 403 and "http://evil.example may not use this console" in text
    assert fetch(served.url, Host=f"evil.example:{port}")[0] == 403

    async def handshake(origin: str) -> int:
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(served.url + "ws", origin=origin):
                    return 101
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

    assert asyncio.run(handshake("http://evil.example")) == 403
    assert served.consoles() == []  # refused before any console was started


# ---- in a real browser ----


class DevTools:
    """A page of headless Chromium driven over the Chrome DevTools Protocol with aiohttp's websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict] = []
        self.pending: dict[int, asyncio.Future] = {}
        self.next_id = 0
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data:
                self.pending.pop(data["id"]).set_result(data)
            else:
                self.events.append(data)

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        reply = self.pending[self.next_id] = asyncio.get_running_loop().create_future()
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        data = await asyncio.wait_for(reply, 20)
        assert "error" not in data, data
        return data["result"]

    async def evaluate(self, expression: str):
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def requested_urls(self) -> list[str]:
        urls = []
        for event in self.events:
            if event["method"] == "Network.requestWillBeSent":
                urls.append(event["params"]["request"]["url"])
            elif event["method"] == "Network.webSocketCreated":
                urls.append(event["params"]["url"])
        return urls


# textual.js keeps its xterm.js Terminal in a closure and draws it on a canvas, so the DOM holds no text: this
# runs before the page's scripts and keeps the Terminal it assigns to `this.terminal`, to read its buffer.
KEEP_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {configurable: true, set(value) {
  Object.defineProperty(this, "terminal", {value, writable: true, configurable: true, enumerable: true});
  if (value && value.buffer && value.buffer.active) window.__terminal = value;
}});
"""
SCREEN_TEXT = """(() => {
  const terminal = window.__terminal;
  if (!terminal) return null;
  const buffer = terminal.buffer.active, rows = [];
  for (let y = 0; y < terminal.rows; y++) {
    const line = buffer.getLine(buffer.viewportY + y);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
})()"""


def start_chromium(profile: Path, log: Path) -> tuple[subprocess.Popen, int]:
    profile.mkdir()
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "--window-size=1400,900",  # room for the dashboard's run numbers beside the table
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = active.read_text().splitlines() if active.exists() else []
        if len(lines) >= 2:
            return process, int(lines[0])
        assert process.poll() is None, f"chromium exited {process.returncode}: {log.read_text()[-2000:]}"
        time.sleep(0.1)
    raise AssertionError(f"chromium wrote no DevToolsActivePort: {log.read_text()[-2000:]}")


def stop_process_group(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@needs_chromium
def test_chromium_shows_the_recorded_run_from_loopback_only_and_the_server_stops_its_console(
    served, tmp_path
):
    chromium, devtools_port = start_chromium(tmp_path / "profile", tmp_path / "chromium.log")

    async def scenario() -> tuple[str, list[str], bool]:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{devtools_port}/json/list") as reply:
                targets = await reply.json()
            page = next(t for t in targets if t["type"] == "page")
            async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                tab = DevTools(ws)
                await tab.call("Network.enable")
                await tab.call("Page.enable")
                await tab.call("Page.addScriptToEvaluateOnNewDocument", source=KEEP_TERMINAL)
                await tab.call("Page.navigate", url=served.url)
                screen, deadline = "", time.monotonic() + 45
                while "step 80/80" not in screen:
                    assert time.monotonic() < deadline, (
                        f"no run on the page; it shows:\n{screen}\n{served.stderr}"
                    )
                    await asyncio.sleep(0.5)
                    screen = await tab.evaluate(SCREEN_TEXT) or ""
                # The server stops while the tab is open: the console it started for the tab quits with it
                # and the page says the session ended.
                consoles = served.consoles()
                assert len(consoles) == 1 and "trnconsole.cli" in " ".join(consoles[0].cmdline())
                assert served.stop() == 0
                _, alive = psutil.wait_procs(consoles, timeout=10)
                assert alive == []
                ended, deadline = False, time.monotonic() + 10
                while not ended and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                    ended = await tab.evaluate("document.body.classList.contains('-closed')")
                tab.reader.cancel()
                return screen, tab.requested_urls(), ended

    try:
        screen, urls, ended = asyncio.run(scenario())
    finally:
        stop_process_group(chromium)
    # The dashboard of the real console, on the home given to the server: the run, its steps and its log.
    assert served.run_id in screen and "recorded" in screen and "completed" in screen
    assert "step 80/80 (100%)" in screen and "(0, 80) eval_loss" in screen
    assert ended, "the page did not show that the session ended"
    # Every request the page made, the font and the websocket included, went to the server on loopback.
    port = served.info["port"]
    assert served.url in urls and f"ws://127.0.0.1:{port}/ws" in {u.split("?")[0] for u in urls}
    assert any(u.endswith("/static/fonts/RobotoMono-VariableFont_wght.ttf") for u in urls)
    elsewhere = [u for u in urls if urlsplit(u).hostname != "127.0.0.1" and not u.startswith("data:")]
    assert elsewhere == []
