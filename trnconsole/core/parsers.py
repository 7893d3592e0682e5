"""Text to `Event`s: the runners' metrics.jsonl lines, and stdout lines of any training script (Neuron-sample
`LOG` lines, Hugging Face Trainer dicts, user regexes). Bad input is counted and skipped, never raised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, MutableSequence, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, compress, groupby, repeat, starmap
from math import hypot
from operator import is_, itemgetter, ne
from typing import Any

from .errors import UsageError
from .events import Event
from .progress import BarTracker, parse_bar, parse_rich_bar, rich_metrics

try:
    from orjson import loads as _orjson_loads
except ImportError:  # the stdlib scanner reads every line then
    _orjson_loads = None

try:
    from . import _linescan
except ImportError:  # installed without a C compiler: the batch paths read step lines in Python
    _linescan = None

# An event's fields in Event's order, for batch paths that skip building Event objects.
Row = tuple[str, int | None, dict[str, float], float | None, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class StepColumns:
    """Consecutive "step" events as columns: event i is at step `steps[i]` and time `ts[i]` (None for every
    event when `ts` is None), with values `{names[k]: columns[k][i]}` and no info. The batch paths give the
    runners' own step lines this shape, so that no per-event dict or tuple is built for them. The sequences
    are lists, or typed arrays (`array.array`, 'q' or 'd') where the compiled reader read them: no Python
    object per value then."""

    steps: MutableSequence[int]
    ts: MutableSequence[float] | None
    names: tuple[str, ...]
    columns: list[MutableSequence[float]]

    def __len__(self) -> int:
        return len(self.steps)

    def rows(self) -> list[Row]:
        ts = [None] * len(self.steps) if self.ts is None else self.ts
        values = zip(*self.columns, strict=True) if self.columns else repeat(())
        return [
            ("step", step, dict(zip(self.names, row, strict=True)), t, {})
            for step, t, row in zip(self.steps, ts, values, strict=False)
        ]


# What the batch paths return: events in order, runs of step events as columns.
Batch = list[Row | StepColumns]

_SCANNER = json.JSONDecoder().scan_once
_NUMBER_TYPES = frozenset((float, int))
_CONTAINER_TYPES = frozenset((list, dict))
_INT_TYPE = {int}
_NONFINITE_TEXT = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_BLANK = object()  # a metrics.jsonl line with nothing on it
_BAD = object()  # one that is not JSON
# orjson reads an integer beyond 64 bits as a float, where json keeps an exact int.
_INT64 = 2.0**63
_SUB_BATCH = 512  # lines the batch paths read at a time: their objects stay in the CPU cache

# Names other formats use for our canonical metrics (see events.STEP_METRICS).
LOG_NAMES = {"step_loss": "loss", "learning_rate": "lr", "throughput": "samples_per_s"}
HF_NAMES = {
    "learning_rate": "lr",
    "samples_per_second": "samples_per_s",
    "steps_per_second": "steps_per_s",
    "runtime": "runtime_s",
}
# Names scripts give their figures in a bar's postfix (`set_postfix(loss=..)`, Lightning's prog_bar values).
POSTFIX_NAMES = {"train_loss": "loss", "learning_rate": "lr"}
# Lines in words (see LogLineParser._parse_free).
_NUMBER_TEXT = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
_FREE_SUMMARY = re.compile(
    rf"(?:(Train throughput \(iter/sec\))|(Final loss is))\s*:?\s*({_NUMBER_TEXT})", re.IGNORECASE
)
_FREE_STEP = re.compile(r"\bstep\b\s*[:=#]?\s*(\d{1,15})(?:\s*/\s*(\d{1,15}))?\b", re.IGNORECASE)
_FREE_PAIR = re.compile(
    r"\b(loss|lr|learning[_ ]rate|grad[_ ]norm|acc|accuracy|perplexity|ppl|perf|throughput)\b"
    rf"\s*[:=]?\s*({_NUMBER_TEXT})(?![\w.])",
    re.IGNORECASE,
)
_FREE_NAMES = {
    "learning_rate": "lr",
    "acc": "accuracy",
    "ppl": "perplexity",
    "perf": "samples_per_s",
    "throughput": "samples_per_s",
}
# A postfix value of an evaluation (Lightning's `self.log("val_loss", .., prog_bar=True)`): its prefix.
_EVAL_PREFIX = re.compile(r"(?:val|valid|validation|eval)[_/]", re.IGNORECASE)
_RICH_MORE = re.compile(
    rf"\s*(?:(?:{_NUMBER_TEXT})\s+)?(?:[^\s:][^\s]*?:\s+\S+\s+)*(?:[^\s:][^\s]*?:\s+\S+|{_NUMBER_TEXT}|\S+:)\s*",
    re.IGNORECASE,
)
_PREFIX_ENDS = " \t:]>|"  # what may come just before `LOG` or `{`: a timestamp, a rank tag like [default0]:
_HF_STEP_KEYS = ("loss", "learning_rate", "grad_norm")
_HF_MARKERS = ("'loss'", "'eval_", "'train_", "'learning_rate'", '"loss"', '"eval_', '"train_')

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# `LOG <time> - (<epoch>, <step>)`; the time never holds parentheses, so no backtracking across the fields.
_LOG_HEAD = re.compile(r"LOG\s[^()]*\(\s*(-?\d{1,18})\s*,\s*(-?\d{1,18})\s*\)")
_LOG_FIELD = re.compile(r"([A-Za-z_][\w./-]*)\s*:\s*([^\s:,;]+)")
# The `(<epoch>,` token of a LOG line split at whitespace, as _LOG_HEAD reads it.
_EPOCH_TOKEN = re.compile(r"\(-?\d{1,18},")
_HF_ITEM = re.compile(
    r"""\s*(['"])((?:(?!\1).)*)\1\s*:\s*"""
    r"""(?:(['"])((?:(?!\3).)*)\3|([A-Za-z_][\w.]*\([^()]*\)|[^,'"{}\[\]()]+?))\s*(?:,|$)"""
)
# `tensor(2.5, device='xla:0')`, numpy 2's `np.float64(0.83)`: the first argument is the value.
_CALL_VALUE = re.compile(r"[A-Za-z_][\w.]*\(\s*([^,()\s]+)")
_LITERALS = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}
_NOT_A_LITERAL = object()


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class JsonlParser:
    """Parses the runners' metrics.jsonl lines: `{"t": .., "kind": .., "step": .., <fields>}`.

    Numbers (and the strings "nan", "inf", "-inf" written for non-finite floats) go to `Event.values`;
    everything else, bools included, goes to `Event.info`. A line that is not a JSON object with a string
    "kind" is counted in `malformed`; blank lines are ignored.
    """

    def __init__(self) -> None:
        self.lines = 0
        self.malformed = 0

    def feed(self, line: str) -> Event | None:
        rows = self.parse_rows((line,))
        return Event(*rows[0]) if rows else None

    def feed_lines(self, lines: Iterable[str]) -> list[Event]:
        """The batch form of `feed`: one event per well-formed line, in order."""
        return list(starmap(Event, self.parse_rows(lines)))

    def parse_rows(self, lines: Iterable[str]) -> list[Row]:
        """`feed_lines` as `(kind, step, values, t, info)` tuples: the batch path builds no Event objects."""
        lines = lines if type(lines) is list else list(lines)
        out: list[Row] = []
        malformed = _rows_into(_load_json(lines), lines, out)
        self.lines += len(lines)
        self.malformed += malformed
        return out

    def parse_batch(self, lines: Iterable[str]) -> Batch:
        """`parse_rows`, with each run of step lines that hold only numbers as one `StepColumns`."""
        lines = lines if type(lines) is list else list(lines)
        out: Batch = []
        if _linescan is None:
            malformed = _records_into(lines, out)
        else:
            malformed = _read_in_runs(_linescan.jsonl_steps, lines, out, _jsonl_block, _records_into)
        self.lines += len(lines)
        self.malformed += malformed
        return out


