"""Where the console keeps its state: the home directory (runs.db, runs/) and the config file."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from .errors import UsageError


def home() -> Path:
    """$TRNCONSOLE_HOME, default ~/.local/share/trnconsole."""
    configured = os.environ.get("TRNCONSOLE_HOME")
    if configured:
        return Path(configured).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "trnconsole"


def writable_home() -> Path:
    """The home directory, created if needed; UsageError when it cannot be written."""
    root = home()
    try:
        (root / "runs").mkdir(parents=True, exist_ok=True)
        # A nameless file of this process's own: several consoles, launches and sweeps probe at once.
        tempfile.TemporaryFile(dir=root).close()
    except OSError as exc:
        raise UsageError(
            f"TRNCONSOLE_HOME {root}: not writable ({exc.strerror}); "
            "point TRNCONSOLE_HOME at a writable directory"
        ) from None
    return root


def run_dir(run_id: str) -> Path:
    return home() / "runs" / run_id


def tensorboard_dir(run_dir: Path) -> Path:
    """Where a run's TensorBoard event files are: `tb/` for the bundled runners, else anywhere beneath the
    run directory (a user's script)."""
    tb = run_dir / "tb"
    return tb if tb.is_dir() else run_dir


def config_path() -> Path:
    configured = os.environ.get("TRNCONSOLE_CONFIG")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trnconsole" / "config.toml"


def load_config() -> dict[str, Any]:
    """The user's config.toml ({} when there is none); UsageError naming the file on a syntax error."""
    path = config_path()
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"config file {path}: {exc}; fix the TOML syntax or remove the file") from None
