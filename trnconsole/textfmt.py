"""Plain-text formatting of figures and tables for the CLI (no colour, no terminal codes)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any


def number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) < 10 ** -(digits - 1) or abs(value) >= 1e7):
            return f"{value:.{digits - 1}e}"
        if abs(value) >= 1000:
            return f"{value:,.1f}"
        return f"{value:.{digits}g}" if abs(value) < 1 else f"{value:.{max(1, digits - 2)}f}"
    return str(value)


def money(dollars: float | None, digits: int = 2) -> str:
    """Dollars with a fixed number of decimals ("41.43"); "-" when not known."""
    return "-" if dollars is None else f"{dollars:,.{digits}f}"


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def ago(timestamp: float | None, now: float | None = None) -> str:
    if timestamp is None:
        return "-"
    delta = (now or time.time()) - timestamp
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if delta >= size:
            return f"{int(delta // size)}{unit} ago"
    return f"{int(delta)}s ago"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def json_text(value: Any) -> str:
    """JSON for scripts: non-finite floats become "nan"/"inf"/"-inf" strings (as the runners write them),
    since NaN is not JSON and breaks tools such as jq."""
    import json

    return json.dumps(_json_safe(value), indent=1, default=str)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def remote_phase(backend: str, detail: dict[str, Any] | None) -> str | None:
    """One line of where a remote job stands (`sagemaker: Training`), from its backend's detail."""
    if not detail:
        return None
    phase = detail.get("phase") or detail.get("secondary_status") or detail.get("status")
    problem = detail.get("problem")
    text = f"{backend}: {phase}" if phase else None
    if problem:
        text = f"{text} - {problem}" if text else f"{backend}: {problem}"
    return text


def detail_rows(detail: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A remote job's facts as (name, text) rows: plain values as they are, lists and tables counted."""
    rows = []
    for key, value in (detail or {}).items():
        if value is None or value == "" or value == [] or value == {}:
            continue
        if isinstance(value, list):
            more = "..., " if len(value) > 3 else ""
            text = f"{len(value)} ({more}{', '.join(_short(v) for v in value[-3:])})"
        elif isinstance(value, dict):
            text = ", ".join(f"{k} {_short(v)}" for k, v in list(value.items())[:6])
        elif _is_time(key, value):
            text = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
        else:
            text = _short(value)
        rows.append((key.replace("_", " "), text))
    return rows


def _is_time(key: str, value: Any) -> bool:
    """An epoch-seconds field (`training_start`, `submitted_at`, ...) rather than a count."""
    named = key.endswith(("_start", "_end", "_at", "_time")) or key in ("start", "end")
    return named and isinstance(value, (int, float)) and 1e9 < value < 1e10


def _short(value: Any) -> str:
    if isinstance(value, dict):
        for key in ("status", "phase", "name", "job_id"):
            if value.get(key):
                return str(value[key])
        return json.dumps(value, default=str)[:60]
    if isinstance(value, float):
        return number(value)
    return str(value)
