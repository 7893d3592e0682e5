"""UI speed: the chart's redraw from a bounded series beside a redraw from every raw point and Textual's
`Sparkline`, then the console's time to first frame in a terminal beside a bare Textual app, in one run.

Goals: a 120x32 chart redraw well under a 4 Hz frame budget at any run length; first frame <= 1.5x a
Textual hello-world.

    python benchmarks/ui.py [--repeats 5] [--skip-startup]
"""

from __future__ import annotations

import argparse
import fcntl
import io
import json
import os
import pty
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from rich.console import Console
from textual.color import Color
from textual.content import Content
from textual.renderables.sparkline import Sparkline
from textual.style import Style

from trnconsole.core.series import Series
from trnconsole.ui.braille import column_extents, data_range, render_braille
from trnconsole.ui.widgets.chart import ChartLines, chart_content, compact, layout_chart

REPO = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 120, 32
SIZES = (10_000, 100_000, 1_000_000)
STYLES = {
    "title": Style(bold=True),
    "line": Style(foreground=Color.parse("#ffa62b")),
    "axis": Style(foreground=Color.parse("#a0a0a0")),
    "empty": Style(foreground=Color.parse("#a0a0a0")),
}
GOAL_STARTUP_RATIO = 1.5
STARTUP_TIMEOUT_S = 20.0
HEAVY = ("torch", "boto3", "kubernetes", "tensorboard", "numpy")

HELLO_MARKER = "hello from textual"
HELLO_APP = f"""
from textual.app import App
from textual.widgets import Static

class Hello(App):
    def compose(self):
        yield Static({HELLO_MARKER!r})

Hello().run()
"""
CONSOLE_MARKER = "trnconsole"
CONSOLE_MODULE = "trnconsole.ui.app"
IMPORTS_PROBE = f"""
import json, sys
try:
    import {CONSOLE_MODULE}
except ModuleNotFoundError as error:
    print(json.dumps({{"missing": error.name, "error": str(error)}}))
else:
    print(json.dumps({{"heavy": sorted(m for m in {HEAVY!r} if m in sys.modules)}}))
"""
ALT_SCREEN, ALT_SCREEN_EXIT = b"\x1b[?1049h", b"\x1b[?1049l"
ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]"
)


# ---- chart redraw ----


