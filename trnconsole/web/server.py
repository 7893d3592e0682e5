"""The web server behind `trnconsole serve`: textual-serve starts one real `trnconsole` per browser connection
and relays its screen; the page and every asset it loads come from this server, none from the internet."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import shlex
import signal
import socket
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

TEMPLATES = Path(__file__).parent / "templates"
PAGE = "app_index.html"
# How long the open consoles get to quit when the server stops, before they are terminated.
QUIT_GRACE_S = 5.0


def console_command(theme: str | None = None) -> list[str]:
    """The console a browser connection runs: this interpreter's trnconsole with no subcommand."""
    argv = [sys.executable, "-m", "trnconsole.cli"]
    if theme:
        argv += ["--theme", theme]
    return argv


def shell_line(argv: list[str]) -> str:
    """textual-serve starts its command through a shell; `exec` makes the console itself the server's child,
    so stopping the server reaches the console and never a shell in between."""
    return "exec " + shlex.join(argv)


def host_names(bind_host: str) -> frozenset[str]:
    """Names a browser may use in the Host header: localhost, the name given to --host and this machine's own
    names. Any other name could be a DNS-rebinding page pointing its own domain at this server."""
    names = {
        "localhost",
        bind_host.lower().strip("[]"),
        socket.gethostname().lower(),
        socket.getfqdn().lower(),
    }
    return frozenset(n for n in names if n)


def request_problem(host: str | None, origin: str | None, names: Iterable[str]) -> str | None:
    """Why a request must be refused, or None. A web page the user visits elsewhere could otherwise open this
    server's websocket (browsers let any page connect to 127.0.0.1) and drive a console that launches jobs."""
    if not host:
        return "no Host header"
    try:
        hostname = urlsplit(f"//{host}").hostname or ""
    except ValueError:
        return f"bad Host header {host!r}"
    if not _is_ip(hostname) and hostname not in names:
        return f"Host {hostname!r} is not this server's address; open the URL trnconsole serve printed"
    if origin is not None:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.lower():
            return f"a page from {origin} may not use this console"
    return None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class ConsoleServer:
    """The aiohttp application: the page, textual-serve's static files, and one console per websocket."""

    def __init__(self, command: list[str], names: Iterable[str], title: str = "trnconsole") -> None:
        import jinja2
        from textual_serve.server import Server

        # Only textual-serve's websocket and download handlers are used: they start the console process,
        # relay its screen and keys, and quit it when the tab closes. Its page is replaced by ours.
        self.relay = Server(shell_line(command), title=title)
        self.title = title
        self.names = frozenset(names)
        self.static_dir = self.relay.statics_path
        self.page = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True
        ).get_template(PAGE)
        self.sessions: set[asyncio.Task[Any]] = set()

    def application(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def same_origin_only(request: web.Request, handler: Any) -> web.StreamResponse:
            problem = request_problem(request.headers.get("Host"), request.headers.get("Origin"), self.names)
            if problem:
                raise web.HTTPForbidden(text=f"trnconsole serve: {problem}\n")
            return await handler(request)

        app = web.Application(middlewares=[same_origin_only])
        app.add_routes(
            [
                web.get("/", self.index, name="index"),
                web.get("/ws", self.websocket, name="websocket"),
                web.get("/download/{key}", self.relay.handle_download, name="download"),
                web.static("/static", self.static_dir, name="static"),
            ]
        )
        return app

    async def index(self, request: Any) -> Any:
        from aiohttp import web

        try:
            font_size = int(request.query.get("fontsize", "16"))
        except ValueError:
            font_size = 16
        # URLs from the Host the browser used, so the page works however it was reached (a tunnel, an
        # interface address), where textual-serve would write the bind address into it.
        scheme = "wss" if request.secure else "ws"
        html = self.page.render(
            font_size=max(6, min(font_size, 64)),
            app_websocket_url=f"{scheme}://{request.host}/ws",
            config={"static": {"url": "/static/"}},
            application={"name": self.title},
            ping_url="",
        )
        return web.Response(text=html, content_type="text/html")

    async def websocket(self, request: Any) -> Any:
        session = asyncio.ensure_future(self.relay.handle_websocket(request))
        self.sessions.add(session)
        try:
            return await session
        finally:
            self.sessions.discard(session)

    async def close_sessions(self) -> None:
        """Ask every console to quit (textual-serve sends it "quit" and waits); terminate the ones that do not
        within QUIT_GRACE_S. Only the server's own children are consoles: the jobs they launched run in
        sessions of their own, further down, and go on running."""
        sessions = list(self.sessions)
        for session in sessions:
            session.cancel()
        if sessions:
            await asyncio.wait(sessions, timeout=QUIT_GRACE_S)
        _terminate_children(QUIT_GRACE_S)


def _terminate_children(grace_s: float) -> None:
    import psutil

    children = psutil.Process().children(recursive=False)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def serve_forever(
    sock: socket.socket, command: list[str], names: Iterable[str], on_ready: Callable[[], None]
) -> None:
    """Serve on the bound `sock` until SIGINT or SIGTERM; `on_ready` runs once the server accepts."""
    asyncio.run(_serve(sock, command, names, on_ready))


async def _serve(
    sock: socket.socket, command: list[str], names: Iterable[str], on_ready: Callable[[], None]
) -> None:
    from aiohttp import web

    server = ConsoleServer(command, names)
    runner = web.AppRunner(server.application(), handle_signals=False, shutdown_timeout=2.0, access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await web.SockSite(runner, sock).start()
        on_ready()
        await stop.wait()
    finally:
        await server.close_sessions()
        await runner.cleanup()
