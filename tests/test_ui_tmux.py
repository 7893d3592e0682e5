"""End to end: the real `trnconsole` in tmux, a run launched with key presses, watched, and left running."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)"),
]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def sessions() -> list[str]:
    listed = subprocess.run(["tmux", "list-sessions", "-F", "#S"], capture_output=True, text=True)
    return listed.stdout.split()  # no server (no session left) exits 1 with nothing listed


def screen(session: str) -> str:
    return tmux("capture-pane", "-p", "-t", session)


def wait_for_screen(session: str, pattern: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = screen(session)
        if re.search(pattern, text):
            return text
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} never appeared; the screen:\n{text}")


def test_launch_from_the_console_in_tmux_watch_steps_quit_and_the_job_finishes(tmp_path):
    home = tmp_path / "home"
    session = f"trnconsole-test-{os.getpid()}"
    env = {**os.environ, "TRNCONSOLE_HOME": str(home), "TRNCONSOLE_CONFIG": str(tmp_path / "none.toml")}
    command = f"{sys.executable} -m trnconsole.cli"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "36", command],
        check=True,
        env={**env, "TERM": "xterm-256color"},
    )
    try:
        wait_for_screen(session, r"trnconsole")
        wait_for_screen(session, r"Launch")
        tmux("send-keys", "-t", session, "n")
        wait_for_screen(session, r"batch_size")  # the runner's flags were read
        tmux("send-keys", "-t", session, "-l", "synthetic=true device=cpu steps=200 log_every=5")
        tmux("send-keys", "-t", session, "C-s")
        # long enough that a fast machine is still training when the console quits
        wait_for_screen(session, r"step \d+/200")
        wait_for_screen(session, r"\[running\]")
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and session in sessions():
            time.sleep(0.3)
        assert session not in sessions()  # the console quit
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)

    def show() -> dict:
        listed = subprocess.run(
            [sys.executable, "-m", "trnconsole.cli", "runs", "--json"],
            capture_output=True,
            text=True,
            env=env,
        )
        (run,) = json.loads(listed.stdout)
        return run

    run = show()
    assert run["status"] == "running"  # quitting the console left the job alone
    deadline = time.monotonic() + 400
    while run["status"] == "running" and time.monotonic() < deadline:
        time.sleep(1)
        run = show()
    assert run["status"] == "completed"
    assert run["summary"]["step"] == 200
