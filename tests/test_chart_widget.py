"""The chart widget inside a real Textual app, driven like a person would: what it shows, when it redraws."""

from __future__ import annotations

import math

import pytest
from textual.app import App, ComposeResult
from textual.color import Color
from textual.geometry import Region

from trnconsole.core.series import Series
from trnconsole.ui.widgets import chart as chart_module
from trnconsole.ui.widgets.chart import EMPTY_MESSAGE, Chart, compact, layout_chart

pytestmark = pytest.mark.anyio  # the async tests run on asyncio through anyio's pytest plugin


class ChartApp(App):
    CSS = "Chart { width: 1fr; height: 1fr; }"

    def __init__(self, chart_css: str = "") -> None:
        super().__init__()
        if chart_css:
            self.CSS = f"Chart {{ {chart_css} }}"

    def compose(self) -> ComposeResult:
        yield Chart(id="chart")


def loss_series(n: int, start: int = 0) -> tuple[list[float], list[float]]:
    xs = list(range(start, start + n))
    return xs, [2.0 / (1 + x * 1e-4) + (3.0 if x == 4321 else 0.0) for x in xs]


def screen_lines(chart: Chart) -> list[str]:
    width, height = chart.size
    return [strip.text for strip in chart.render_lines(Region(0, 0, width, height))]


def braille_cells(lines: list[str]) -> int:
    return sum("\u2800" < c <= "\u28ff" for line in lines for c in line)


async def test_a_long_series_is_drawn_with_its_title_and_range() -> None:
    series = Series()
    series.extend(*loss_series(100_000))
    app = ChartApp()
    async with app.run_test(size=(60, 12)) as pilot:
        chart = app.query_one(Chart)
        chart.update_series(series, "loss")
        await pilot.pause()
        lines = screen_lines(chart)
    assert len(lines) == 12 and all(len(line) == 60 for line in lines)
    assert lines[0].startswith("loss  0.182  min 0.182  max 4.4 ")
    # The axis runs a little past the data (0.182 .. 4.40) and is labelled at its ends.
    assert lines[1].startswith("  4.48┤") and lines[-1].startswith("0.0975┤")
    assert all(line.startswith("      │") for line in lines[2:-1])
    assert braille_cells(lines[1:]) > 50
    # The one-step spike at x=4321 is still there: the only dots in the top row of cells are its.
    top_row = lines[1].split("┤")[1]
    assert top_row.strip("\u2800") and len(top_row.strip("\u2800")) <= 2


async def test_more_points_and_a_new_update_redraw_the_chart() -> None:
    series = Series()
    series.extend(*loss_series(1000))
    app = ChartApp()
    async with app.run_test(size=(60, 12)) as pilot:
        chart = app.query_one(Chart)
        chart.update_series(series, "loss")
        await pilot.pause()
        before = screen_lines(chart)
        series.extend([1000, 1001], [50.0, 60.0])
        await pilot.pause()
        assert screen_lines(chart) == before  # nothing is drawn until the app hands the series over again
        chart.update_series(series, "loss")
        await pilot.pause()
        after = screen_lines(chart)
    assert after != before
    assert "max 60" in after[0] and "  60  " in after[0]


async def test_an_unchanged_series_is_not_laid_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real_layout = chart_module.layout_chart

    def counting_layout(*args: object) -> chart_module.ChartLines:
        calls.append(1)
        return real_layout(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(chart_module, "layout_chart", counting_layout)
    series = Series()
    series.extend(*loss_series(5000))
    app = ChartApp()
    async with app.run_test(size=(60, 12)) as pilot:
        chart = app.query_one(Chart)
        chart.update_series(series, "loss")
        await pilot.pause()
        laid_out = len(calls)
        for _ in range(5):
            chart.update_series(series, "loss")
            chart.refresh()
            await pilot.pause()
        assert len(calls) == laid_out
        series.add(5000, 1.0)
        chart.update_series(series, "loss")
        await pilot.pause()
        assert len(calls) == laid_out + 1


async def test_a_missing_or_empty_series_says_no_data_yet() -> None:
    app = ChartApp()
    async with app.run_test(size=(60, 12)) as pilot:
        chart = app.query_one(Chart)
        chart.update_series(None, "loss")
        await pilot.pause()
        lines = screen_lines(chart)
        assert lines[0].rstrip() == "loss" and lines[1].rstrip() == EMPTY_MESSAGE
        chart.update_series(Series(), "")
        await pilot.pause()
        assert screen_lines(chart)[0].rstrip() == EMPTY_MESSAGE
        assert braille_cells(screen_lines(chart)) == 0


async def test_the_line_takes_its_colour_from_the_theme() -> None:
    series = Series()
    series.extend(*loss_series(2000))
    app = ChartApp()
    async with app.run_test(size=(60, 12)) as pilot:
        chart = app.query_one(Chart)
        chart.update_series(series, "loss")

        def line_colour() -> str:
            strip = chart.render_lines(Region(0, 0, *chart.size))[-1]
            colours = {s.style.color for s in strip if s.style and "\u2800" <= s.text[:1] <= "\u28ff"}
            assert len(colours) == 1
            return colours.pop().triplet.hex  # type: ignore[union-attr]

        for theme in ("textual-dark", "nord"):
            app.theme = theme
            await pilot.pause()
            assert line_colour() == Color.parse(app.theme_variables["accent"]).hex.lower()


@pytest.mark.parametrize(
    ("size", "chart_css"),
    [
        ((20, 3), ""),
        ((60, 12), "width: 8; height: 2;"),
        ((60, 12), "width: 1; height: 1;"),
        ((60, 12), "width: 0; height: 0;"),
    ],
)
async def test_tiny_sizes_draw_without_crashing(size: tuple[int, int], chart_css: str) -> None:
    series = Series()
    series.extend(*loss_series(3000))
    app = ChartApp(chart_css)
    async with app.run_test(size=size) as pilot:
        chart = app.query_one(Chart)
        for shown in (series, None):
            chart.update_series(shown, "samples per s")
            await pilot.pause()
            width, height = chart.size
            lines = screen_lines(chart)
            assert len(lines) == height and all(len(line) == width for line in lines)
    if size == (20, 3):
        assert len(lines) == 3


def test_layout_fits_any_size() -> None:
    series = Series()
    series.extend(*loss_series(500))
    for width in range(0, 25):
        for height in range(0, 5):
            lines = layout_chart(series, "a long metric name", width, height)
            assert len(lines.name) + len(lines.stats) <= width
            assert len(lines.plot) == (max(height - 1, 0) if width else 0)
            for label, row in zip(lines.labels or [""] * len(lines.plot), lines.plot, strict=True):
                assert len(label) + len(row) == width
    assert layout_chart(series, "loss", 20, 3).labels  # labels still fit at 20 x 3


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (0.512, "0.512"),
        (123.456, "123"),
        (1234, "1.23k"),
        (-1234, "-1.23k"),
        (999_999, "1M"),
        (12_345_678, "12.3M"),
        (4.5e-4, "4.5e-04"),
        (2e15, "2.0e+15"),
        (math.nan, "nan"),
        (None, "-"),
    ],
)
def test_compact_numbers(value: float | None, text: str) -> None:
    assert compact(value) == text
