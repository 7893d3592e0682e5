"""Progress bars as a source of progress: a tqdm frame (`35/60 [00:07<00:02, 9.06it/s, loss=0.12]`) read into
its count, total, rate, time left and postfix values, and the bars of one stream told apart.

tqdm draws every frame from one template (`tqdm.format_meter`): `{desc}: {pct}%|{bar}| {n}/{total}
[{elapsed}<{remaining}, {rate}{postfix}]`, or without a total `{desc}: {n}{unit} [{elapsed}, {rate}{postfix}]`
(the rate as `{x}{unit}/s`, or `{x}s/{unit}` below one per second).
PyTorch Lightning, accelerate and the Hugging Face Trainer all draw theirs with tqdm, except Lightning where
`rich` is installed: its RichProgressBar draws `Epoch 2/9 ━━━━╺━━ 12/40 0:00:03 • 0:00:07 4.05it/s
train_loss: 0.249 val_loss: 0.187` (its metrics wrap onto the next lines in a narrow terminal).
"""

from __future__ import annotations

import re
from typing import NamedTuple

# What tqdm's format_sizeof puts after a scaled number (unit_scale=True).
_SCALE = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Z": 1e21, "Y": 1e24}
_NUMBER = r"\d+(?:\.\d+)?[kMGTPEZY]?"
_CLOCK = r"\d+(?::\d\d){1,2}"
_TAIL = re.compile(
    rf"(?P<n>{_NUMBER})(?:/(?P<total>{_NUMBER}|\?))?(?P<unit>[^\s\[\]|/:,]*) \["
    rf"(?P<elapsed>{_CLOCK}|\?)(?:<(?P<remaining>{_CLOCK}|\?))?,\s*"
    rf"(?P<rate>{_NUMBER}|\?|inf)(?P<rate_unit>[^\s,\]]+)"
    r"(?P<postfix>(?:,[^\]]*)?)\]\s*$"
)
_PERCENT = re.compile(r"(\d{1,3})%\|")
_RICH_CLOCK = r"\d+:\d\d:\d\d|-:--:--"
_RICH = re.compile(
    rf"(?P<desc>\S.*?)\s+(?:[━╸╺─]+\s+)?(?P<n>\d+)/(?P<total>\d+|--)\s+(?P<elapsed>{_RICH_CLOCK})\s+•\s+"
    rf"(?P<remaining>{_RICH_CLOCK})\s+(?P<rate>\d+(?:\.\d+)?)(?P<unit>[A-Za-z]+)/s(?P<metrics>.*)$"
)
_RICH_METRIC = re.compile(r"([^\s:][^\s]*?):\s+(\S+)")
_RICH_EPOCHS = re.compile(r"Epoch\s+(\d+)/(\d+)")
_POSTFIX_ITEM = re.compile(r"\s*([^=,\s][^=,]*?)\s*=\s*([^,]*)")
# Bars that count something other than training steps: an evaluation's batches, Lightning's sanity check.
_NOT_TRAINING = re.compile(r"valid|eval|test|predict|sanity|inference", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")

# A bar's unit, as the rate metric it names: tqdm's default unit "it" stays it_per_s.
_UNIT_METRICS = {
    "sample": "samples_per_s",
    "samples": "samples_per_s",
    "ex": "samples_per_s",
    "examples": "samples_per_s",
    "img": "samples_per_s",
    "images": "samples_per_s",
    "tok": "tokens_per_s",
    "tokens": "tokens_per_s",
    "it": "it_per_s",
    "step": "it_per_s",
    "steps": "it_per_s",
    "batch": "it_per_s",
    "batches": "it_per_s",
}


def _scaled(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # a scaled number: 3.50k
        return float(text[:-1]) * _SCALE[text[-1]]


def _seconds(clock: str | None) -> float | None:
    """A tqdm or Rich clock in seconds; None for one not known yet (`?`, `-:--:--`)."""
    if clock is None or not clock[0].isdigit():
        return None
    if len(clock) == 5:  # mm:ss, nearly always
        return float(int(clock[:2]) * 60 + int(clock[3:]))
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return float(seconds)


class BarFrame(NamedTuple):
    """One drawn frame of a tqdm bar. `rate` is units per second (tqdm shows `s/it` below one per second:
    it is turned back); `postfix` holds the postfix values that are numbers, `postfix_text` all of it."""

    desc: str
    n: float
    total: float | None
    elapsed_s: float | None
    remaining_s: float | None
    rate: float | None
    unit: str
    postfix: dict[str, float]
    postfix_text: str
    passes: int | None = None  # how many times the bar runs in all, where it says (Lightning's `Epoch 2/9`)
    pass_index: int | None = None  # and which of them this is

    @property
    def rate_metric(self) -> str:
        """The canonical name of this bar's rate: samples_per_s, tokens_per_s, it_per_s or `<unit>_per_s`."""
        unit = self.unit.strip().lower()
        known = _UNIT_METRICS.get(unit)
        if known is not None:
            return known
        cleaned = re.sub(r"\W+", "_", unit).strip("_")
        return f"{cleaned}_per_s" if cleaned else "it_per_s"

    @property
    def counts_training(self) -> bool:
        """False for a bar whose description says it counts evaluation or prediction batches."""
        return _NOT_TRAINING.search(self.desc) is None


def parse_bar(text: str) -> BarFrame | None:
    """The tqdm frame in `text` (one `\\r`-separated segment, escapes removed), or None when it is none."""
    if text.rstrip()[-1:] != "]":
        return None
    tail = _TAIL.search(text)
    if tail is None:
        return None
    head = text[: tail.start()]
    n_text, total_text, unit, elapsed, remaining, rate_text, rate_unit, postfix_text = tail.groups()
    if total_text is not None:
        if unit or remaining is None:
            return None
        percent = _PERCENT.search(head)
        if percent is None or not head.rstrip().endswith("|"):
            return None
        desc = head[: percent.start()]
    else:
        if not unit or remaining is not None:
            return None
        desc = head
    rate = None if rate_text == "?" else _scaled(rate_text)
    if rate_unit.endswith("/s"):
        unit = unit or rate_unit[:-2]
    elif rate_unit.startswith("s/"):
        unit = unit or rate_unit[2:]
        rate = 1.0 / rate if rate else None
    else:
        return None
    postfix_text = postfix_text.lstrip(", ").strip()
    return BarFrame(
        desc.strip().removesuffix(":").strip() if desc else "",
        _scaled(n_text),
        None if total_text is None or total_text == "?" else _scaled(total_text),
        _seconds(elapsed),
        _seconds(remaining),
        rate,
        unit,
        _postfix_numbers(postfix_text),
        postfix_text,
    )


def parse_rich_bar(text: str) -> BarFrame | None:
    """A frame of Lightning's RichProgressBar in `text` (escapes removed), or None."""
    if "•" not in text:
        return None
    match = _RICH.search(text)
    if match is None:
        return None
    desc = match["desc"].strip()
    epochs = _RICH_EPOCHS.search(desc)
    metrics_text = match["metrics"].strip()
    return BarFrame(
        desc,
        float(match["n"]),
        None if match["total"] == "--" else float(match["total"]),
        _seconds(match["elapsed"]),
        _seconds(match["remaining"]),
        float(match["rate"]),
        match["unit"],
        rich_metrics(metrics_text),
        metrics_text,
        int(epochs[2]) + 1 if epochs else None,
        int(epochs[1]) if epochs else None,
    )


def rich_metrics(text: str) -> dict[str, float]:
    """The `name: value` numbers of RichProgressBar's metrics text (or a line of it wrapped)."""
    return _numbers(_RICH_METRIC.findall(text))


def _postfix_numbers(text: str) -> dict[str, float]:
    """The `name=value` numbers of a tqdm postfix."""
    return _numbers(_POSTFIX_ITEM.findall(text))


def _numbers(pairs: list[tuple[str, str]]) -> dict[str, float]:
    values: dict[str, float] = {}
    for name, text in pairs:
        try:
            values[name] = float(text.strip())
        except ValueError:
            continue  # a string value (a file name, a phase): not a metric
    return values


class BarTracker:
    """Which of a stream's bars counts training steps, and its count across restarts.

    Bars are told apart by their description with the numbers taken out (Lightning's `Epoch 3` is the
    same bar as `Epoch 2`) and their total. A bar whose count goes back (a new epoch, or the same loop
    started again) adds what it had reached to an offset, so its count keeps growing. The training bar is
    the one that has counted furthest among those not marked as evaluation: an epoch bar over a batch bar
    counts less, an evaluation bar is never it.
    """

    def __init__(self) -> None:
        self._reached: dict[tuple[str, float | None], list[float]] = {}  # key -> [offset, last n]
        self.main: tuple[str, float | None] | None = None
        self.last: BarFrame | None = None  # the last frame of the training bar

    def observe(self, frame: BarFrame) -> int | None:
        """Counts `frame` in; returns the training step it shows when its bar is the training bar."""
        if not frame.counts_training:
            return None
        key = (_DIGITS.sub("#", frame.desc), frame.total)
        reached = self._reached.get(key)
        if reached is None:
            reached = self._reached[key] = [0.0, 0.0]
        elif frame.n < reached[1]:
            reached[0] += reached[1]
        reached[1] = frame.n
        if frame.pass_index is not None and frame.total:  # the bar says which pass it is on
            reached[0] = frame.pass_index * frame.total
        count = reached[0] + frame.n
        if self.main != key:
            main = self._reached.get(self.main) if self.main is not None else None
            if main is not None and main[0] + main[1] >= count:
                return None
            self.main = key
        self.last = frame
        return int(count)

    @property
    def total(self) -> int | None:
        """The training bar's total over all its passes so far, when it has one."""
        if self.last is None or self.last.total is None or self.main is None:
            return None
        if self.last.passes is not None:
            return int(self.last.total * self.last.passes)
        offset = self._reached[self.main][0]
        return int(offset + self.last.total)