def _read_in_runs(
    read: Any,
    lines: list[str],
    out: Batch,
    block_of: Any,
    lines_into: Any,
    candidates: list[bool] | None = None,
) -> int:
    """Appends the events of `lines` to `out`, in order: each run of lines that `read` (a `_linescan`
    function, tried only at `candidates`) reads at once as the block `block_of` makes of what it read, and
    every other line, and every run `block_of` refuses (None), through `lines_into`. Returns how many lines
    were malformed."""
    malformed = done = at = 0  # lines[:done] are in `out`
    n = len(lines)
    while at < n:
        if candidates is not None and not candidates[at]:
            try:
                at = candidates.index(True, at)
            except ValueError:
                break
            continue
        found = read(lines, at)
        if found is None or found[0] <= at:
            at += 1
            continue
        if at > done:  # first the lines before the run: a block may depend on what they set
            malformed += lines_into(lines[done:at], out)
            done = at
        block = block_of(*found[1:])
        if block is not None:
            _append_block(out, block)
            done = found[0]
        at = found[0]
    if done < n:
        malformed += lines_into(lines[done:], out)
    return malformed


def _jsonl_block(keys: tuple[str, ...], columns: list[MutableSequence[Any]]) -> StepColumns:
    """What `_linescan.jsonl_steps` read, as the line path's `_step_columns` makes it."""
    by_key = dict(zip(keys, columns, strict=True))
    steps, ts = by_key.pop("step"), by_key.pop("t")
    return StepColumns(steps, ts, tuple(by_key), list(by_key.values()))


def _records_into(lines: list[str], out: Batch) -> int:
    """Appends the events of these metrics.jsonl lines, read line by line, runs of step lines as columns;
    returns how many were malformed."""
    malformed = 0
    for at in range(0, len(lines), _SUB_BATCH):
        chunk = lines[at : at + _SUB_BATCH]
        n = len(chunk)
        records = _load_json(chunk)
        try:
            kinds = list(map(dict.get, records, repeat("kind")))
        except TypeError:  # a line that is not a JSON object
            kinds = [record.get("kind") if type(record) is dict else None for record in records]
        others = [] if kinds.count("step") == n else compress(range(n), map(ne, kinds, repeat("step")))
        start = 0
        for end in (*others, n):
            if end > start:
                malformed += _step_records_into(records[start:end], chunk[start:end], out)
            if end < n:
                malformed += _rows_into(records[end : end + 1], chunk[end : end + 1], out)
            start = end + 1
    return malformed


