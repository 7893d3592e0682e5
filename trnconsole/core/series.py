"""Bounded, downsampled metric series: memory per metric stays O(capacity) however long the run, and spikes
stay visible because every bucket keeps its min and max.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from itertools import repeat
from math import hypot
from operator import add, attrgetter, itemgetter
from typing import Any

from .events import Event
from .parsers import Row, StepColumns, same_kind

try:
    from . import _buckets
except ImportError:  # installed without a C compiler: min() and max() over each bucket
    _buckets = None

_INF = float("inf")
_NAN = float("nan")
_MAX_FLOAT = 1.7976931348623157e308
_RECENT = 64  # raw values kept for "the last few points" questions (ETA, sparklines)
_PENDING = 1024  # step events queued before they are folded into their series
_STEP, _VALUES = itemgetter(1), itemgetter(2)
_event_row = attrgetter("kind", "step", "values", "t", "info")


def _as_float(value: float) -> float:
    try:
        return float(value)
    except OverflowError:
        return _INF if value > 0 else -_INF


def _beyond_float(ints: Sequence[int]) -> bool:
    try:
        if hypot(*ints) < 1e308:  # at least the largest magnitude, and one C pass instead of max and min
            return False
    except OverflowError:
        pass
    return max(ints) > _MAX_FLOAT or min(ints) < -_MAX_FLOAT


def _extremes(values: Sequence[float], width: int) -> tuple[list[float], list[float], float, float]:
    """The min and max of each `width` consecutive values (a whole number of buckets), then of them all."""
    if _buckets is not None:
        found = _buckets.extremes(values, width)
        if found is not None:
            return found
    if width == 1:
        values = values if type(values) is list else list(values)
        return values, values, min(values), max(values)
    groups = list(zip(*[iter(values)] * width, strict=True))
    mins, maxes = list(map(min, groups)), list(map(max, groups))
    return mins, maxes, min(mins), max(maxes)


def _sum(values: Sequence[float]) -> float:
    """sum(values), that of a typed array without a Python object per value where the compiled helper can
    promise the same result."""
    if _buckets is not None and type(values) is array:
        total = _buckets.total(values)
        if total is not None:
            return total
    return sum(values)


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if v - v == 0.0]  # False for NaN and ±inf


class Series:
    """One metric's points, kept as at most `capacity` buckets of equal point count.

    When a new bucket would exceed the capacity, adjacent pairs merge and the bucket width doubles. A bucket
    keeps the x of its first and last point, the min, max and last y, and its point count. NaN and ±inf never
    enter a min or max (a bucket with no finite point shows NaN there), are counted in `nonfinite`, and can
    be the `last` value. Whole-run aggregates (count, first, last, min, max, mean) are exact.
    """

    def __init__(self, capacity: int = 2048) -> None:
        if capacity < 2:
            raise ValueError(f"capacity must be at least 2, got {capacity}")
        self.capacity = capacity
        self._flush_at = min(capacity, 512)
        # Points are collected raw and folded into buckets in batches, where min/max/sum run in C.
        self._px: list[float] = []
        self._py: list[float] = []
        self._width = 1
        self._bx0: list[float] = []
        self._bx1: list[float] = []
        self._bmin: list[float] = []  # +inf when the bucket has no finite point
        self._bmax: list[float] = []  # -inf likewise
        self._blast: list[float] = []
        self._bcount: list[int] = []
        self._recent: list[float] = []
        self._count = 0
        self._nonfinite = 0
        self._first: float | None = None
        self._first_x: float | None = None
        self._last: float | None = None
        self._last_x: float | None = None
        # Aggregates over every point but the first: the first step of a run includes warm-up and compiles.
        self._rest_min = _INF
        self._rest_max = -_INF
        self._rest_sum = 0.0
        self._rest_finite = 0

    def add(self, x: float, y: float) -> None:
        self._px.append(x)
        self._py.append(y)
        if len(self._py) >= self._flush_at:
            self._flush()

    def extend(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        """Add many points at once (parallel sequences); much cheaper per point than `add`."""
        if self._py:
            self._flush()
        if ys:
            self._fold(xs, ys)

    def _flush(self) -> None:
        xs, ys = self._px, self._py
        if ys:
            self._px, self._py = [], []
            self._fold(xs, ys)

    def _fold(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        try:
            total = _sum(ys)
        except OverflowError:  # an int beyond float range among floats
            total = None
        if total is None or (type(total) is int and type(ys) is not array and _beyond_float(ys)):
            ys = [_as_float(v) for v in ys]
            total = sum(ys)
        all_finite = total - total == 0.0  # one NaN or inf anywhere makes the sum non-finite
        n = len(ys)
        # After the first fold, the whole-run figures come from the buckets' own: the min of this fold's
        # points is the min of the mins of the buckets they went to, one comparison per point, not two.
        from_buckets = all_finite and self._count > 0
        if from_buckets:
            self._rest_sum += total
            self._rest_finite += n
        else:
            rest = ys
            if self._count == 0:
                self._first, self._first_x = ys[0], xs[0]
                rest = ys[1:]
            finite_rest = rest if all_finite else _finite(rest)
            if finite_rest:
                self._rest_sum += sum(finite_rest)
                self._rest_finite += len(finite_rest)
                lo, hi = min(finite_rest), max(finite_rest)
                if lo < self._rest_min:
                    self._rest_min = lo
                if hi > self._rest_max:
                    self._rest_max = hi
        self._count += n
        self._last, self._last_x = ys[-1], xs[-1]
        recent = self._recent
        recent.extend(ys[-_RECENT:])
        del recent[:-_RECENT]
        if not all_finite:
            self._nonfinite += n - len(_finite(ys))

        bx0, bx1, bmin, bmax, blast, bcount = (
            self._bx0,
            self._bx1,
            self._bmin,
            self._bmax,
            self._blast,
            self._bcount,
        )
        lows: list[float] = []  # the min and max of each part of ys, in order
        highs: list[float] = []
        i = 0
        while i < n:
            width = self._width
            if bcount and bcount[-1] < width:  # the last bucket is still open: fill it first
                j = min(n, i + width - bcount[-1])
                chunk = ys[i:j] if all_finite else _finite(ys[i:j])
                if chunk:
                    _, _, lo, hi = _extremes(chunk, len(chunk))
                    lows.append(lo)
                    highs.append(hi)
                    if lo < bmin[-1]:
                        bmin[-1] = lo
                    if hi > bmax[-1]:
                        bmax[-1] = hi
                bx1[-1] = xs[j - 1]
                blast[-1] = ys[j - 1]
                bcount[-1] += j - i
                i = j
                continue
            room = self.capacity - len(bcount)
            if room <= 0:
                self._merge_pairs()
                continue
            full = min(room, (n - i) // width)
            if full == 0 or not all_finite:  # one bucket, possibly partial, by hand
                j = min(n, i + width)
                chunk = ys[i:j] if all_finite else _finite(ys[i:j])
                lo, hi = _extremes(chunk, len(chunk))[2:] if chunk else (_INF, -_INF)
                lows.append(lo)
                highs.append(hi)
                bx0.append(xs[i])
                bx1.append(xs[j - 1])
                bmin.append(lo)
                bmax.append(hi)
                blast.append(ys[j - 1])
                bcount.append(j - i)
                i = j
                continue
            # `full` whole buckets at once, in C: zip(*[iter(ys)] * width) cuts ys into width-sized tuples.
            j = i + full * width
            segment = ys[i:j]
            bx0 += xs[i:j:width]
            bx1 += xs[i + width - 1 : j : width]
            blast += segment[width - 1 :: width]
            bcount += [width] * full
            mins, maxes, lo, hi = _extremes(segment, width)
            bmin += mins
            bmax += maxes
            lows.append(lo)
            highs.append(hi)
            i = j
        if from_buckets:
            lo, hi = min(lows), max(highs)
            if lo < self._rest_min:
                self._rest_min = lo
            if hi > self._rest_max:
                self._rest_max = hi

    def _merge_pairs(self) -> None:
        # In place, so that _fold's local names for these lists stay valid.
        bmin, bmax, bcount = self._bmin, self._bmax, self._bcount
        m = len(bcount) // 2 * 2
        self._bx0[:] = self._bx0[0:m:2] + self._bx0[m:]
        self._bx1[:] = self._bx1[1:m:2] + self._bx1[m:]
        bmin[:] = list(map(min, bmin[0:m:2], bmin[1:m:2])) + bmin[m:]
        bmax[:] = list(map(max, bmax[0:m:2], bmax[1:m:2])) + bmax[m:]
        self._blast[:] = self._blast[1:m:2] + self._blast[m:]
        bcount[:] = list(map(add, bcount[0:m:2], bcount[1:m:2])) + bcount[m:]
        self._width *= 2

    # ---- whole-run aggregates ----

    @property
    def count(self) -> int:
        """Points added, non-finite ones included."""
        return self._count + len(self._py)

    @property
    def nonfinite(self) -> int:
        self._flush()
        return self._nonfinite

    @property
    def first(self) -> float | None:
        self._flush()
        return self._first

    @property
    def last(self) -> float | None:
        """The last value added, NaN or inf included."""
        self._flush()
        return self._last

    @property
    def last_x(self) -> float | None:
        self._flush()
        return self._last_x

    @property
    def min(self) -> float | None:
        """The smallest finite value; None when there is none."""
        self._flush()
        lo = self._rest_min
        first = self._first
        if first is not None and first - first == 0.0 and first < lo:
            lo = first
        return None if lo == _INF else lo

    @property
    def max(self) -> float | None:
        """The largest finite value; None when there is none."""
        self._flush()
        hi = self._rest_max
        first = self._first
        if first is not None and first - first == 0.0 and first > hi:
            hi = first
        return None if hi == -_INF else hi

    @property
    def mean(self) -> float | None:
        """The mean of the finite values; None when there is none."""
        self._flush()
        total, n = self._rest_sum, self._rest_finite
        first = self._first
        if first is not None and first - first == 0.0:
            total += first
            n += 1
        return total / n if n else None

    @property
    def mean_excluding_first(self) -> float | None:
        """The mean of the finite values after the first point, or `mean` while there is only one point."""
        self._flush()
        if self._count < 2:
            return self.mean
        return self._rest_sum / self._rest_finite if self._rest_finite else None

    @property
    def max_excluding_first(self) -> float | None:
        """The largest finite value after the first point, or `max` while there is only one point."""
        self._flush()
        if self._count < 2:
            return self.max
        return None if self._rest_max == -_INF else self._rest_max

    def copy(self) -> Series:
        """An independent copy (its lists copied, O(capacity)), for drawing in one thread while another
        thread goes on adding to the original."""
        self._flush()
        clone = object.__new__(Series)
        for name, value in vars(self).items():
            setattr(clone, name, value.copy() if isinstance(value, list) else value)
        return clone

    def recent(self, n: int = _RECENT) -> list[float]:
        """The last `n` values added (at most 64), raw."""
        self._flush()
        return self._recent[-n:] if n > 0 else []

    # ---- the buckets ----

    @property
    def bucket_width(self) -> int:
        """Points per bucket (the last bucket may hold fewer)."""
        self._flush()
        return self._width

    def points(self) -> tuple[list[float], list[float], list[float], list[float]]:
        """The buckets as parallel lists (x of the bucket's last point, ymin, ymax, ylast)."""
        self._flush()
        return (
            list(self._bx1),
            [_NAN if v == _INF else v for v in self._bmin],
            [_NAN if v == -_INF else v for v in self._bmax],
            list(self._blast),
        )

    def buckets(self) -> tuple[list[float], list[float], list[float], list[float], list[float], list[int]]:
        """Every bucket field as parallel lists: (x first, x last, ymin, ymax, ylast, point count)."""
        xs, lows, highs, lasts = self.points()
        return list(self._bx0), xs, lows, highs, lasts, list(self._bcount)

    def downsample(self, width: int) -> tuple[list[float], list[float], list[float], list[float]]:
        """At most `width` columns (x, ymin, ymax, ylast) for a chart that wide: each column merges
        consecutive buckets, min of mins, max of maxes, last of lasts."""
        self._flush()
        nb = len(self._bcount)
        if width <= 0 or nb == 0:
            return [], [], [], []
        if nb <= width:
            return self.points()
        group = -(-nb // width)
        starts = range(0, nb, group)
        bmin, bmax = self._bmin, self._bmax
        lows = [min(bmin[s : s + group]) for s in starts]
        highs = [max(bmax[s : s + group]) for s in starts]
        last_of = itemgetter(*[min(s + group, nb) - 1 for s in starts])
        xs, lasts = last_of(self._bx1), last_of(self._blast)
        if len(starts) == 1:
            xs, lasts = (xs,), (lasts,)
        return (
            list(xs),
            [_NAN if v == _INF else v for v in lows],
            [_NAN if v == -_INF else v for v in highs],
            list(lasts),
        )


class SeriesSet:
    """Series by metric name, fed from events: "step" values under their own name with x = step, "eval"
    values as `eval_<name>`, "compile" values as `compile_<name>`; other kinds are ignored. An event without a
    step is placed one past the last x used."""

    def __init__(self, capacity: int = 2048) -> None:
        self.capacity = capacity
        self._series: dict[str, Series] = {}
        # Step events are queued and folded in batches, one Series.extend per metric: pieces of
        # [xs, None, values dicts] (rows) or [xs, names, columns] (StepColumns), `_pending_count` events.
        self._pending: list[list[Any]] = []
        self._pending_count = 0
        self._last_x = -1

    def add_event(self, event: Event) -> None:
        self.add_rows([_event_row(event)])

    def add_events(self, events: Iterable[Event]) -> None:
        self.add_rows(list(map(_event_row, events)))

    def add_rows(self, rows: Sequence[Row], kinds: Sequence[str] | None = None) -> None:
        """Events as `(kind, step, values, t, info)` tuples (`parsers.Row`), the batch path; `kinds` is
        their kinds when the caller already has them."""
        self.add_batch(rows, kinds)

    def add_batch(self, items: Sequence[Row | StepColumns], kinds: Sequence[str] | None = None) -> None:
        """Events as rows and `StepColumns` (a parser's `parse_batch`); `kinds` is their kinds ("step" for
        columns) when the caller already has them."""
        if not items:
            return
        if kinds is None:
            kinds = [item[0] if type(item) is tuple else "step" for item in items]
        n = len(items)
        if kinds.count("step") == n:
            self._add_steps(items)
            return
        start = 0
        for i, kind in enumerate(kinds):
            if kind == "step":
                continue
            if i > start:
                self._add_steps(items[start:i])
            start = i + 1
            if kind == "eval" or kind == "compile":
                self._add_prefixed(f"{kind}_", items[i])
        if start < n:
            self._add_steps(items[start:])

    def _add_steps(self, items: Sequence[Row | StepColumns]) -> None:
        """One run of step events, the unit a flush may follow."""
        start = 0
        for i, item in enumerate(items):
            if type(item) is StepColumns:
                if i > start:
                    self._queue_rows(items[start:i])
                self._queue_columns(item)
                start = i + 1
        if start < len(items):
            self._queue_rows(items[start:] if start else items)
        if self._pending_count >= _PENDING:
            self._flush()

    def _queue_rows(self, rows: Sequence[Row]) -> None:
        steps = list(map(_STEP, rows))
        if None in steps:
            last_x = self._last_x
            for i, step in enumerate(steps):
                last_x = steps[i] = last_x + 1 if step is None else step
        self._last_x = steps[-1]
        self._pending_count += len(steps)
        pending = self._pending
        if pending and pending[-1][1] is None:
            pending[-1][0] += steps
            pending[-1][2] += map(_VALUES, rows)
        else:
            pending.append([steps, None, list(map(_VALUES, rows))])

    def _queue_columns(self, block: StepColumns) -> None:
        self._last_x = block.steps[-1]
        self._pending_count += len(block.steps)
        self._pending.append([block.steps, block.names, block.columns])

    def _add_prefixed(self, prefix: str, row: Row) -> None:
        _, step, values, _, _ = row
        x = self._last_x = self._last_x + 1 if step is None else step
        if values:
            self._flush()  # keeps the order of points in a series that step values also feed
            for name, value in values.items():
                self._get_or_create(prefix + name).add(x, value)

    def _get_or_create(self, name: str) -> Series:
        series = self._series.get(name)
        if series is None:
            series = self._series[name] = Series(self.capacity)
        return series

    def _flush(self) -> None:
        pieces = self._pending
        if not pieces:
            return
        self._pending, self._pending_count = [], 0
        if len(pieces) == 1:
            columns = _piece_columns(*pieces[0])
        else:
            # Each metric's points of all pieces in one extend, as if they had come in one piece; metrics
            # in the order they first appear.
            merged: dict[str, list[MutableSequence[float]]] = {}
            for piece in pieces:
                for name, xs, ys in _piece_columns(*piece):
                    pair = merged.get(name)
                    if pair is None:
                        merged[name] = [_extendable(xs), _extendable(ys)]
                    else:
                        for k, more in enumerate((xs, ys)):
                            if type(pair[k]) is not list and not same_kind(pair[k], more):
                                pair[k] = list(pair[k])  # an array, and a list or another typecode to add
                            pair[k].extend(more)
            columns = [(name, xs, ys) for name, (xs, ys) in merged.items()]
        for name, xs, ys in columns:
            self._get_or_create(name).extend(xs, ys)

    def names(self) -> list[str]:
        self._flush()
        return list(self._series)

    def get(self, name: str) -> Series | None:
        self._flush()
        return self._series.get(name)

    def __getitem__(self, name: str) -> Series:
        self._flush()
        return self._series[name]

    def __contains__(self, name: object) -> bool:
        self._flush()
        return name in self._series

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._flush()
        return len(self._series)


def _extendable(values: Sequence[float]) -> MutableSequence[float]:
    """A copy to extend: a typed array stays one (no Python object per value), anything else is a list."""
    return values[:] if type(values) is array else list(values)  # type: ignore[return-value]


def _piece_columns(
    xs: list[float], names: tuple[str, ...] | None, data: list[Any]
) -> Iterable[tuple[str, Sequence[float], Sequence[float]]]:
    """(metric, xs, ys) of a queued piece, metrics in the order they first appear."""
    if names is not None:
        return zip(names, repeat(xs), data)
    names = tuple(data[0])
    if names and len(set(map(len, data))) == 1:
        # Rows that share their names become one column per metric in C (itemgetter + zip).
        try:
            columns = list(map(itemgetter(*names), data))
        except KeyError:
            pass  # same sizes, different names
        else:
            if len(names) == 1:
                return ((names[0], xs, columns),)
            return zip(names, repeat(xs), zip(*columns, strict=True))
    by_name: dict[str, tuple[list[float], list[float]]] = {}
    for x, values in zip(xs, data, strict=True):
        for name, value in values.items():
            pair = by_name.get(name)
            if pair is None:
                pair = by_name[name] = ([], [])
            pair[0].append(x)
            pair[1].append(value)
    return [(name, column_x, column_y) for name, (column_x, column_y) in by_name.items()]
