"""Reading neuron_parallel_compile's output: trial-run graph extraction, parallel-compile progress, compile
cache hits and misses, failures, and where the compile cache lives.

Pure text in, plain data out: `PrecompileLog` is fed one line at a time while the tool runs (or a recorded
log at once) and `snapshot()` returns what is known so far. The line formats are those of torch-neuronx's
neuron_parallel_compile and libneuronxla's cache wrapper, e.g.
`2024-02-26 16:04:13.000142:  87302  INFO ||NEURON_CACHE||: Current remaining items are 19, locked are 0,
failed are 0, done are 0, total is 19`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CACHE_URL = "/var/tmp/neuron-compile-cache"
MAX_ERRORS = 20  # error messages kept (all are counted)
MAX_SKIPPED_SAMPLES = 5
MAX_JSON_BLOCK_LINES = 50_000  # a summary block longer than this is not one

PROGRESS = re.compile(
    r"Current remaining items are (\d+), locked are (\d+), failed are (\d+), done are (\d+), total is (\d+)"
)
CACHE_PATH = re.compile(r"Compile cache path: (\S+)")
EXTRACTED = re.compile(r"Extracting graphs \((\S+)\) for ahead-of-time parallel compilation")
CACHE_HIT = re.compile(r"Using a cached neff at (\S+?\.neff)\b")
CACHED_FAILURE = re.compile(r"Got a cached failed neff at (\S+?\.neff)\b")
COMPILER_CALL = re.compile(r"Call compiler with cmd: (\S.*)$")
GRAPH_LIST = re.compile(r"New graph list from script(?: (\d+))?:")
TOTAL_GRAPHS = re.compile(r"Total graphs: (\d+)\s*$")
TOTAL_OK = re.compile(r"Total successful compilations: (\d+)\s*$")
TOTAL_FAILED = re.compile(r"Total failed compilations: (\d+)\s*$")
# A graph's identity in the cache: MODULE_<hash>+<flags hash> (older SDKs: MODULE_<hash> directories).
GRAPH_KEY = re.compile(r"MODULE_[0-9A-Za-z_]+(?:\+[0-9a-f]+)?")
# `2024-02-26 16:04:13.000142:  87302  ERROR ||NEURON_CC_WRAPPER||: Failed compilation with ...`
LOGGER_LINE = re.compile(r"\b(INFO|WARNING|ERROR|DEBUG)\s*\|\|([A-Z_]+)\|\|:\s?(.*)$")
JSON_BLOCK_START = re.compile(r"\|\|NEURON_PARALLEL_COMPILE\|\|:\s*\{\s*$")
OLD_PREFIX = re.compile(r"^\s*INFO: ?")  # SDK 2.13-era output prefixed every summary line with "INFO: "
DIAGNOSTIC = re.compile(r"\[[A-Z]{3}\d{3}\].*")  # neuronx-cc's coded errors, e.g. [TEN404] Internal ...
EXIT_STATUS = re.compile(r"returned non-zero exit status (-?\d+)")
# The last line of a Python traceback (torchrun prefixes each rank's with `[rank0]: `).
EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:\w+\.)*\w*(?:Error|Exception|Interrupt): .+)$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
FAILURE_TEXTS = (
    re.compile(r"neuronx-cc failed with -?\d+"),
    re.compile(r"returned non-zero exit status \d+"),
    re.compile(r"sub-process \d+ got exception: .*"),
    re.compile(r"^Killed$"),
)
# Substrings of the lines this module reads: a line holding one that its pattern does not match was cut off
# or mangled, and is counted as skipped rather than guessed at.
MARKERS = {
    "Current remaining items": PROGRESS,
    "Compile cache path": CACHE_PATH,
    "Extracting graphs": EXTRACTED,
    "Using a cached neff": CACHE_HIT,
    "cached failed neff": CACHED_FAILURE,
    "Call compiler with": COMPILER_CALL,
    "Total graphs": TOTAL_GRAPHS,
    "Total successful": TOTAL_OK,
    "Total failed": TOTAL_FAILED,
}

PHASES = ("starting", "extracting", "compiling", "done")


# ---- where the compile cache is ----


@dataclass(frozen=True)
class CacheLocation:
    """The compile cache a Neuron job uses: a local directory or an s3:// URL, and which setting chose it."""

    url: str
    source: str  # "NEURON_CC_FLAGS --cache_dir", "NEURON_COMPILE_CACHE_URL" or "default"

    @property
    def kind(self) -> str:
        return "s3" if self.url.startswith("s3://") else "local"

    def resolved(self, cwd: str | None = None) -> str:
        """The URL as given for S3; a local path made absolute against the job's working directory."""
        if self.kind == "s3":
            return self.url
        path = Path(self.url).expanduser()
        return str(path if path.is_absolute() else Path(cwd or ".").absolute() / path)

    def to_json(self, cwd: str | None = None) -> dict[str, str]:
        return {"url": self.url, "kind": self.kind, "source": self.source, "resolved": self.resolved(cwd)}


