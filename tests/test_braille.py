"""The braille renderer: exact cells for tiny hand-made plots, and invariants for any input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnconsole.core.series import Series
from trnconsole.ui.braille import BLANK, column_extents, data_range, render_braille

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAN, INF = math.nan, math.inf
# Bit of each dot, by dot row (top down) and dot column, as the Unicode braille block lays them out.
BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))


def dots(lines: list[str]) -> np.ndarray:
    """The boolean (4 * height, 2 * width) canvas that `lines` of braille cells show."""
    height, width = len(lines), len(lines[0]) if lines else 0
    canvas = np.zeros((4 * height, 2 * width), dtype=bool)
    for row, line in enumerate(lines):
        for col, char in enumerate(line):
            bits = ord(char) - 0x2800
            for dy in range(4):
                for dx in range(2):
                    canvas[4 * row + dy, 2 * col + dx] = bool(bits & BITS[dy][dx])
    return canvas


def test_one_column_spanning_the_range_lights_its_whole_height() -> None:
    assert render_braille([0], [1], 1, 1, lo=0, hi=1) == ["⡇"]
    assert render_braille([0], [1], 1, 1) == ["⡇"]  # the default scale fits the data
    assert render_braille([0, 0], [1, 1], 1, 2, lo=0, hi=1) == ["⣿", "⣿"]


def test_columns_past_the_data_are_blank_cells() -> None:
    assert render_braille([0], [1], 3, 1, lo=0, hi=1) == ["⡇" + BLANK + BLANK]
    assert render_braille([], [], 2, 2) == [BLANK * 2, BLANK * 2]


def test_a_flat_series_is_drawn_at_mid_height() -> None:
    assert render_braille([5] * 4, [5] * 4, 2, 1) == ["⠤⠤"]
    assert render_braille([5] * 4, [5] * 4, 2, 2) == [BLANK * 2, "⠉⠉"]
    assert render_braille([3, 3], [3, 3], 1, 1, lo=3, hi=3) == ["⠤"]


def test_consecutive_columns_are_joined_into_a_line() -> None:
    # Column 1 reaches towards column 0's dot: down to the row above it, or up to the row below it.
    assert render_braille([0, 1], [0, 1], 1, 1, lo=0, hi=1) == ["⡸"]
    assert render_braille([1, 0], [1, 0], 1, 1, lo=0, hi=1) == ["⢱"]


def test_a_one_sample_spike_survives_downsampling_in_its_column() -> None:
    series = Series()
    ys = [0.0] * 1000
    ys[500] = 1.0
    series.extend(list(range(1000)), ys)
    xs, lows, highs, _ = series.downsample(4)
    column_min, column_max = column_extents(xs, lows, highs, 4)
    assert list(column_max) == [0, 0, 1, 0]
    # The spike's column is lit top to bottom; the columns around it stay on the bottom row.
    assert render_braille(column_min, column_max, 2, 1, lo=0, hi=1) == ["⣀⣇"]


def test_nan_and_inf_columns_are_gaps_and_break_the_line() -> None:
    assert render_braille([0, NAN, 0, 0], [0, NAN, 0, 0], 2, 1, lo=0, hi=1) == ["⡀⣀"]
    assert render_braille([0, INF, 1, 1], [0, -INF, 1, 1], 2, 1, lo=0, hi=1) == ["⡀⠉"]
    assert render_braille([NAN, NAN], [NAN, NAN], 1, 1) == [BLANK]


def test_values_outside_lo_hi_are_clipped_to_the_edges() -> None:
    assert render_braille([-5], [5], 1, 1, lo=0, hi=1) == ["⡇"]
    assert render_braille([9, 9], [9, 9], 1, 1, lo=0, hi=1) == ["⠉"]


def test_mistakes_are_refused() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        render_braille([0, 1, 2], [0, 1, 2], 1, 1)
    with pytest.raises(ValueError, match="differ in length"):
        render_braille([0, 1], [0], 1, 1)
    with pytest.raises(ValueError, match="must not be above"):
        render_braille([0], [1], 1, 1, lo=2, hi=1)


def test_zero_sizes_give_empty_output() -> None:
    assert render_braille([1], [1], 0, 2) == ["", ""]
    assert render_braille([1], [1], 3, 0) == []


def test_data_range_pads_the_span_and_widens_a_flat_series() -> None:
    lo, hi = data_range([0, 5], [5, 10])
    assert lo < 0 < 10 < hi and hi - 10 == pytest.approx(0.2)
    assert data_range([2.0], [2.0]) == pytest.approx((1.8, 2.2))
    assert data_range([0.0], [0.0]) == (-1.0, 1.0)
    assert data_range([NAN], [INF]) is None


spans = st.lists(
    st.tuples(
        st.one_of(st.floats(-1e300, 1e300), st.sampled_from([NAN, INF, -INF, 0.0])),
        st.one_of(st.floats(-1e6, 1e6), st.sampled_from([NAN, 0.0])),
    ),
    max_size=60,
)


@PROPERTY
@given(spans, st.integers(1, 30), st.integers(1, 8))
def test_output_shape_and_which_columns_are_lit(
    pairs: list[tuple[float, float]], width: int, height: int
) -> None:
    pairs = pairs[: 2 * width]
    lows = [a for a, _ in pairs]
    highs = [a + b if math.isfinite(a) else b for a, b in pairs]
    lines = render_braille(lows, highs, width, height)
    assert len(lines) == height
    assert all(len(line) == width and all("\u2800" <= c <= "\u28ff" for c in line) for line in lines)
    lit = dots(lines).any(axis=0)
    drawable = [math.isfinite(low) and math.isfinite(high) for low, high in zip(lows, highs, strict=True)]
    assert list(lit) == drawable + [False] * (2 * width - len(pairs))


@PROPERTY
@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=40), st.integers(1, 6))
def test_the_extremes_reach_the_top_and_bottom_rows(ys: list[float], height: int) -> None:
    width = (len(ys) + 1) // 2
    lo, hi = min(ys), max(ys)
    canvas = dots(render_braille(ys, ys, width, height, lo=lo, hi=hi))
    if lo < hi:
        assert canvas[0, ys.index(hi)] and canvas[-1, ys.index(lo)]
    else:
        assert canvas.any(axis=0)[: len(ys)].all()


def test_column_extents_merges_points_by_x() -> None:
    column_min, column_max = column_extents(np.arange(1000), np.arange(1000.0), np.arange(1000.0) + 0.5, 4)
    assert list(column_min) == [0, 250, 500, 750]
    assert list(column_max) == [249.5, 499.5, 749.5, 999.5]


def test_column_extents_interpolates_between_sparse_points() -> None:
    column_min, column_max = column_extents([0, 10, 20], [1, 3, 2], [1, 5, 2], 5)
    assert list(column_min) == [1, 2, 3, 2.5, 2]
    assert list(column_max) == [1, 3, 5, 3.5, 2]


def test_column_extents_keeps_gaps_where_points_had_no_finite_value() -> None:
    column_min, _ = column_extents([0, 1, 2, 3], [1, NAN, 2, 3], [1, NAN, 2, 3], 4)
    assert np.isnan(column_min[1]) and list(column_min[[0, 2, 3]]) == [1, 2, 3]
    column_min, _ = column_extents([0, 2, 4], [1, NAN, 3], [1, NAN, 3], 5)
    assert list(np.isnan(column_min)) == [False, True, True, True, False]


def test_column_extents_of_a_single_x_or_nothing() -> None:
    column_min, column_max = column_extents([7, 7], [1, 2], [3, 4], 3)
    assert column_min[0] == 1 and column_max[0] == 4 and np.isnan(column_min[1:]).all()
    column_min, column_max = column_extents([], [], [], 3)
    assert np.isnan(column_min).all() and np.isnan(column_max).all()
    assert column_extents([1], [1], [1], 0)[0].size == 0


@PROPERTY
@given(
    st.lists(
        st.tuples(st.floats(-1e9, 1e9), st.floats(-1e6, 1e6), st.floats(0, 1e6)), min_size=1, max_size=300
    ),
    st.integers(1, 80),
)
def test_column_extents_preserves_the_global_min_and_max(
    points: list[tuple[float, float, float]], columns: int
) -> None:
    xs = [x for x, _, _ in points]
    lows = [y for _, y, _ in points]
    highs = [y + d for _, y, d in points]
    column_min, column_max = column_extents(xs, lows, highs, columns)
    assert column_min.shape == column_max.shape == (columns,)
    assert np.nanmin(column_min) == min(lows)
    assert np.nanmax(column_max) == max(highs)
    # Unordered x gives the same columns as sorted x.
    order = sorted(range(len(xs)), key=xs.__getitem__)
    again = column_extents(
        [xs[i] for i in order], [lows[i] for i in order], [highs[i] for i in order], columns
    )
    assert np.array_equal(again[0], column_min, equal_nan=True)