def _load_json(lines: list[str]) -> list[Any]:
    """Each line's JSON value, `_BLANK` or `_BAD`."""
    if _orjson_loads is not None:
        try:
            return list(map(_orjson_loads, lines))
        except ValueError:
            pass  # some line orjson rejects: the lines one by one
        records = []
        append = records.append
        for line in lines:
            try:
                append(_orjson_loads(line))
            except ValueError:  # also NaN and Infinity, and numbers beyond a double, which json reads
                append(_stdlib_load(line))
        return records
    return list(map(_stdlib_load, lines))


def _stdlib_load(line: str) -> Any:
    # The C scanner behind json.loads, called directly: json.loads adds two regex matches and three
    # Python calls per line, a third of its time on a short line.
    try:
        record, end = _SCANNER(line, 0)
        if end != len(line):
            record = json.loads(line)  # trailing whitespace is fine, anything else raises
    except (StopIteration, ValueError, RecursionError):
        try:
            record = json.loads(line)  # leading whitespace
        except (ValueError, RecursionError):
            return _BAD if line.strip() else _BLANK
    return record


def _orjson_may_differ(record: dict[str, Any]) -> bool:
    """Whether json could read this orjson record otherwise: orjson nests deeper than json's recursion
    limit allows, and reads integers beyond 64 bits as floats."""
    values = record.values()
    types = set(map(type, values))
    if not types.isdisjoint(_CONTAINER_TYPES):
        return True
    if float not in types:
        return False
    floats = list(compress(values, map(is_, map(type, values), repeat(float))))
    return max(floats) >= _INT64 or min(floats) <= -_INT64


def _rows_into(records: list[Any], lines: list[str], out: list[Any]) -> int:
    """Appends the rows of these records (the values `_load_json` gave for `lines`); returns how many
    were malformed."""
    number_types = _NUMBER_TYPES
    recheck = _orjson_loads is not None
    append = out.append
    malformed = 0
    for record, line in zip(records, lines, strict=True):
        if type(record) is not dict:
            malformed += record is not _BLANK
            continue
        if recheck and _orjson_may_differ(record):
            record = _stdlib_load(line)
            if type(record) is not dict:
                malformed += record is not _BLANK
                continue
        kind = record.pop("kind", None)
        if type(kind) is not str:
            malformed += 1
            continue
        t = record.pop("t", None)
        step = record.pop("step", None)
        if set(map(type, record.values())) <= number_types:
            info: dict[str, Any] = {}
        else:
            record, info = _split_fields(record)
        if type(step) is not int and step is not None:
            step = _coerce_step(step, info)
        if t is not None and type(t) is not float and type(t) is not int:
            info["t"] = t
            t = None
        append((kind, step, record, t, info))
    return malformed


def _step_records_into(records: list[dict[str, Any]], lines: list[str], out: Batch) -> int:
    """Appends records of kind "step" as `StepColumns` where they fit, rows where not; returns how many
    were malformed."""
    lengths = list(map(len, records))
    if lengths.count(lengths[0]) == len(lengths):
        ends: Iterable[int] = (len(records),)
    else:
        ends = accumulate(len(list(group)) for _, group in groupby(lengths))
    malformed = start = 0
    for end in ends:
        block = _step_columns(records[start:end])
        if block is None:
            malformed += _rows_into(records[start:end], lines[start:end], out)
        else:
            _append_block(out, block)
        start = end
    return malformed


def _step_columns(records: list[dict[str, Any]]) -> StepColumns | None:
    """Step records that all have the first one's fields, each a number or a non-finite float's string, as
    columns; else None."""
    first = records[0]
    if "t" not in first or "step" not in first:
        return None
    keys = tuple(first)
    try:
        fields = list(map(list, zip(*map(itemgetter(*keys), records), strict=True)))
    except KeyError:  # the same number of fields, not the same ones
        return None
    by_key = dict(zip(keys, fields, strict=True))
    del by_key["kind"]
    steps, ts = by_key.pop("step"), by_key.pop("t")
    names, columns = tuple(by_key), list(by_key.values())
    check = _orjson_loads is not None
    if set(map(type, steps)) != _INT_TYPE or not _numbers(ts, check):
        return None
    for k, column in enumerate(columns):
        if _numbers(column, check):
            continue
        nonfinite = _NONFINITE_TEXT
        text = [value for value in column if type(value) is str]
        numbers = [value for value in column if type(value) is not str]
        if not text or not set(text) <= nonfinite.keys() or not _numbers(numbers, check):
            return None
        columns[k] = [nonfinite[value] if type(value) is str else value for value in column]
    return StepColumns(steps, ts, names, columns)


def _numbers(column: list[Any], check_int64: bool) -> bool:
    """Whether these are all ints and floats, bools not included; with `check_int64`, also none a float
    that may be an integer beyond 64 bits that orjson read as a float (json keeps it an int)."""
    types = set(map(type, column))
    if not types <= _NUMBER_TYPES:
        return False
    if not check_int64 or float not in types:
        return True
    try:
        # At least the largest magnitude, in one pass in C. NaN and inf (json's NaN and Infinity, on lines
        # orjson refuses) fail it too: such columns take the row path.
        return hypot(*column) < _INT64
    except OverflowError:  # an int beyond a double, on a line orjson refused
        return False


