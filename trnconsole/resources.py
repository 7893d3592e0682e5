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


def runner_flags(name: str, python: str) -> list[dict]:
    """A bundled runner's flag table (`--flags-json`), cached per runner source and interpreter."""
    import hashlib
    import json
    import subprocess

    from .core.errors import UsageError
    from .core.paths import home

    script = runner_script(name)
    digest = hashlib.sha256(python.encode())
    for path in (script, runners_dir() / "trn_harness" / "config.py"):
        digest.update(path.read_bytes())
    cache = home() / "cache" / f"flags-{name}-{digest.hexdigest()[:16]}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    proc = subprocess.run([python, str(script), "--flags-json"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(
            f"runner python {python}: cannot read the {name} runner's flags ({last}); "
            "point runner_python at an environment with numpy, torch and transformers"
        )
    flags = json.loads(proc.stdout)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(flags))
    except OSError:
        pass  # an unwritable cache only costs the next launch a subprocess
    return flags
