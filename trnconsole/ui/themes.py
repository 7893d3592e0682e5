"""Colour themes from TOML files: the bundled `themes/` directory and the user's own config directory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..core.errors import UsageError

DEFAULT_THEME = "trn-dark"
# Theme variables our widgets use; every theme (a built-in Textual one too) gets these defaults.
VARIABLE_DEFAULTS = {
    "chart-line": "#ffaf00",
    "chart-line-2": "#5fd7ff",
    "status-running": "#5fafff",
    "status-completed": "#5fd75f",
    "status-failed": "#ff5f5f",
    "status-stopped": "#ffd75f",
}
THEME_KEYS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)


def bundled_themes_dir() -> Path:
    from importlib import resources

    try:
        return Path(str(resources.files("trnconsole.themes")))
    except ModuleNotFoundError:  # running from a source tree without an install
        return Path(__file__).resolve().parents[2] / "themes"


def user_themes_dir() -> Path:
    from ..core.paths import config_path

    return config_path().parent / "themes"


def load_theme_file(path: Path) -> Any:
    """A textual Theme from a TOML file; UsageError naming the file and the field on a mistake."""
    from textual.theme import Theme

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"theme file {path}: {exc}; fix or remove it") from None
    if not isinstance(data.get("name"), str) or not isinstance(data.get("primary"), str):
        raise UsageError(f"theme file {path}: needs at least name and primary (colour strings)")
    variables = data.get("variables") or {}
    if not isinstance(variables, dict):
        raise UsageError(f"theme file {path}: [variables] must be a table of name = colour")
    colours = {key: data[key] for key in THEME_KEYS if key in data}
    from textual.color import Color, ColorParseError

    for key, value in [*colours.items(), *variables.items()]:
        try:
            Color.parse(str(value))
        except ColorParseError:
            raise UsageError(f"theme file {path}: {key} = {value!r} is not a colour; use #rrggbb") from None
    return Theme(
        name=data["name"],
        dark=bool(data.get("dark", True)),
        variables={**VARIABLE_DEFAULTS, **{k: str(v) for k, v in variables.items()}},
        **colours,
    )


def discover_themes() -> list[Any]:
    """Bundled themes, then the user's (which may replace a bundled one of the same name)."""
    themes: dict[str, Any] = {}
    for folder in (bundled_themes_dir(), user_themes_dir()):
        if folder.is_dir():
            for path in sorted(folder.glob("*.toml")):
                theme = load_theme_file(path)
                themes[theme.name] = theme
    return list(themes.values())
