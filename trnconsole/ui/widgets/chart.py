"""A live chart of one metric: a title with its last value and range, y-axis labels and a braille line plot
drawn from a bounded `Series`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rich.control import strip_control_codes
from textual.app import RenderResult
from textual.content import Content, Span
from textual.style import Style
from textual.widget import Widget

if TYPE_CHECKING:
    from ...core.series import Series


EMPTY_MESSAGE = "no data yet"
_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_MIN_PLOT_WIDTH = 4  # below this, the axis labels are dropped to leave the plot some room


def compact(value: float | None) -> str:
    """A number in at most about six characters: `0.512`, `12.3`, `1.23k`, `4.5M`, `4.5e-04`."""
    if value is None:
        return "-"
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    rounded = float(f"{value:.3g}")
    if abs(value) < 0.01 or abs(rounded) >= 1e15:
        return f"{value:.1e}"
    for scale, suffix in _SUFFIXES:
        if abs(rounded) >= scale:
            return f"{rounded / scale:.3g}{suffix}"
    return f"{rounded:.3g}"


@dataclass(frozen=True)
class ChartLines:
    """What a chart shows at one size, as plain strings; styles are applied when drawn, so a theme change
    needs no new layout."""

    name: str
    stats: str
    labels: tuple[str, ...] = ()  # one per plot row, the axis character included
    plot: tuple[str, ...] = ()
    message: str = ""  # shown instead of the plot


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"[:width]


def layout_chart(series: Series | None, title: str, width: int, height: int) -> ChartLines:
    """The chart of `series` in a `width` x `height` cell area: one title line, then the plot rows."""
    if width <= 0 or height <= 0:
        return ChartLines("", "")
    title = " ".join(strip_control_codes(title).split())  # a metric name from a log: one clean line
    if series is None or series.count == 0:
        if height == 1 or not title:  # title and message share the one line
            message = f"{title}  {EMPTY_MESSAGE}" if title else EMPTY_MESSAGE
            return ChartLines("", "", message=_fit(message, width))
        return ChartLines(_fit(title, width), "", message=_fit(EMPTY_MESSAGE, width))
    name = _fit(title, width)
    stats = f"  {compact(series.last)}  min {compact(series.min)}  max {compact(series.max)}"
    stats = stats[: width - len(name)]
    plot_height = height - 1
    if plot_height == 0:
        return ChartLines(name, stats)

    # numpy costs a quarter of a second to import: keep it out of the console's start until data arrives.
    from ..braille import column_extents, data_range, render_braille

    smin, smax = series.min, series.max
    scale = data_range([smin], [smax]) if smin is not None and smax is not None else None
    labels: tuple[str, ...] = ()
    plot_width = width
    if scale is not None:
        top, bottom = compact(scale[1]), compact(scale[0])
        label_width = max(len(top), len(bottom))
        if width - label_width - 1 >= _MIN_PLOT_WIDTH:
            plot_width = width - label_width - 1
            blank = " " * label_width + "│"
            labels = tuple(
                top.rjust(label_width) + "┤"
                if row == 0
                else bottom.rjust(label_width) + "┤"
                if row == plot_height - 1
                else blank
                for row in range(plot_height)
            )
    pixels = 2 * plot_width
    xs, lows, highs, _ = series.downsample(pixels)
    column_min, column_max = column_extents(xs, lows, highs, pixels)
    if scale is None:
        plot = render_braille(column_min, column_max, plot_width, plot_height)
    else:
        plot = render_braille(column_min, column_max, plot_width, plot_height, scale[0], scale[1])
    return ChartLines(name, stats, labels, tuple(plot))


def chart_content(lines: ChartLines, title: Style, line: Style, axis: Style, empty: Style) -> Content:
    """The chart as Textual `Content`, one line per row."""
    rows: list[tuple[tuple[str, Style], ...]] = []
    if lines.name or lines.stats:
        rows.append(((lines.name, title), (lines.stats, axis)))
    if lines.message:
        rows.append(((lines.message, empty),))
    for index, plot_row in enumerate(lines.plot):
        rows.append(((lines.labels[index] if lines.labels else "", axis), (plot_row, line)))
    parts: list[str] = []
    spans: list[Span] = []
    offset = 0
    for parts_of_row in rows:
        if parts:
            parts.append("\n")
            offset += 1
        for part, style in parts_of_row:
            if part:
                parts.append(part)
                spans.append(Span(offset, offset + len(part), style))
                offset += len(part)
    # The title was cleaned in layout_chart; scanning the braille for control codes would double the cost.
    return Content("".join(parts), spans, strip_control_codes=False)


class Chart(Widget):
    """One metric's live chart. The app hands it a series at a fixed rate with `update_series`; it redraws
    only when the series has grown, the title changed or the widget was resized."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"chart--line", "chart--axis", "chart--title", "chart--empty"}
    DEFAULT_CSS = """
    Chart {
        width: 1fr;
        height: 1fr;
    }
    Chart > .chart--line {
        color: $accent;
    }
    Chart > .chart--axis {
        color: $text-muted;
    }
    Chart > .chart--title {
        color: $text;
        text-style: bold;
    }
    Chart > .chart--empty {
        color: $text-muted;
        text-style: italic;
    }
    """

    def __init__(
        self,
        series: Series | None = None,
        title: str = "",
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        disabled: bool = False,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        self._series = series
        self._title = title
        self._shown: tuple[Series | None, int, str] | None = None
        self._layout_key: tuple[Series | None, int, str, int, int] | None = None
        self._lines = ChartLines("", "")

    @property
    def series(self) -> Series | None:
        return self._series

    @property
    def title(self) -> str:
        return self._title

    def update_series(self, series: Series | None, title: str) -> None:
        """Show `series` (None: nothing yet) under `title`; a refresh only when there is something new."""
        self._series, self._title = series, title
        shown = (series, series.count if series is not None else 0, title)
        if shown != self._shown:
            self._shown = shown
            self.refresh()

    def chart_lines(self) -> ChartLines:
        """The layout at the current size, recomputed only when the series, its length, the title or the
        size changed."""
        series, title = self._series, self._title
        width, height = self.content_size
        key = (series, series.count if series is not None else 0, title, width, height)
        if key != self._layout_key:
            self._lines = layout_chart(series, title, width, height)
            self._layout_key = key
        return self._lines

    def render(self) -> RenderResult:
        style = self.get_visual_style
        return chart_content(
            self.chart_lines(),
            title=style("chart--title"),
            line=style("chart--line"),
            axis=style("chart--axis"),
            empty=style("chart--empty"),
        )