def cache_dir_flag(cc_flags: str) -> str | None:
    """The value of `--cache_dir` in a NEURON_CC_FLAGS string (the last one wins, as argparse has it)."""
    try:
        words = shlex.split(cc_flags)
    except ValueError:  # an unbalanced quote: read it the way a plain split would
        words = cc_flags.split()
    found = None
    for i, word in enumerate(words):
        if word.startswith("--cache_dir="):
            found = word.split("=", 1)[1]
        elif word == "--cache_dir" and i + 1 < len(words):
            found = words[i + 1]
    return found or None


def cache_location(env: Mapping[str, str]) -> CacheLocation:
    """Where a job with this environment keeps compiled graphs: `--cache_dir` in NEURON_CC_FLAGS wins over
    NEURON_COMPILE_CACHE_URL, and both over /var/tmp/neuron-compile-cache (the Neuron caching docs' rule)."""
    flag = cache_dir_flag(env.get("NEURON_CC_FLAGS", ""))
    if flag:
        return CacheLocation(flag, "NEURON_CC_FLAGS --cache_dir")
    url = env.get("NEURON_COMPILE_CACHE_URL", "").strip()
    if url:
        return CacheLocation(url, "NEURON_COMPILE_CACHE_URL")
    return CacheLocation(DEFAULT_CACHE_URL, "default")


# ---- progress and summary ----


@dataclass(frozen=True)
class Progress:
    """The compile cache's own tally during parallel compilation."""

    remaining: int
    locked: int
    failed: int
    done: int
    total: int

    @property
    def finished(self) -> int:
        return self.done + self.failed

    @property
    def fraction(self) -> float:
        return min(1.0, self.finished / self.total) if self.total else 0.0

    def to_json(self) -> dict[str, int]:
        return {
            "total": self.total,
            "done": self.done,
            "failed": self.failed,
            "locked": self.locked,
            "remaining": self.remaining,
        }


@dataclass(frozen=True)
class PrecompileSummary:
    """What a neuron_parallel_compile output said, so far or in all."""

    phase: str
    progress: Progress | None
    extracted: int  # distinct graphs the trial run extracted for compilation
    cache_hits: int  # distinct graphs the trial run found compiled in the cache
    cache_misses: int  # distinct graphs that needed compiling (extracted, or handed to the compiler)
    cached_failures: int  # distinct graphs the cache holds as failed compilations
    compiler_calls: int  # distinct graphs handed to neuronx-cc
    compiler_passes: int  # "Compiler status PASS" lines
    summary_seen: bool  # the tool's closing "Total graphs/successful/failed" lines were read
    graphs_total: int
    compiled: int
    failed: int
    failed_graphs: tuple[str, ...]
    compile_seconds: float | None  # sum of per-graph compile times from the JSON report (newer SDKs)
    nothing_to_compile: bool  # "No todo hlos found": every graph was already in the cache
    script_failed: bool  # the trial run of the training command exited with an error
    script_error_ignored: (
        bool  # ... and NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE had it compile anyway
    )
    cache_path: str | None  # the cache path the tool reported
    errors: tuple[str, ...]
    error_count: int
    lines: int
    skipped_lines: int
    skipped_samples: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "progress": self.progress.to_json() if self.progress else None,
            "graphs": {
                "total": self.graphs_total,
                "compiled": self.compiled,
                "failed": self.failed,
                "extracted": self.extracted,
                "cache_hits": self.cache_hits,
                "cache_misses": self.cache_misses,
                "cached_failures": self.cached_failures,
                "failed_graphs": list(self.failed_graphs),
            },
            "compile_seconds": self.compile_seconds,
            "nothing_to_compile": self.nothing_to_compile,
            "script_failed": self.script_failed,
            "script_error_ignored": self.script_error_ignored,
            "cache_path": self.cache_path,
            "errors": list(self.errors),
            "error_count": self.error_count,
            "lines": self.lines,
            "skipped_lines": self.skipped_lines,
            "skipped_samples": list(self.skipped_samples),
        }


def describe_error(message: str) -> tuple[str, str]:
    """(the graph or message it is about, a short text): a compiler failure becomes `MODULE_...: [TEN404]
    ...` or `MODULE_...: neuronx-cc exited with status 70` instead of the whole compiler command line."""
    message = message.strip()
    key = GRAPH_KEY.search(message)
    if key is None:
        return message, message[:300]
    if diagnostic := DIAGNOSTIC.search(message):
        return key.group(0), f"{key.group(0)}: {diagnostic.group(0)}"[:300]
    if status := EXIT_STATUS.search(message):
        return key.group(0), f"{key.group(0)}: neuronx-cc exited with status {status.group(1)}"
    return key.group(0), message[:300]