def loss_curve(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A noisy decaying loss with a few one-step spikes, x = step."""
    rng = np.random.default_rng(seed)
    xs = np.arange(n, dtype=np.float64)
    ys = 2.0 / (1 + xs * (10 / n)) + rng.random(n) * 0.05
    ys[rng.integers(0, n, 5)] += 3.0
    return xs, ys


def redraw(series: Series) -> Content:
    """The widget's path: downsample, column_extents, render_braille, then the Textual Content."""
    return chart_content(layout_chart(series, "loss", WIDTH, HEIGHT), **STYLES)


def redraw_raw(xs: np.ndarray, ys: np.ndarray) -> Content:
    """The same chart from every raw point: per-column min/max in numpy, no bounded series."""
    finite = ys[np.isfinite(ys)]
    lo, hi = data_range([finite.min()], [finite.max()])
    top, bottom = compact(hi), compact(lo)
    label_width = max(len(top), len(bottom))
    plot_width, plot_height = WIDTH - label_width - 1, HEIGHT - 1
    column_min, column_max = column_extents(xs, ys, ys, 2 * plot_width)
    plot = render_braille(column_min, column_max, plot_width, plot_height, lo, hi)
    labels = [" " * label_width + "│"] * plot_height
    labels[0], labels[-1] = top.rjust(label_width) + "┤", bottom.rjust(label_width) + "┤"
    stats = f"  {compact(ys[-1])}  min {compact(finite.min())}  max {compact(finite.max())}"
    return chart_content(ChartLines("loss", stats, tuple(labels), tuple(plot)), **STYLES)


def to_segments(console: Console, renderable: object) -> int:
    return len(list(console.render(renderable, console.options.update(width=WIDTH, height=HEIGHT))))


def timed(function: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(best, median) seconds of `repeats` calls, after one untimed warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def ms(pair: tuple[float, float]) -> str:
    return f"{pair[0] * 1e3:9.3f} {pair[1] * 1e3:9.3f}"


def chart_benchmark(repeats: int) -> None:
    console = Console(width=WIDTH, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    print(f"a) chart redraw at {WIDTH}x{HEIGHT} cells, best and median of {repeats} (ms)\n")
    print(
        f"{'points':>10}  {'chart':>19}  {'chart+segments':>19}  {'raw points':>19}  {'Sparkline':>19}"
        f"  {'raw/chart':>9}  {'Spark/chart+seg':>15}"
    )
    for n in SIZES:
        xs, ys = loss_curve(n)
        series = Series()
        series.extend(xs.tolist(), ys.tolist())
        raw_list = ys.tolist()
        chart = timed(lambda s=series: redraw(s), repeats)
        chart_seg = timed(lambda s=series: to_segments(console, redraw(s)), repeats)
        raw = timed(lambda x=xs, y=ys: redraw_raw(x, y), repeats)
        # What the Sparkline widget's render() returns for a 120x32 area; it rescans every point per row.
        spark = timed(
            lambda d=raw_list: to_segments(console, Sparkline(d, width=WIDTH, height=HEIGHT)),
            max(1, repeats if n < 1_000_000 else min(repeats, 3)),
        )
        print(
            f"{n:>10,}  {ms(chart)}  {ms(chart_seg)}  {ms(raw)}  {ms(spark)}"
            f"  {raw[1] / chart[1]:>8.1f}x  {spark[1] / chart_seg[1]:>14.1f}x"
        )
    print(
        f"\n  chart: Series (capacity {Series().capacity}) -> downsample -> column_extents -> render_braille "
        "-> Textual Content\n  raw points: the same drawing from every point (numpy per-column min/max)\n"
        "  Sparkline: textual.renderables.sparkline.Sparkline over the raw list, to Rich segments "
        "(at most 3 repeats at 1M)\n"
    )


# ---- time to first frame ----


def on_screen(output: bytes) -> str:
    """The text drawn on the alternate screen so far, escapes removed: a usage message printed before it
    is entered, or a traceback printed after it is left, is no frame."""
    at = output.find(ALT_SCREEN)
    if at < 0:
        return ""
    drawn = output[at:]
    left = drawn.find(ALT_SCREEN_EXIT)
    return ESCAPES.sub("", (drawn if left < 0 else drawn[:left]).decode("utf-8", "ignore"))


def first_frame(command: list[str], env: dict[str, str], marker: str) -> tuple[float | None, str]:
    """Seconds from start until `marker` shows on the alternate screen of a 120x32 pseudo-terminal, or None
    and why not. The process is killed either way."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", HEIGHT, WIDTH, 0, 0))
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO, start_new_session=True
    )
    os.close(slave)
    output = b""
    try:
        while True:
            remaining = start + STARTUP_TIMEOUT_S - time.perf_counter()
            if remaining <= 0:
                return None, f"{marker!r} not on screen within {STARTUP_TIMEOUT_S:.0f} s"
            if not select.select([master], [], [], remaining)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            if not chunk:
                code = process.wait()
                return None, f"exited with code {code} before showing {marker!r} on the alternate screen"
            output += chunk
            if marker in on_screen(output):
                return time.perf_counter() - start, ""
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        os.close(master)


def console_imports(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_PROBE], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        return f"importing {CONSOLE_MODULE} failed: {done.stderr.strip().splitlines()[-1:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "missing" in result:
        if result["missing"] == CONSOLE_MODULE:
            return f"{CONSOLE_MODULE} does not exist yet"
        return f"importing {CONSOLE_MODULE} failed: {result['error']}"
    heavy = result["heavy"]
    return f"heavy modules after importing {CONSOLE_MODULE}: {', '.join(heavy) if heavy else 'none'}"


def startup_benchmark(repeats: int) -> None:
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(WIDTH), "LINES": str(HEIGHT)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    hello_times: list[float] = []
    console_times: list[float] = []
    console_problem = ""
    print(f"b) time to first frame in a {WIDTH}x{HEIGHT} pseudo-terminal, {repeats} runs each, alternating\n")
    with tempfile.TemporaryDirectory(prefix="trnconsole-bench-") as scratch:
        for attempt in range(repeats):
            seconds, why = first_frame([sys.executable, "-c", HELLO_APP], env, HELLO_MARKER)
            if seconds is None:
                print(f"  hello-world app failed: {why}")
                return
            hello_times.append(seconds)
            if console_problem:
                continue
            home = Path(scratch) / f"home-{attempt}"  # a fresh, empty run store each time
            home.mkdir()
            seconds, why = first_frame(
                [sys.executable, "-m", "trnconsole.cli"],
                {**env, "TRNCONSOLE_HOME": str(home)},
                CONSOLE_MARKER,
            )
            if seconds is None:
                console_problem = why
            else:
                console_times.append(seconds)
        hello = statistics.median(hello_times)
        print(f"  {'textual hello-world':<22}{hello * 1e3:8.0f} ms median  ({_runs(hello_times)})")
        if console_problem:
            print(f"  {'trnconsole':<22}console not available: {console_problem}")
        else:
            console = statistics.median(console_times)
            print(f"  {'trnconsole':<22}{console * 1e3:8.0f} ms median  ({_runs(console_times)})")
            print(f"  ratio {console / hello:.2f}x (goal <= {GOAL_STARTUP_RATIO}x)")
        print(f"  {console_imports(env)}")


def _runs(times: list[float]) -> str:
    return ", ".join(f"{t * 1e3:.0f}" for t in times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed repeats of each measurement (default 5)"
    )
    parser.add_argument("--skip-startup", action="store_true", help="only the chart redraw part")
    args = parser.parse_args()
    repeats = max(1, args.repeats)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}\n")
    chart_benchmark(repeats)
    if not args.skip_startup:
        startup_benchmark(repeats)


if __name__ == "__main__":
    main()
