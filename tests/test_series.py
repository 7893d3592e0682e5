"""Bounded series: what they keep of a run however long it is, checked against brute force."""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Sequence
from itertools import cycle, islice
from unittest import mock

import pytest
from conftest import needs_c_compiler
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnconsole.core import series as series_module
from trnconsole.core.events import Event
from trnconsole.core.parsers import StepColumns
from trnconsole.core.series import Series, SeriesSet

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

values = st.one_of(
    st.floats(-1e6, 1e6),
    st.integers(-1000, 1000),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


def finite(ys: list[float]) -> list[float]:
    return [y for y in ys if math.isfinite(y)]


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


def expected_buckets(xs: list[float], ys: list[float], width: int) -> list[tuple]:
    """(x of the last point, min, max, last) of consecutive groups of `width` points, by brute force."""
    out = []
    for start in range(0, len(ys), width):
        group = ys[start : start + width]
        good = finite(group)
        out.append(
            (
                xs[start + len(group) - 1],
                min(good) if good else math.nan,
                max(good) if good else math.nan,
                group[-1],
            )
        )
    return out


def fill(series: Series, xs: list[float], ys: list[float], batch: int) -> None:
    """Adds the points one by one (batch 0) or through extend() in batches of that size."""
    if batch == 0:
        for x, y in zip(xs, ys, strict=True):
            series.add(x, y)
    else:
        for start in range(0, len(ys), batch):
            series.extend(xs[start : start + batch], ys[start : start + batch])


@PROPERTY
@given(
    ys=st.lists(values, max_size=600),
    capacity=st.integers(2, 40),
    batch=st.sampled_from([0, 1, 7, 100, 1000]),
)
def test_series_matches_brute_force_over_all_points(ys: list[float], capacity: int, batch: int) -> None:
    xs = [float(i) for i in range(len(ys))]
    series = Series(capacity)
    fill(series, xs, ys, batch)

    good = finite(ys)
    assert series.count == len(ys)
    assert series.nonfinite == len(ys) - len(good)
    assert same(series.first, ys[0] if ys else None)
    assert same(series.last, ys[-1] if ys else None)
    assert series.last_x == (xs[-1] if xs else None)
    assert series.min == (min(good) if good else None)
    assert series.max == (max(good) if good else None)
    if good:
        assert series.mean == pytest.approx(math.fsum(good) / len(good), rel=1e-9, abs=1e-6)
    else:
        assert series.mean is None

    points = series.points()
    assert len(points[0]) <= capacity
    assert all(len(column) == len(points[0]) for column in points)
    want = expected_buckets(xs, ys, series.bucket_width)
    assert len(want) == len(points[0])
    firsts, _, _, _, _, counts = series.buckets()
    assert firsts == xs[:: series.bucket_width]
    assert sum(counts) == len(ys)
    for got, expected in zip(zip(*points, strict=True), want, strict=True):
        assert all(same(a, b) for a, b in zip(got, expected, strict=True))


@PROPERTY
@given(ys=st.lists(values, min_size=1, max_size=400), capacity=st.integers(2, 32), width=st.integers(1, 50))
def test_downsample_fits_the_width_and_keeps_extremes_and_the_last_value(
    ys: list[float], capacity: int, width: int
) -> None:
    series = Series(capacity)
    series.extend(list(range(len(ys))), ys)
    xs, lows, highs, lasts = series.downsample(width)
    assert 1 <= len(xs) <= width
    assert len(xs) == len(lows) == len(highs) == len(lasts)
    assert xs == sorted(xs) and xs[-1] == len(ys) - 1
    assert same(lasts[-1], ys[-1])
    good = finite(ys)
    if good:
        assert min(v for v in lows if not math.isnan(v)) == min(good)
        assert max(v for v in highs if not math.isnan(v)) == max(good)
    else:
        assert all(math.isnan(v) for v in lows + highs)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1000, 20_000), spike_at=st.floats(0, 1, exclude_max=True), width=st.integers(1, 80))
