"""Text to `Event`s: the runners' metrics.jsonl lines, and stdout lines of any training script (Neuron-sample
`LOG` lines, Hugging Face Trainer dicts, user regexes). Bad input is counted and skipped, never raised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import starmap
from typing import Any

from .errors import UsageError
from .events import Event

# An event's fields in Event's order, for batch paths that skip building Event objects.
Row = tuple[str, int | None, dict[str, float], float | None, dict[str, Any]]

_SCANNER = json.JSONDecoder().scan_once
_NUMBER_TYPES = frozenset((float, int))
_NONFINITE_TEXT = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}

# Names other formats use for our canonical metrics (see events.STEP_METRICS).
LOG_NAMES = {"step_loss": "loss", "learning_rate": "lr", "throughput": "samples_per_s"}
HF_NAMES = {
    "learning_rate": "lr",
    "samples_per_second": "samples_per_s",
    "steps_per_second": "steps_per_s",
    "runtime": "runtime_s",
}
_PREFIX_ENDS = " \t:]>|"  # what may come just before `LOG` or `{`: a timestamp, a rank tag like [default0]:
_HF_STEP_KEYS = ("loss", "learning_rate", "grad_norm")
_HF_MARKERS = ("'loss'", "'eval_", "'train_", "'learning_rate'", '"loss"', '"eval_', '"train_')

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# `LOG <time> - (<epoch>, <step>)`; the time never holds parentheses, so no backtracking across the fields.
_LOG_HEAD = re.compile(r"LOG\s[^()]*\(\s*(-?\d{1,18})\s*,\s*(-?\d{1,18})\s*\)")
_LOG_FIELD = re.compile(r"([A-Za-z_][\w./-]*)\s*:\s*([^\s:,;]+)")
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
        # The C scanner behind json.loads, called directly: json.loads adds two regex matches and three
        # Python calls per line, a third of its time on a short line.
        scan = _SCANNER
        loads = json.loads
        number_types = _NUMBER_TYPES
        out: list[Row] = []
        append = out.append
        n = malformed = 0
        for line in lines:
            n += 1
            try:
                record, end = scan(line, 0)
                if end != len(line):
                    record = loads(line)  # trailing whitespace is fine, anything else raises
            except (StopIteration, ValueError, RecursionError):
                try:
                    record = loads(line)  # leading whitespace
                except (ValueError, RecursionError):
                    if line.strip():
                        malformed += 1
                    continue
            if type(record) is not dict:
                malformed += 1
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
        self.lines += n
        self.malformed += malformed
        return out


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
      These lines carry no step: the n-th HF step line this parser sees is step n, unless it has a 'step'
      key (which then also resets the count).
    - user regexes (`MetricRegex`): one "step" event per matching line with every matched metric, at the
      current step (the last step seen from any source; None before the first).

    ANSI escapes are removed and `\\r`-separated progress-bar segments are parsed one by one. `malformed`
    counts lines that looked like a LOG or dict metric line but could not be parsed.
    """

    def __init__(self, metric_regexes: Sequence[MetricRegex] = ()) -> None:
        self.metric_regexes = tuple(metric_regexes)
        self.step: int | None = None
        self.lines = 0
        self.malformed = 0
        self.events = 0
        self._hf_steps = 0
        self._log_names: dict[tuple[str, ...], tuple[str, list[str]]] = {}

    def feed(self, line: str) -> list[Event]:
        return self.feed_lines((line,))

    def feed_lines(self, lines: Iterable[str]) -> list[Event]:
        """The batch form of `feed`: all events of these lines, in order."""
        return list(starmap(Event, self.parse_rows(lines)))

    def parse_rows(self, lines: Iterable[str]) -> list[Row]:
        """`feed_lines` as `(kind, step, values, t, info)` tuples: the batch path builds no Event objects."""
        out: list[Row] = []
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
            elif "LOG" in line or "{" in line:
                bad = parse(line, out)
                if regexes:
                    bad = self._match_user(line, out) or bad
                malformed += bad
            elif regexes:
                malformed += self._match_user(line, out)
        self.lines += n
        self.malformed += malformed
        self.events += len(out)
        return out

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
            return self._parse_dict(line, brace, out)
        return False

    def _parse_log(self, line: str, at: int) -> Row | None:
        head = _LOG_HEAD.match(line, at)
        if head is None:
            return None
        epoch, step = int(head[1]), int(head[2])
        parts = line[head.end() :].split()
        count = len(parts) // 3
        values: dict[str, float] | None = None
        if count and len(parts) == count * 3 and parts[1::3].count(":") == count:
            names = tuple(parts[0::3])
            known = self._log_names.get(names)
            if known is None:
                known = self._log_names[names] = _log_kind_and_names(names)
                if len(self._log_names) > 256:  # a script that prints ever-new names: keep the cache bounded
                    self._log_names.clear()
            kind, renamed = known
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
        if kind == "step":
            if "step" in values and values["step"].is_integer():
                self._hf_steps = int(values.pop("step"))
            else:
                self._hf_steps += 1
            self.step = self._hf_steps
        renamed: dict[str, float] = {}
        for name, value in values.items():
            if prefix and name.startswith(prefix):
                name = name[len(prefix) :]
            renamed[HF_NAMES.get(name, name)] = value
        out.append((kind, self.step, renamed, None, info))
        return False

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
            quoted = match[4]
            fields[name] = _NONFINITE_TEXT.get(quoted.lower(), quoted)
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