def graph_key(text: str) -> str:
    """A graph's cache key (MODULE_...) found in a path or a command line; the text itself without one."""
    found = GRAPH_KEY.findall(text)
    return found[-1] if found else text.strip()


@dataclass
class _Totals:
    graphs: int = 0
    ok: int = 0
    failed: int = 0
    blocks: int = 0  # "Total failed compilations" lines: one per node's report


@dataclass
class PrecompileLog:
    """Fed neuron_parallel_compile's output line by line; `snapshot()` says where it stands."""

    phase: str = "starting"
    progress: Progress | None = None
    cache_path: str | None = None
    script_failed: bool = False
    script_error_ignored: bool = False
    nothing_to_compile: bool = False
    lines: int = 0
    skipped_lines: int = 0
    compiler_passes: int = 0
    error_count: int = 0
    _extracted: set[str] = field(default_factory=set)
    _hits: set[str] = field(default_factory=set)
    _cached_failed: set[str] = field(default_factory=set)
    _compiled: set[str] = field(default_factory=set)
    _errors: list[str] = field(default_factory=list)
    _error_keys: set[str] = field(default_factory=set)
    _last_exception: str | None = None
    _skipped: list[str] = field(default_factory=list)
    _totals: _Totals = field(default_factory=_Totals)
    _failed_graphs: list[str] = field(default_factory=list)
    _compile_seconds: float | None = None
    _block: list[str] | None = None  # lines of a JSON compilation report being read
    _block_old_prefix: bool = False

    def feed_lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.feed(line)

    def feed(self, line: str) -> bool:
        """Read one line (a trailing newline is fine; a `\\r` inside splits it, as a terminal would);
        True when the progress, the phase or a count changed."""
        text = ANSI.sub("", line.rstrip("\r\n")).replace("\x00", "")
        if "\r" in text:
            changed = False
            for part in text.split("\r"):
                changed = self._feed_one(part) or changed
            return changed
        return self._feed_one(text)

    def _feed_one(self, text: str) -> bool:
        if not text.strip():
            return False
        self.lines += 1
        if self._block is not None and self._read_block_line(text):
            return False
        before = self._state()
        self._read(text)
        return self._state() != before

    def _state(self) -> tuple[Any, ...]:
        return (
            self.phase,
            self.progress,
            len(self._extracted),
            len(self._hits),
            len(self._compiled),
            len(self._cached_failed),
            self.error_count,
            self._totals.blocks,
            self.script_failed,
        )

    # ---- one line ----

    def _read(self, text: str) -> None:
        unread = {marker for marker in MARKERS if marker in text}
        for marker in unread:
            # A marker can occur more than once when two processes' lines were glued together.
            if text.count(marker) > len(MARKERS[marker].findall(text)):
                self._skip(text)
                break
        for match in PROGRESS.finditer(text):
            remaining, locked, failed, done, total = (int(g) for g in match.groups())
            self._progress(Progress(remaining, locked, failed, done, total))
        if match := CACHE_PATH.search(text):
            self.cache_path = match.group(1)
        for match in EXTRACTED.finditer(text):
            self._extracted.add(graph_key(match.group(1)))
            self._enter("extracting")
        for match in CACHE_HIT.finditer(text):
            self._hits.add(graph_key(match.group(1)))
            self._enter("extracting")
        if match := CACHED_FAILURE.search(text):
            key = graph_key(match.group(1))
            if key not in self._cached_failed:
                self._cached_failed.add(key)
                self._error(
                    f"{key}: the cache holds it as a failed compilation; add --retry_failed_compilation "
                    "to NEURON_CC_FLAGS to compile it again"
                )
        if match := COMPILER_CALL.search(text):
            self._compiled.add(graph_key(match.group(1)))
            self._enter("compiling")
        if "Compiler status PASS" in text:
            self.compiler_passes += 1
        self._read_control(text)

    def _read_control(self, text: str) -> None:
        logged = LOGGER_LINE.search(text)
        message = logged.group(3) if logged else text.strip()
        if "Running trial run" in message:
            self._enter("extracting")
        elif GRAPH_LIST.search(message):
            self._enter("compiling")
        elif "No todo hlos found" in message:
            self.nothing_to_compile = True
            self._enter("done")
        elif "There was an error in the training script" in message:
            self.script_failed = True
            why = f": {self._last_exception}" if self._last_exception else " (its traceback is in the log)"
            self._error(f"the trial run of the training command failed{why}")
            return
        elif "NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE is set" in message:
            self.script_error_ignored = True
        elif not logged and (match := EXCEPTION.match(message)):
            self._last_exception = match.group(1)[:300]
        elif match := TOTAL_GRAPHS.search(message):
            self._totals.graphs += int(match.group(1))
        elif match := TOTAL_OK.search(message):
            self._totals.ok += int(match.group(1))
        elif match := TOTAL_FAILED.search(message):
            self._totals.failed += int(match.group(1))
            self._totals.blocks += 1
            self._enter("done")
        elif logged and logged.group(1) == "INFO" and JSON_BLOCK_START.search(text):
            self._block = ["{"]
            self._block_old_prefix = bool(OLD_PREFIX.match(text))
            return
        if (logged and logged.group(1) == "ERROR") or any(p.search(message) for p in FAILURE_TEXTS):
            self._error(message)

    def _progress(self, new: Progress) -> None:
        self._enter("compiling")
        old = self.progress
        # Each compile worker prints the tally it last saw, so lines from a slower worker arrive late:
        # keep the count from going backwards while the total stays the same.
        if old is None or new.total != old.total or new.finished >= old.finished:
            self.progress = new

    def _enter(self, phase: str) -> None:
        if PHASES.index(phase) > PHASES.index(self.phase):
            self.phase = phase

    def _error(self, message: str) -> None:
        self.error_count += 1
        key, text = describe_error(message)
        if key in self._error_keys or len(self._errors) >= MAX_ERRORS:
            return  # one message per graph: the compiler's diagnostic, not each layer's retelling of it
        self._error_keys.add(key)
        self._errors.append(text)

    def _skip(self, text: str) -> None:
        self.skipped_lines += 1
        if len(self._skipped) < MAX_SKIPPED_SAMPLES:
            self._skipped.append(text[:200])

    # ---- the JSON compilation report ----

    def _read_block_line(self, text: str) -> bool:
        """Add a line to the JSON report being read; False (the line is read as usual) for a log line of
        another process that landed inside the block."""
        assert self._block is not None
        line = OLD_PREFIX.sub("", text, count=1) if self._block_old_prefix else text
        # json.dumps(indent=4) lines start with an indent or a bracket; anything else (a compiler's dots,
        # another process's log line) is not part of the report.
        if LOGGER_LINE.search(text) or line[:1] not in (" ", "\t", "{", "}", "[", "]", '"'):
            return False
        self._block.append(line)
        if line.strip() == "}":
            try:
                report = json.loads("\n".join(self._block))
            except ValueError:
                report = None
            if isinstance(report, dict):
                self._block = None
                self._take_report(report)
                return True
        if len(self._block) > MAX_JSON_BLOCK_LINES:
            self._block = None
            self._skip("an unreadable compilation report")
        return True

    def _take_report(self, report: dict[str, Any]) -> None:
        entries = report.get("compilation_report")
        if not isinstance(entries, dict):
            return
        for path, entry in entries.items():
            if not isinstance(entry, dict):
                continue
            if entry.get("status") is False and path not in self._failed_graphs:
                self._failed_graphs.append(path)
            seconds = entry.get("compile_time")
            if isinstance(seconds, (int, float)):
                self._compile_seconds = (self._compile_seconds or 0.0) + float(seconds)

    # ---- the answer ----

    def snapshot(self) -> PrecompileSummary:
        totals = self._totals
        seen = totals.blocks > 0
        progress = self.progress
        if seen:
            compiled, failed, graphs = totals.ok, totals.failed, totals.graphs
        elif progress is not None:  # the tool stopped before its summary: the cache's own tally
            compiled, failed, graphs = progress.done, progress.failed, progress.total
        else:
            compiled = failed = graphs = 0
        return PrecompileSummary(
            phase=self.phase,
            progress=progress,
            extracted=len(self._extracted),
            cache_hits=len(self._hits - self._extracted - self._compiled),
            cache_misses=len(self._extracted | self._compiled),
            cached_failures=len(self._cached_failed),
            compiler_calls=len(self._compiled),
            compiler_passes=self.compiler_passes,
            summary_seen=seen,
            graphs_total=graphs,
            compiled=compiled,
            failed=failed,
            failed_graphs=tuple(self._failed_graphs),
            compile_seconds=self._compile_seconds,
            nothing_to_compile=self.nothing_to_compile,
            script_failed=self.script_failed,
            script_error_ignored=self.script_error_ignored,
            cache_path=self.cache_path,
            errors=tuple(self._errors),
            error_count=self.error_count,
            lines=self.lines,
            skipped_lines=self.skipped_lines,
            skipped_samples=tuple(self._skipped),
        )


def parse_text(text: str) -> PrecompileSummary:
    """A whole recorded output at once."""
    log = PrecompileLog()
    log.feed_lines(re.split(r"\r\n|\n", text))
    return log.snapshot()