def test_a_single_spike_survives_any_downsampling(n: int, spike_at: float, width: int) -> None:
    ys = [1.0] * n
    ys[int(spike_at * n)] = 1e9
    ys[(int(spike_at * n) + n // 2) % n] = -5.0
    series = Series(64)
    series.extend(list(range(n)), ys)
    _, lows, highs, _ = series.downsample(width)
    assert max(highs) == 1e9
    assert min(lows) == -5.0


def test_memory_stays_bounded_however_many_points() -> None:
    series = Series(capacity=128)
    for start in range(0, 200_000, 5000):
        series.extend(range(start, start + 5000), [float(i % 97) for i in range(start, start + 5000)])
    for i in range(200_000, 200_700):
        series.add(i, 1.0)
    assert series.count == 200_700
    assert len(series.points()[0]) <= 128
    assert series.bucket_width * 128 >= 200_700
    assert (series.min, series.max, series.last_x) == (0.0, 96.0, 200_699)


def test_nan_and_inf_are_counted_but_never_become_min_or_max() -> None:
    series = Series()
    for x, y in enumerate([math.nan, 2.0, math.inf, -math.inf, 1.0, math.nan]):
        series.add(x, y)
    assert (series.min, series.max, series.mean) == (1.0, 2.0, 1.5)
    assert series.nonfinite == 4
    assert math.isnan(series.last)
    assert math.isnan(series.first)


def test_a_series_of_only_nan_has_no_min_max_or_mean() -> None:
    series = Series()
    series.add(0, math.nan)
    assert (series.count, series.min, series.max, series.mean) == (1, None, None, None)
    _, lows, highs, lasts = series.points()
    assert math.isnan(lows[0]) and math.isnan(highs[0]) and math.isnan(lasts[0])


def test_empty_series_knows_nothing() -> None:
    series = Series()
    assert (series.count, series.first, series.last, series.min, series.max, series.mean) == (
        0,
        None,
        None,
        None,
        None,
        None,
    )
    assert series.points() == ([], [], [], [])
    assert series.downsample(10) == ([], [], [], [])


def test_mean_and_max_excluding_first_skip_the_warm_up_point() -> None:
    series = Series()
    series.extend([1, 2, 3], [500.0, 10.0, 20.0])
    assert (series.mean_excluding_first, series.max_excluding_first) == (15.0, 20.0)
    single = Series()
    single.add(1, 7.0)
    assert (single.mean_excluding_first, single.max_excluding_first) == (7.0, 7.0)


def test_recent_returns_the_last_raw_values() -> None:
    series = Series(capacity=4)
    series.extend(range(1000), [float(i) for i in range(1000)])
    series.add(1000, 1000.0)
    assert series.recent(3) == [998.0, 999.0, 1000.0]


def test_capacity_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Series(1)


# ---- SeriesSet ----


def test_series_set_files_step_eval_and_compile_values_under_their_names() -> None:
    series = SeriesSet()
    series.add_event(Event("step", 10, {"loss": 0.5, "lr": 1e-4}))
    series.add_event(Event("eval", 10, {"loss": 0.7, "accuracy": 0.6}))
    series.add_event(Event("compile", 10, {"count": 3.0}))
    series.add_event(Event("status", 10, {"total_steps": 100}, None, {"state": "started"}))
    assert sorted(series.names()) == ["compile_count", "eval_accuracy", "eval_loss", "loss", "lr"]
    assert "loss" in series and "total_steps" not in series
    assert series.get("missing") is None
    loss = series.get("loss")
    assert loss is not None and (loss.last_x, loss.last) == (10, 0.5)
    assert series["eval_loss"].last == 0.7


def test_events_without_a_step_go_one_past_the_last_x() -> None:
    series = SeriesSet()
    series.add_events([Event("step", None, {"a": 1.0}), Event("step", None, {"a": 2.0})])
    series.add_event(Event("step", 50, {"a": 3.0}))
    series.add_event(Event("step", None, {"a": 4.0}))
    assert series["a"].points()[0] == [0, 1, 50, 51]


step_events = st.lists(
    st.builds(
        Event,
        st.sampled_from(["step", "step", "step", "eval", "compile", "status"]),
        st.one_of(st.none(), st.integers(0, 1000)),
        st.dictionaries(st.sampled_from(["loss", "lr", "mfu", "eval_loss"]), values, max_size=3),
    ),
    max_size=300,
)


@PROPERTY
@given(events=step_events, batch=st.integers(1, 64))
def test_series_set_batches_give_the_same_series_as_one_event_at_a_time(
    events: list[Event], batch: int
) -> None:
    one_by_one, batched = SeriesSet(capacity=8), SeriesSet(capacity=8)
    for event in events:
        one_by_one.add_event(event)
    for start in range(0, len(events), batch):
        batched.add_events(events[start : start + batch])
    assert sorted(one_by_one.names()) == sorted(batched.names())
    for name in one_by_one.names():
        a, b = one_by_one[name].points(), batched[name].points()
        assert all(
            same(p, q) for col_a, col_b in zip(a, b, strict=True) for p, q in zip(col_a, col_b, strict=True)
        )
        assert one_by_one[name].count == batched[name].count


def test_a_copy_is_independent_of_the_original():
    original = Series(capacity=8)
    for i in range(20):
        original.add(i, float(i))
    copy = original.copy()
    for i in range(20, 200):
        original.add(i, -float(i))
    assert (copy.count, copy.last, copy.min, copy.max) == (20, 19.0, 0.0, 19.0)
    assert copy.points() != original.points()
    assert original.count == 200 and original.min == -199.0


@PROPERTY
@given(
    ys=st.lists(
        st.sampled_from([0, 1, 1.0, 2, 2.0, -1.0, -1, 0.5, math.nan, math.inf]), min_size=1, max_size=300
    ),
    capacity=st.integers(2, 16),
    batch=st.sampled_from([0, 1, 3, 50, 1000]),
)
def test_min_and_max_are_the_first_of_equal_values_added_however_they_are_folded(
    ys: list[float], capacity: int, batch: int
) -> None:
    series = Series(capacity)
    fill(series, [float(i) for i in range(len(ys))], ys, batch)
    rest = finite(ys[1:])
    low, high = (min(rest), max(rest)) if rest else (None, None)
    first = ys[0]
    if math.isfinite(first):  # the first point wins only when strictly beyond the rest
        low = first if low is None or first < low else low
        high = first if high is None or first > high else high
    assert repr(series.min) == repr(low)  # 1 and 1.0 told apart
    assert repr(series.max) == repr(high)
    if len(ys) > 1:
        assert repr(series.max_excluding_first) == repr(max(rest) if rest else None)


def series_state(series: SeriesSet) -> str:
    names = series.names()
    return repr([names, [sorted(vars(series[name]).items()) for name in names]])


def typed(values: list) -> Sequence:
    """The values as an array('d') or array('q') when they are all floats or all ints; else the list."""
    kinds = set(map(type, values))
    if kinds == {float}:
        return array("d", values)
    if kinds == {int} and all(-(2**63) <= v < 2**63 for v in values):
        return array("q", values)
    return values


@st.composite
def step_batches(draw: st.DrawFn) -> list[list]:
    """Batches of rows and StepColumns, with eval, compile and status events between them."""
    batches = []
    step = 0
    for _ in range(draw(st.integers(1, 6))):
        batch: list = []
        for _ in range(draw(st.integers(0, 5))):
            roll = draw(st.integers(0, 5))
            if roll < 3:
                names = tuple(
                    draw(st.lists(st.sampled_from(["loss", "lr", "eval_loss"]), unique=True, max_size=3))
                )
                count = draw(st.integers(1, 700))
                # A few drawn values repeated to the length: long columns, drawn quickly.
                columns = [
                    list(islice(cycle(draw(st.lists(values, min_size=1, max_size=9))), count)) for _ in names
                ]
                ts = draw(st.one_of(st.none(), st.just([1.0] * count)))
                steps = list(range(step, step + count))
                if draw(st.booleans()):  # as the compiled reader gives them: typed arrays where it can
                    steps, ts, columns = typed(steps), ts and typed(ts), list(map(typed, columns))
                batch.append(StepColumns(steps, ts, names, columns))
                step += count
            elif roll == 3:
                batch.append(
                    ("step", draw(st.one_of(st.none(), st.just(step))), {"loss": 1.0, "mfu": 0.5}, None, {})
                )
                step += 1
            else:
                kind = draw(st.sampled_from(["eval", "compile", "status"]))
                batch.append((kind, draw(st.one_of(st.none(), st.just(step))), {"loss": 2.0}, None, {}))
        batches.append(batch)
    return batches


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=step_batches(), capacity=st.sampled_from([2, 5, 64]))
def test_step_columns_fill_the_same_series_as_their_rows(batches: list[list], capacity: int) -> None:
    from_columns, from_rows = SeriesSet(capacity), SeriesSet(capacity)
    for batch in batches:
        from_columns.add_batch(batch)
        rows = [row for item in batch for row in (item.rows() if isinstance(item, StepColumns) else [item])]
        from_rows.add_rows(rows)
    assert series_state(from_columns) == series_state(from_rows)


def test_ints_beyond_float_range_count_as_infinite() -> None:
    for ys in ([10**400, 5], [5, -(10**400), 2.5], [2**1024 - 2**970, 1]):
        series = Series()
        series.extend(list(range(len(ys))), ys)
        assert series.nonfinite == 1
        assert series.max == max(v for v in ys if abs(v) < 2**1023)


@needs_c_compiler
def test_the_compiled_bucket_folding_is_built() -> None:
    assert series_module._buckets is not None  # scripts/test.sh builds it with this machine's compiler


# Equal values that repr tells apart: 0.0 and -0.0, 1 and 1.0; and ints exact as doubles, or just not.
ties = st.sampled_from([0.0, -0.0, 1.0, 1, -1.0, -1, 0.5, 0, 2**53, -(2**53), 2**53 + 1, 2.0**53])


@needs_c_compiler
@PROPERTY
@given(
    ys=st.one_of(
        st.lists(ties, max_size=3000),
        st.lists(st.one_of(st.floats(-1e6, 1e6), ties), max_size=3000),
        st.lists(values, max_size=600),
    ),
    capacity=st.integers(2, 40),
    batch=st.sampled_from([0, 1, 7, 100, 1000]),
)
def test_compiled_bucket_folding_leaves_a_series_as_python_folding_does(
    ys: list[float], capacity: int, batch: int
) -> None:
    xs = [float(i) for i in range(len(ys))]
    compiled, from_arrays = Series(capacity), Series(capacity)
    fill(compiled, xs, ys, batch)
    for start in range(0, len(ys), batch or 1):  # what the compiled line reader gives: typed arrays
        part = slice(start, start + (batch or 1))
        from_arrays.extend(array("q", range(len(ys)))[part], typed(ys[part]))
    with mock.patch.object(series_module, "_buckets", None):
        python = Series(capacity)
        fill(python, xs, ys, batch)
    assert repr(sorted(vars(compiled).items())) == repr(sorted(vars(python).items()))
    with mock.patch.object(series_module, "_buckets", None):
        python_ints = Series(capacity)
        fill(python_ints, list(range(len(ys))), ys, batch or 1)
    assert repr(sorted(vars(from_arrays).items())) == repr(sorted(vars(python_ints).items()))


@needs_c_compiler
@PROPERTY
@given(
    buckets=st.lists(st.lists(st.one_of(ties, st.floats(-1e6, 1e6)), min_size=5, max_size=5), min_size=1),
    width=st.sampled_from([1, 5]),
)
def test_compiled_bucket_extremes_are_those_of_min_and_max(buckets: list[list[float]], width: int) -> None:
    values = [value for bucket in buckets for value in bucket]
    groups = [values[at : at + width] for at in range(0, len(values), width)]
    mins, maxes = [min(group) for group in groups], [max(group) for group in groups]
    exact = all(type(v) is float or abs(v) <= 2**53 for v in values)
    want = (mins, maxes, min(values), max(values)) if exact else None
    assert repr(series_module._buckets.extremes(values, width)) == repr(want)
    assert series_module._buckets.extremes([*values[1:], math.nan], width) is None
    assert series_module._buckets.extremes([2**53 + 1] * width, width) is None  # not exact as a double


@needs_c_compiler
@PROPERTY
@given(
    ys=st.one_of(
        st.lists(st.floats(allow_nan=False), min_size=1, max_size=300),
        st.lists(st.floats(), min_size=1, max_size=50),
        st.lists(st.one_of(ties, st.floats(-1e6, 1e6)).map(float), min_size=1, max_size=300),
        st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50),
        st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=300),
    ),
    width=st.sampled_from([1, 2, 5]),
)
def test_compiled_helpers_read_typed_arrays_as_sum_min_and_max_read_lists(ys: list, width: int) -> None:
    values = typed(ys)
    total = series_module._buckets.total(values)
    if total is not None or (type(values[0]) is float and sys.version_info < (3, 12)):
        assert repr(total) == repr(sum(ys))
    found = series_module._buckets.extremes(values, width)
    groups = [ys[at : at + width] for at in range(0, len(ys), width)]
    if len(ys) % width or not all(map(math.isfinite, ys)):
        assert found is None
    else:
        want = ([min(g) for g in groups], [max(g) for g in groups], min(ys), max(ys))
        assert repr(found) == repr(want)
