"""`trnconsole serve`: the console in a browser, a console per tab, on 127.0.0.1 unless --host asks."""

from __future__ import annotations

import argparse
import errno
import importlib.util
import ipaddress
import json
import os
import socket
import sys
from typing import Any

from ..core.errors import UsageError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def bind(host: str, port: int | None) -> socket.socket:
    """A listening socket on `host`: `port`, or DEFAULT_PORT, or any free port when that one is taken and no
    port was asked for. Port 0 asks for any free port."""
    if port is not None and not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: must be 0-65535 (0 for any free port)")
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise UsageError(
            f"--host {host}: cannot resolve it ({exc.strerror}); give an address like 127.0.0.1"
        ) from None
    for candidate in [port] if port is not None else [DEFAULT_PORT, 0]:
        try:
            return socket.create_server((address[0], candidate), family=family)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE and port is None:
                continue
            raise UsageError(_bind_problem(host, candidate, exc)) from None
    raise UsageError(f"--port: no free port on {host}")


def _bind_problem(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"--port {port}: already in use on {host}; choose another, or --port 0 for any free port"
    if exc.errno == errno.EACCES:
        return f"--port {port}: not allowed (ports below 1024 need root); choose a port above 1024"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"--host {host}: not an address of this machine; use 127.0.0.1 or one of its interfaces"
    return f"--host {host} --port {port}: cannot listen there ({exc.strerror})"


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def browser_url(address: str, port: int) -> str:
    """The URL to open for a bound address; a wildcard bind is opened through loopback on this machine."""
    ip = ipaddress.ip_address(address)
    if ip.is_unspecified:
        ip = ipaddress.ip_address("::1" if ip.version == 6 else "127.0.0.1")
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"http://{host}:{port}/"


def exposure_warning(address: str, port: int) -> str | None:
    """The warning for a bind that other machines can reach, None for loopback."""
    if is_loopback(address):
        return None
    where = "every interface of this machine" if ipaddress.ip_address(address).is_unspecified else address
    return (
        f"warning: serving the console on {where}, port {port}, with no password: anyone who can reach "
        "this port controls the console (launches and stops jobs, reads every run's logs and files). "
        f"Prefer the default 127.0.0.1 and an SSH tunnel: ssh -L {port}:127.0.0.1:{port} THIS_HOST"
    )


def cmd_serve(args: argparse.Namespace, console_factory: Any) -> int:
    if importlib.util.find_spec("textual_serve") is None:
        raise UsageError("serve: textual-serve is not installed; pip install textual-serve")
    from ..web.server import console_command, host_names, serve_forever

    host = args.host or DEFAULT_HOST
    console = console_factory()  # the home must open here, not first in each browser tab
    home = console.home.resolve()
    console.close()
    # Each tab's console inherits this environment: the same home whatever directory the server runs in.
    os.environ["TRNCONSOLE_HOME"] = str(home)
    sock = bind(host, args.port)
    address, port = sock.getsockname()[:2]
    url = browser_url(address, port)
    warning = exposure_warning(address, port)
    if warning:
        print(warning, file=sys.stderr, flush=True)

    def announce() -> None:
        if args.json:
            # One line, printed once the server accepts: a script reads it and opens the URL.
            print(json.dumps({"url": url, "host": address, "port": port, "home": str(home)}), flush=True)
        else:
            print(f"trnconsole for {home} at {url}  (a console per browser tab; Ctrl-C stops)", flush=True)

    command = console_command(args.theme)
    try:
        serve_forever(sock, command, host_names(host), announce)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0
