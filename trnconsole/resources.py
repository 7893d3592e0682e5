"""Where the bundled runners live: inside the installed package (trnconsole/runners) or the source tree."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

BUNDLED_RUNNERS = ("bert", "gpt2", "vit")


def runners_dir() -> Path:
    return Path(str(resources.files("trnconsole.runners")))


def runner_script(name: str) -> Path:
    """The script of a bundled runner (`bert`, `gpt2`, `vit`)."""
    if name not in BUNDLED_RUNNERS:
        raise KeyError(name)
    return runners_dir() / f"{name}.py"
