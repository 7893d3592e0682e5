"""Braille line plots in numpy: per-pixel-column min/max spans drawn on a 2x4-dots-per-cell canvas, and the
re-bucketing of downsampled points into exactly as many pixel columns as the plot is wide.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BLANK = "\u2800"
# Bits of a cell's dots, top down, in its left and right dot column (Unicode's dots 1-2-3-7 and 4-5-6-8).
_DOT_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))


def _run_bits(dot_bits: tuple[int, ...]) -> np.ndarray:
    """Code points of one dot column lit from dot `first` to dot `last` (0-3; first 4 or last -1: none),
    indexed by first * 5 + last + 1, with the braille block's base added on the left column's table."""
    table = np.zeros(25, dtype=np.uint32)
    for first in range(5):
        for last in range(-1, 4):
            table[first * 5 + last + 1] = sum(dot_bits[first : last + 1])
    return table


_RUN_BITS = (_run_bits(_DOT_BITS[0]) + 0x2800, _run_bits(_DOT_BITS[1]))
_PAD = 0.02  # of the data's span, above and below, when the scale comes from the data


def _as_array(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    return np.where(np.isfinite(array), array, np.nan)


def _widen(value: float) -> tuple[float, float]:
    """A range with `value` in its middle, for a flat series."""
    delta = abs(value) * 0.1 or 1.0
    return value - delta, value + delta


def data_range(
    ymin: Sequence[float] | np.ndarray, ymax: Sequence[float] | np.ndarray, pad: float = _PAD
) -> tuple[float, float] | None:
    """The scale `render_braille` uses by default: the finite min and max of the data, `pad` of their span
    added on each side; a flat series gets a range around its value. None when no value is finite."""
    finite = np.concatenate([_as_array(ymin), _as_array(ymax)])
    finite = finite[~np.isnan(finite)]
    if finite.size == 0:
        return None
    low, high = float(finite.min()), float(finite.max())
    if low == high:
        return _widen(low)
    margin = (high / 2 - low / 2) * 2 * pad  # halves: high - low overflows near the float limit
    padded = (low - margin, high + margin)
    return padded if np.isfinite(padded).all() else (low, high)


def _scale(
    ymin: np.ndarray, ymax: np.ndarray, lo: float | None, hi: float | None
) -> tuple[float, float] | None:
    if lo is not None and hi is not None:
        if lo > hi:
            raise ValueError(f"lo ({lo}) must not be above hi ({hi})")
        return _widen(lo) if lo == hi else (lo, hi)
    fitted = data_range(ymin, ymax)
    if fitted is None:
        return None
    if lo is not None:
        return (lo, fitted[1]) if lo < fitted[1] else (lo, _widen(lo)[1])
    if hi is not None:
        return (fitted[0], hi) if fitted[0] < hi else (_widen(hi)[0], hi)
    return fitted


def render_braille(
    ymin: Sequence[float] | np.ndarray,
    ymax: Sequence[float] | np.ndarray,
    width: int,
    height: int,
    lo: float | None = None,
    hi: float | None = None,
) -> list[str]:
    """`height` strings of `width` braille cells plotting one span per pixel column (two per cell).

    Column i lights the dots from `ymin[i]` to `ymax[i]` and, when column i-1 is drawn too, the dots between
    its span and column i-1's, so that the columns read as a line. Columns where either bound is NaN or
    infinite are gaps; columns past the data are blank. The scale runs from `lo` (bottom dot row) to `hi`
    (top dot row), by default `data_range(ymin, ymax)`; values outside it are clipped to the edge.
    """
    if height <= 0:
        return []
    if width <= 0:
        return [""] * height
    low, high = _as_array(ymin), _as_array(ymax)
    if low.size != high.size:
        raise ValueError(f"ymin and ymax differ in length ({low.size} and {high.size})")
    if low.size > 2 * width:
        raise ValueError(f"{low.size} columns do not fit in {width} cells (at most {2 * width})")
    rows = 4 * height
    top = np.full(2 * width, rows)  # a column with top below bottom lights nothing
    bottom = np.full(2 * width, -1)
    scale = _scale(low, high, lo, hi)
    if scale is not None and low.size:
        lo_value, hi_value = scale
        n = low.size
        valid = ~(np.isnan(low) | np.isnan(high))
        values = np.concatenate([high, low])
        values[np.isnan(values)] = hi_value  # gaps are dropped below; this keeps NaN out of the int cast
        half_span = hi_value / 2 - lo_value / 2  # halves: hi - lo overflows near the float limit
        if half_span > 0:
            with np.errstate(over="ignore"):  # values far outside lo..hi: clipped to the edge below
                position = (hi_value / 2 - values / 2) / half_span * (rows - 1)
        else:
            position = np.full(values.shape, (rows - 1) / 2)
        dot_row = np.clip(np.floor(position + 0.5), 0, rows - 1).astype(np.int64)
        span_top, span_bottom = np.minimum(dot_row[:n], dot_row[n:]), np.maximum(dot_row[:n], dot_row[n:])
        # Reach to the row next to the previous span: below it, or above it, whichever side this one is on.
        joined = valid[1:] & valid[:-1]
        reach_up = np.minimum(span_top[1:], span_bottom[:-1] + 1)
        reach_down = np.maximum(span_bottom[1:], span_top[:-1] - 1)
        span_top[1:] = np.where(joined, reach_up, span_top[1:])
        span_bottom[1:] = np.where(joined, reach_down, span_bottom[1:])
        top[:n] = np.where(valid, span_top, rows)
        bottom[:n] = span_bottom
    # Per cell row, each pixel column's lit dots are a run from dot `first` to dot `last` of the cell's 4.
    cell_top = 4 * np.arange(height)[:, None]
    first = np.clip(top - cell_top, 0, 4)
    last = np.clip(bottom - cell_top, -1, 3)
    run = first * 5 + last + 1
    codes = _RUN_BITS[0][run[:, 0::2]] | _RUN_BITS[1][run[:, 1::2]]
    text = codes.astype("<u4").tobytes().decode("utf-32-le")
    return [text[i : i + width] for i in range(0, height * width, width)]


def column_extents(
    xs: Sequence[float] | np.ndarray,
    ymin: Sequence[float] | np.ndarray,
    ymax: Sequence[float] | np.ndarray,
    columns: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Points (x, ymin, ymax) re-bucketed into exactly `columns` pixel columns of equal x width: the min of
    the mins and the max of the maxes of the points in each. The first point lands in the first column and
    the last in the last; a column no point lands in is interpolated between its neighbours, so sparse
    points still draw a line, while a column whose points have no finite value stays NaN (a gap)."""
    columns = max(columns, 0)
    x = np.asarray(xs, dtype=np.float64).reshape(-1)
    low, high = _as_array(ymin), _as_array(ymax)
    if not x.size == low.size == high.size:
        raise ValueError(f"xs, ymin and ymax differ in length ({x.size}, {low.size}, {high.size})")
    out_low = np.full(columns, np.nan)
    out_high = np.full(columns, np.nan)
    keep = np.isfinite(x)
    if not keep.all():
        x, low, high = x[keep], low[keep], high[keep]
    if columns == 0 or x.size == 0:
        return out_low, out_high
    x0, x1 = float(x.min()), float(x.max())
    half_span = x1 / 2 - x0 / 2
    if half_span > 0:
        cols = np.minimum(((x / 2 - x0 / 2) / half_span * columns).astype(np.int64), columns - 1)
    else:
        cols = np.zeros(x.size, dtype=np.int64)
    if cols.size > 1 and (cols[1:] < cols[:-1]).any():
        order = np.argsort(cols, kind="stable")
        cols, low, high = cols[order], low[order], high[order]
    starts = np.flatnonzero(cols[1:] != cols[:-1]) + 1
    starts = np.concatenate([[0], starts])
    occupied = cols[starts]
    # fmin/fmax skip NaN, so a column is NaN only when none of its points has a finite value.
    out_low[occupied] = np.fmin.reduceat(low, starts)
    out_high[occupied] = np.fmax.reduceat(high, starts)
    if occupied.size < columns:
        # np.interp leaves occupied columns as they are and spreads a NaN neighbour's gap into empty ones.
        everywhere = np.arange(columns)
        out_low = np.interp(everywhere, occupied, out_low[occupied], left=np.nan, right=np.nan)
        out_high = np.interp(everywhere, occupied, out_high[occupied], left=np.nan, right=np.nan)
    return out_low, out_high