def _append_block(out: Batch, block: StepColumns) -> None:
    last = out[-1] if out else None
    if type(last) is StepColumns and last.names == block.names and _joinable(last, block):
        last.steps.extend(block.steps)
        if last.ts is not None and block.ts is not None:
            last.ts.extend(block.ts)
        for column, more in zip(last.columns, block.columns, strict=True):
            column.extend(more)
    else:
        out.append(block)


def _joinable(first: StepColumns, then: StepColumns) -> bool:
    """Whether `then`'s sequences extend `first`'s without changing a value's type: lists with lists, typed
    arrays with arrays of their typecode (an array('d') would make floats of a list's ints)."""
    pairs = [(first.steps, then.steps), *zip(first.columns, then.columns, strict=True)]
    if first.ts is not None or then.ts is not None:
        if first.ts is None or then.ts is None:
            return False
        pairs.append((first.ts, then.ts))
    return all(same_kind(a, b) for a, b in pairs)


def same_kind(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether b extends a without changing a value's type: both lists, or arrays of one typecode."""
    return type(a) is type(b) and (type(a) is list or a.typecode == b.typecode)  # type: ignore[attr-defined]


def _split_fields(record: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    values: dict[str, float] = {}
    info: dict[str, Any] = {}
    for name, value in record.items():
        kind = type(value)
        if kind is float or kind is int:
            values[name] = value
        elif kind is str and value in _NONFINITE_TEXT:
            values[name] = _NONFINITE_TEXT[value]
        else:
            info[name] = value
    return values, info


def _coerce_step(step: Any, info: dict[str, Any]) -> int | None:
    if type(step) is float and step.is_integer():
        return int(step)
    info["step"] = step  # not a step number: keep what was written, where it can be seen
    return None


@dataclass(frozen=True)
class MetricRegex:
    """A user metric read from stdout, like a SageMaker metric definition: capture group 1 is the value."""

    name: str
    pattern: re.Pattern[str]

    @classmethod
    def from_spec(cls, spec: str) -> MetricRegex:
        """`NAME=REGEX`, split at the first `=`, e.g. `throughput=([0-9.]+) samples/s`."""
        name, sep, regex = spec.partition("=")
        name = name.strip()
        example = "e.g. --metric 'throughput=([0-9.]+) samples/s'"
        if not sep or not name or not regex:
            raise UsageError(f"--metric {spec!r}: expected NAME=REGEX, {example}")
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            raise UsageError(f"--metric {spec!r}: invalid regular expression ({exc}); fix REGEX") from None
        if pattern.groups < 1:
            raise UsageError(
                f"--metric {spec!r}: the regex has no capture group; put ( ) around the value, {example}"
            )
        return cls(name, pattern)


class LogLineParser:
    """Parses stdout lines of any training script into events.

    - `LOG <time> - (<epoch>, <step>) name : value ...` (the Neuron samples and our runners): a "step" event
      with the epoch in values and step_loss/learning_rate/throughput renamed loss/lr/samples_per_s; a line
      whose fields are all `eval_*` is an "eval" event with the prefix stripped. Any prefix before `LOG`
      (a timestamp, torchrun's `[default0]:`) is allowed.
    - Hugging Face Trainer dicts: `{'loss': .., 'learning_rate': ..}` is a "step" event,
      `{'eval_loss': ..}` an "eval" event (prefix stripped), `{'train_runtime': ..}` a "summary" event.
      Values may be numbers or, as transformers 5 prints them, strings of numbers. These lines carry no
      step: with a bar running, a dict waits for the bar's next frame (tqdm.write draws it at once, at the
      step the Trainer is at; `flush` gives out one still waiting at the end); with none, the epoch times
      the steps per epoch when known, else the n-th step dict is step n; a 'step' key, where there is one,
      wins.
    - tqdm frames (`core.progress`): the training bar's count is the step, with a "progress" event (total,
      time left), a "step" event for its rate and its postfix values, an "eval" event for postfix values
      named val_*/eval_*.
    - lines in words: `Train throughput (iter/sec): X` and `Final loss is X` (the Neuron MNIST sample's
      end) as "summary" events, and a line with `step <n>` and `loss <x>` as a "step" event with the figures
      named beside it (lr, grad_norm, accuracy, perplexity, throughput/perf); not when user regexes are
      given, which say how the script's lines read.
    - user regexes (`MetricRegex`): one "step" event per matching line with every matched metric, at the
      current step (the last step seen from any source; None before the first).

    ANSI escapes are removed and `\\r`-separated progress-bar segments are parsed one by one. `malformed`
    counts lines that looked like a LOG or dict metric line but could not be parsed. `step_source` says
    where the current step came from: "log" (the line's own), "bar", "epoch" or "count".
    """

    def __init__(self, metric_regexes: Sequence[MetricRegex] = ()) -> None:
        self.metric_regexes = tuple(metric_regexes)
        self.step: int | None = None
        self.lines = 0
        self.malformed = 0
        self.events = 0
        self._hf_steps = 0
        self.bars = BarTracker()
        self._bar_evals: dict[str, float] = {}
        self._waiting: list[tuple[str, dict[str, float], dict[str, Any]]] = []
        self._rich_open = False  # the last line was a RichProgressBar frame: its metrics may wrap below
        self._rich_text = ""
        # Where `step` came from: "log" (the line's own step), "bar", "epoch", "count" (the n-th step dict).
        self.step_source: str | None = None
        self.steps_per_epoch: float | None = None  # learnt from the bar, or given (trainer_state.json)
        self._log_names: dict[tuple[str, ...], tuple[str, list[str]]] = {}

    def feed(self, line: str) -> list[Event]:
        return self.feed_lines((line,))

    def feed_lines(self, lines: Iterable[str]) -> list[Event]:
        """The batch form of `feed`: all events of these lines, in order."""
        return list(starmap(Event, self.parse_rows(lines)))

    def parse_rows(self, lines: Iterable[str]) -> list[Row]:
        """`feed_lines` as `(kind, step, values, t, info)` tuples: the batch path builds no Event objects."""
        out: list[Row] = []
        n, malformed = self._parse_into(lines, out)
        self.lines += n
        self.malformed += malformed
        self.events += len(out)
        return out

    def parse_batch(self, lines: Iterable[str]) -> Batch:
        """`parse_rows`, with each run of LOG step lines of one shape as one `StepColumns`."""
        if self.metric_regexes:  # a user regex may match any line: each one goes through _match_user
            return list(self.parse_rows(lines))
        lines = lines if type(lines) is list else list(lines)
        out: Batch = []
        malformed = 0
        if _linescan is None:
            for at in range(0, len(lines), _SUB_BATCH):
                chunk = lines[at : at + _SUB_BATCH]
                block = self._uniform_log_columns(chunk)
                if block is None:
                    malformed += self._mixed_lines_into(chunk, out)
                else:
                    _append_block(out, block)
        else:
            starts = list(map(str.startswith, lines, repeat("LOG")))
            malformed = _read_in_runs(
                _linescan.log_steps,
                lines,
                out,
                self._log_block,
                lambda chunk, into: self._parse_into(chunk, into)[1],
                starts,
            )
        self.lines += len(lines)
        self.malformed += malformed
        self.events += sum(len(item) if type(item) is StepColumns else 1 for item in out)
        return out

    def _parse_into(self, lines: Iterable[str], out: list[Any]) -> tuple[int, int]:
        """Appends the events of these lines one by one; returns (lines, malformed lines)."""
        n = malformed = 0
        parse, parse_log = self._parse, self._parse_log
        regexes = self.metric_regexes
        for line in lines:
            n += 1
            if "\x1b" in line:
                line = _ANSI.sub("", line)
            if "\r" in line:
                bad = False
                for segment in line.split("\r"):
                    if segment:
                        bad = parse(segment, out) or bad
                        if regexes:
                            bad = self._match_user(segment, out) or bad
                malformed += bad
                continue
            if line.startswith("LOG ") and not regexes:  # the runners' own lines: straight to the point
                row = parse_log(line, 0)
                if row is None:
                    malformed += 1
                else:
                    out.append(row)
            # Most other lines are plain text and leave here after two substring tests.
            elif (
                "LOG" in line
                or "{" in line
                or line[-1:] == "]"
                or line.rstrip()[-1:] == "]"
                or "oss" in line
                or "hroughput" in line
                or self._rich_open
            ):
                bad = parse(line, out)
                if regexes:
                    bad = self._match_user(line, out) or bad
                malformed += bad
            elif regexes:
                malformed += self._match_user(line, out)
        return n, malformed

    def _log_block(
        self,
        names: tuple[str, ...],
        epochs: MutableSequence[int],
        steps: MutableSequence[int],
        columns: list[MutableSequence[float]],
    ) -> StepColumns | None:
        """What `_linescan.log_steps` read, as `_parse_log` reads each line (the current step included): None
        when these are not step lines, or when a field overwrites the epoch or another field (the lines' own
        path keeps the last)."""
        kind, renamed = self._kind_and_names(names)
        if kind != "step" or "epoch" in renamed or len(set(renamed)) != len(renamed):
            return None
        self.step = steps[-1]
        self.step_source = "log"
        return StepColumns(steps, None, (*renamed, "epoch"), [*columns, epochs])

    def _uniform_log_columns(self, lines: list[str]) -> StepColumns | None:
        """Lines that all start with `LOG ` and split into as many tokens as the first: as columns, from
        one split of them all; None when they are anything else."""
        text = " ".join(lines)
        count = len(lines)
        if "\x1b" in text or "\r" in text:
            return None
        if list(map(str.startswith, lines, repeat("LOG "))).count(True) != count:
            return None
        width = len(lines[0].split())
        tokens = text.split()
        # Each line starts with a "LOG" token. _log_columns finds one every `width` tokens and no others:
        # those are then where the lines start, so each line is `width` tokens long.
        if len(tokens) != width * count or tokens[::width].count("LOG") != count:
            return None
        return self._log_columns(tokens, count, width)

    def _mixed_lines_into(self, lines: list[str], out: Batch) -> int:
        """Appends the events of these lines, runs of LOG lines of one shape as columns; returns how many
        lines were malformed."""
        text = "".join(lines)
        if "\x1b" in text or "\r" in text:
            plain = [line.startswith("LOG ") and "\x1b" not in line and "\r" not in line for line in lines]
        else:
            plain = list(map(str.startswith, lines, repeat("LOG ")))
        malformed = start = 0
        for fast, group in groupby(plain):
            end = start + len(list(group))
            if fast:
                malformed += self._log_lines_into(lines[start:end], out)
            else:
                malformed += self._parse_into(lines[start:end], out)[1]
            start = end
        return malformed

    def _log_lines_into(self, lines: list[str], out: Batch) -> int:
        """Appends the events of lines that start with `LOG `, runs of one width as columns where they have
        one shape; returns how many lines were malformed."""
        tokens = list(map(str.split, lines))
        widths = list(map(len, tokens))
        if widths.count(widths[0]) == len(widths):
            ends: Iterable[int] = (len(lines),)
        else:
            ends = accumulate(len(list(group)) for _, group in groupby(widths))
        malformed = start = 0
        for end in ends:
            flat = list(chain.from_iterable(tokens[start:end]))
            block = self._log_columns(flat, end - start, widths[start])
            if block is None:
                malformed += self._parse_into(lines[start:end], out)[1]
            else:
                _append_block(out, block)
            start = end
        return malformed

    def _log_columns(self, tokens: list[str], count: int, width: int) -> StepColumns | None:
        """The tokens of `count` LOG lines, `width` each, as columns when every line has the first one's
        shape (the same field names in the same places) and `_parse_log` would read it whole; else None.
        Beyond the first token of each line, none is `LOG`."""
        first = tokens[:width]
        head = next((at for at in range(1, width) if "(" in first[at]), 0)
        fields = width - head - 2
        if not head or fields < 3 or fields % 3:
            return None
        names = first[head + 2 :: 3]
        kind, renamed = self._kind_and_names(tuple(names))
        if kind != "step" or "epoch" in renamed or len(set(renamed)) != len(renamed) or "LOG" in names:
            return None  # a line that is not a step, or a field the epoch or another field overwrites
        for at in range(1, head):
            # _LOG_HEAD's `[^()]*` must end at the `(<epoch>,` token.
            text = "".join(tokens[at::width])
            if "(" in text or ")" in text or "LOG" in text:
                return None
        epochs = tokens[head::width]
        if epochs.count(epochs[0]) == count:  # nearly always: a run is within one epoch
            if not _EPOCH_TOKEN.fullmatch(epochs[0]):
                return None
            epoch_column = [int(epochs[0][1:-1])] * count
        else:
            distinct = set(epochs)
            epoch_of = {token: int(token[1:-1]) for token in distinct if _EPOCH_TOKEN.fullmatch(token)}
            if len(epoch_of) != len(distinct):
                return None
            epoch_column = list(map(epoch_of.__getitem__, epochs))
        # The `<step>)` tokens, each `-?\d{1,18}\)` as _LOG_HEAD reads it: one ")" each, at its end, and
        # before it what int() reads without a sign or underscore (\d and int() agree on what a digit is).
        step_text = "\n".join(tokens[head + 1 :: width])
        if (
            step_text.count(")") != count
            or step_text.count(")\n") != count - 1
            or step_text[-1] != ")"
            or "+" in step_text
            or "_" in step_text
        ):
            return None
        digits = step_text[:-1].split(")\n")
        if max(map(len, digits)) > 18:
            return None
        columns = []
        try:
            steps = list(map(int, digits))
            for at, name in zip(range(head + 2, width, 3), names, strict=True):
                # Tokens hold no newline: joined by one, they are all `name` when the texts are equal.
                if "\n".join(tokens[at::width]) != name + f"\n{name}" * (count - 1):
                    return None
                if tokens[at + 1 :: width].count(":") != count:
                    return None
                columns.append(list(map(float, tokens[at + 2 :: width])))
        except ValueError:  # not a step number, or a value _parse_log would read field by field
            return None
        columns.append(epoch_column)
        self.step = steps[-1]
        self.step_source = "log"
        return StepColumns(steps, None, (*renamed, "epoch"), columns)

    def _kind_and_names(self, names: tuple[str, ...]) -> tuple[str, list[str]]:
        known = self._log_names.get(names)
        if known is None:
            known = self._log_names[names] = _log_kind_and_names(names)
            if len(self._log_names) > 256:  # a script that prints ever-new names: keep the cache bounded
                self._log_names.clear()
        return known

    def _parse(self, line: str, out: list[Row]) -> bool:
        """Appends the line's LOG or dict event to `out`; True when it looked like one but was not."""
        at = line.find("LOG")
        while at >= 0:
            if (at == 0 or line[at - 1] in _PREFIX_ENDS) and line[at + 3 : at + 4].isspace():
                row = self._parse_log(line, at)
                if row is None:
                    return True
                out.append(row)
                return False
            at = line.find("LOG", at + 3)
        brace = line.find("{")
        if brace >= 0 and (brace == 0 or line[brace - 1] in _PREFIX_ENDS) and line.rstrip().endswith("}"):
            if brace > 0 and "[" in line:
                self._parse_bar(line[:brace], out)  # a frame drawn on the line before the dict was written
            return self._parse_dict(line, brace, out)
        if "[" in line and self._parse_bar(line, out):
            return False
        if "•" in line and self._parse_bar(line, out, parse_rich_bar):
            self._rich_open = True
            self._rich_text = self.bars.last.postfix_text if self.bars.last is not None else ""
            return False
        if self._rich_open:
            self._rich_open = self._parse_rich_more(line, out)
            if self._rich_open:
                return False
        if ("oss" in line or "hroughput" in line) and not self.metric_regexes:  # the user's regexes say it
            self._parse_free(line, out)
        return False

    def _parse_free(self, line: str, out: list[Row]) -> None:
        """A line in words: the Neuron MNIST sample's `Train throughput (iter/sec): X` and `Final loss is X`
        (the run's own final figures), or any line with `step <n>` and `loss <x>` (`epoch 1 step 20: loss
        0.349 lr 4.00e-03`, `Step 5/30 | loss=2.31`), a step with the figures named beside it."""
        summary = _FREE_SUMMARY.search(line)
        if summary is not None:
            name = "it_per_s" if summary[1] else "loss"
            number = _float_or_none(summary[3])
            if number is not None:
                out.append(("summary", self.step, {name: number}, None, {}))
            return
        step = _FREE_STEP.search(line)
        if step is None:
            return
        values = {}
        for name, text in _FREE_PAIR.findall(line):
            number = _float_or_none(text)
            if number is not None:
                values[_FREE_NAMES.get(name.lower().replace(" ", "_"), name.lower())] = number
        if "loss" not in values:
            return
        self.step = int(step[1])
        self.step_source = "log"
        if step[2] is not None:
            out.append(("progress", self.step, {"total": float(step[2])}, None, {}))
        out.append(("step", self.step, values, None, {}))

    def _parse_rich_more(self, line: str, out: list[Row]) -> bool:
        """A line of a RichProgressBar frame's metrics wrapped below it (a pair cut in two included: `..
        val_loss:` then `0.187 val_acc: 0.938`); False when `line` is not one."""
        if not line.strip() or not _RICH_MORE.fullmatch(line):
            return False
        frame = self.bars.last
        self._rich_text += " " + line.strip()
        if frame is None or self.step is None:
            return True
        values = self._postfix_rows(rich_metrics(self._rich_text), self.step, out)
        named = {POSTFIX_NAMES.get(name, name): value for name, value in frame.postfix.items()}
        if values and values != named:
            out.append(("step", self.step, values, None, {}))
        return True

    def _postfix_rows(self, postfix: dict[str, float], step: int, out: list[Row]) -> dict[str, float]:
        """Appends an "eval" event for the evaluation values among a bar's postfix values when they are new;
        returns the others, under canonical names."""
        values: dict[str, float] = {}
        evals: dict[str, float] = {}
        for name, value in postfix.items():
            prefix = _EVAL_PREFIX.match(name)
            if prefix is None:
                values[POSTFIX_NAMES.get(name, name)] = value
            else:
                evals[name[prefix.end() :]] = value
        # Lightning shows the last validation's values on every frame after it: only what changed is new.
        new = {name: value for name, value in evals.items() if self._bar_evals.get(name) != value}
        if new:
            self._bar_evals.update(new)
            out.append(("eval", step, new, None, {}))
        return values

    def _parse_bar(self, text: str, out: list[Row], parse: Any = parse_bar) -> bool:
        """Appends the events of a progress bar's frame; False when `text` is none."""
        frame = parse(text)
        if frame is None:
            return False
        bars = self.bars
        before = bars.last
        step = bars.observe(frame)
        if step is None:
            return True
        self.step = step
        self.step_source = "bar"
        if self._waiting:
            self._flush_waiting(out)
        if before is not None and before.n == frame.n and before.postfix_text == frame.postfix_text:
            return True  # the same frame drawn again (a refresh, or set_postfix with nothing new)
        progress: dict[str, float] = {}
        total = bars.total
        if total is not None:
            progress["total"] = float(total)
        if frame.remaining_s is not None:
            progress["remaining_s"] = frame.remaining_s
        info = {"unit": frame.unit, "rate_metric": frame.rate_metric, "desc": frame.desc}
        out.append(("progress", step, progress, None, info))
        values: dict[str, float] = {}
        if before is None or before.postfix_text != frame.postfix_text:  # what is new, not the bar moving on
            values = self._postfix_rows(frame.postfix, step, out)
        if frame.rate is not None and frame.n > 0 and (before is None or before.n != frame.n):
            values[frame.rate_metric] = frame.rate
        if values:
            out.append(("step", step, values, None, {}))
        return True

    def _parse_log(self, line: str, at: int) -> Row | None:
        head = _LOG_HEAD.match(line, at)
        if head is None:
            return None
        epoch, step = int(head[1]), int(head[2])
        parts = line[head.end() :].split()
        count = len(parts) // 3
        values: dict[str, float] | None = None
        if count and len(parts) == count * 3 and parts[1::3].count(":") == count:
            kind, renamed = self._kind_and_names(tuple(parts[0::3]))
            try:
                values = dict(zip(renamed, map(float, parts[2::3]), strict=True))
            except ValueError:
                values = None
        if values is None:
            fields = {}
            for name, text in _LOG_FIELD.findall(line, head.end()):
                number = _float_or_none(text)
                if number is not None:
                    fields[name] = number
            if not fields:
                return None
            kind, renamed = _log_kind_and_names(tuple(fields))
            values = dict(zip(renamed, fields.values(), strict=True))
        self.step = step
        self.step_source = "log"
        values["epoch"] = epoch
        return (kind, step, values, None, {})

    def _parse_dict(self, line: str, brace: int, out: list[Row]) -> bool:
        fields = _parse_py_dict(line[brace:].strip())
        if fields is None:
            return any(marker in line for marker in _HF_MARKERS)
        values: dict[str, float] = {}
        info: dict[str, Any] = {}
        for name, value in fields.items():
            if type(value) is float:
                values[name] = value
            else:
                info[name] = value
        if "train_runtime" in fields or any(name.startswith("train_") for name in values):
            kind, prefix = "summary", "train_"
        elif any(name.startswith("eval_") for name in values):
            kind, prefix = "eval", "eval_"
        elif any(name in values for name in _HF_STEP_KEYS):
            kind, prefix = "step", ""
        else:
            return False  # a dict, but not one of the Trainer's metric lines (a printed config, say)
        renamed: dict[str, float] = {}
        for name, value in values.items():
            if prefix and name.startswith(prefix):
                name = name[len(prefix) :]
            renamed[HF_NAMES.get(name, name)] = value
        if "step" in values and values["step"].is_integer():
            self._hf_steps = self.step = int(renamed.pop("step"))
            self.step_source = "log"
        elif kind != "summary" and self.bars.last is not None:
            # tqdm draws at most every 0.1 s, so the frame before the dict may be a step behind; the one
            # tqdm.write draws right after it shows the step the Trainer is at: the dict waits for it.
            self._waiting.append((kind, renamed, info))
            return False
        elif kind == "step" or self.step_source != "log":
            self._step_of_dict(kind, values.get("epoch"))
        if kind == "summary":
            self._flush_waiting(out)
        out.append((kind, self.step, renamed, None, info))
        return False

    def _flush_waiting(self, out: list[Row]) -> None:
        """Appends the dicts waiting for a bar frame, at the current step."""
        for kind, values, info in self._waiting:
            epoch = values.get("epoch")
            if epoch and epoch > 0 and self.step:
                self.steps_per_epoch = self.step / epoch
            out.append((kind, self.step, values, None, info))
        self._waiting.clear()

    def flush(self) -> list[Row]:
        """What is held back for the line after it (a Trainer dict waiting for its bar's next frame), given
        out now: the end of what there is to read."""
        out: list[Row] = []
        self._flush_waiting(out)
        return out

    def _step_of_dict(self, kind: str, epoch: float | None) -> None:
        """The step of a Hugging Face log dict with no bar running, which carries none: the epoch times the
        steps per epoch, or failing that the count of step dicts so far."""
        if epoch is not None and self.steps_per_epoch:
            self.step = self._hf_steps = round(epoch * self.steps_per_epoch)
            self.step_source = "epoch"
        elif kind == "step":
            self._hf_steps += 1
            self.step = self._hf_steps
            self.step_source = "count"

    def _match_user(self, line: str, out: list[Row]) -> bool:
        values: dict[str, float] = {}
        failed = False
        for metric in self.metric_regexes:
            match = metric.pattern.search(line)
            if match is None or match.group(1) is None:
                continue
            number = _float_or_none(match.group(1).strip().replace(",", ""))
            if number is None:
                failed = True
            else:
                values[metric.name] = number
        if values:
            out.append(("step", self.step, values, None, {}))
        return failed and not values


def _log_kind_and_names(names: tuple[str, ...]) -> tuple[str, list[str]]:
    """A LOG line whose fields are all eval_* is an evaluation; otherwise a step, with canonical names."""
    if all(name.startswith("eval_") for name in names):
        return "eval", [name[5:] for name in names]
    return "step", [LOG_NAMES.get(name, name) for name in names]


def _parse_py_dict(text: str) -> dict[str, Any] | None:
    """A flat Python-repr (or JSON) dict of scalars, `nan` and `tensor(..)` included; else None."""
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        return None
    inner = text[1:-1].strip()
    fields: dict[str, Any] = {}
    pos, end = 0, len(inner)
    while pos < end:
        match = _HF_ITEM.match(inner, pos)
        if match is None or match.end() == pos:
            return None
        pos = match.end()
        name = match[2]
        if match[3] is not None:
            quoted = match[4]  # transformers 5 prints its values as strings: {'loss': '0.6669'}
            number = _float_or_none(quoted)
            fields[name] = quoted if number is None else number
        else:
            value = _scalar(match[5].strip())
            if value is _NOT_A_LITERAL:
                return None  # a bare word: not a printed dict of numbers
            fields[name] = value
    return fields if fields else None


def _scalar(text: str) -> Any:
    number = _float_or_none(text)
    if number is not None:
        return number
    if text.endswith(")"):
        call = _CALL_VALUE.match(text)
        number = _float_or_none(call[1]) if call else None
        return text if number is None else number
    return _LITERALS.get(text, _NOT_A_LITERAL)
