"""Console themes as validated data: ``themes/*.yaml`` shipped with tkbox plus the user's, turned into Textual themes.

A theme file has exactly these keys (a closed schema; colours are checked with ``Color.parse``)::

    name: tkbox-dark            # a-z, 0-9 and '-'
    dark: true
    colors: {primary: "#...", background: "#...", ...}    # Textual's base colours (primary required)
    tokens: {box-running: "#...", verdict-deny: "#...", ...}  # tkbox's own tokens, all optional

Tokens a theme leaves out fall back to ``TOKEN_DEFAULTS`` (also what ``get_theme_variable_defaults`` returns).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from textual.color import Color, ColorParseError
from textual.theme import Theme


def _shipped_themes_dir() -> Path:
    """``themes/`` of the checkout tkbox runs from, or the copy a built wheel carries (see setup.py)."""
    checkout = Path(__file__).resolve().parents[2] / "themes"
    return checkout if checkout.is_dir() else Path(__file__).resolve().parent / "shipped_themes"


SHIPPED_THEMES_DIR = _shipped_themes_dir()
DEFAULT_THEME = "tkbox-dark"
BASE_COLOURS = ("primary", "secondary", "accent", "foreground", "background", "surface", "panel", "boost",
                "warning", "error", "success")
TOKEN_DEFAULTS = {
    "box-creating": "#8a8f98",
    "box-running": "#4ec27a",
    "box-held": "#e0a030",
    "box-stopping": "#e0a030",
    "box-stopped": "#8a8f98",
    "box-failed": "#e5534b",
    "box-removed": "#6a6f78",
    "verdict-allow": "#4ec27a",
    "verdict-ask": "#e0a030",
    "verdict-deny": "#e5534b",
    "event-alert": "#e5534b",
    "status-disconnected": "#e5534b",
    "log-match": "#e0a030",
}
THEME_KEYS = {"name", "dark", "colors", "tokens"}
THEME_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}\Z")


class ThemeError(ValueError):
    """A theme file is wrong; the message names the field and what to write."""


@dataclass(frozen=True)
class ThemeFailure:
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path.name}: {self.reason}"


def _colour(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ThemeError(f"{where}: a colour is a string such as '#1e1e2e'")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ThemeError(f"{where}: {value!r} is not a colour") from None
    return value


def theme_from_data(data: Any) -> Theme:
    """Validate one parsed theme file and build the Textual ``Theme``."""
    if not isinstance(data, dict):
        raise ThemeError("a theme is a mapping with name, dark, colors and tokens")
    unknown = set(data) - THEME_KEYS
    if unknown:
        raise ThemeError(f"unknown key {sorted(unknown)[0]!r}; a theme has {', '.join(sorted(THEME_KEYS))}")
    name = data.get("name")
    if not isinstance(name, str) or not THEME_NAME.match(name):
        raise ThemeError("name: 1-41 of a-z, 0-9 and '-'")
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ThemeError("dark: true or false")
    colours = data.get("colors")
    if not isinstance(colours, dict) or "primary" not in colours:
        raise ThemeError("colors: a mapping that sets at least primary")
    bad = set(colours) - set(BASE_COLOURS)
    if bad:
        raise ThemeError(f"colors.{sorted(bad)[0]}: unknown; the colours are {', '.join(BASE_COLOURS)}")
    tokens = data.get("tokens") or {}
    if not isinstance(tokens, dict):
        raise ThemeError("tokens: a mapping of tkbox token to colour")
    bad = set(tokens) - set(TOKEN_DEFAULTS)
    if bad:
        raise ThemeError(f"tokens.{sorted(bad)[0]}: unknown; the tokens are {', '.join(sorted(TOKEN_DEFAULTS))}")
    checked = {key: _colour(f"colors.{key}", value) for key, value in colours.items()}
    variables = {key: _colour(f"tokens.{key}", value) for key, value in tokens.items()}
    return Theme(name=name, dark=dark, variables={**TOKEN_DEFAULTS, **variables}, **checked)


def load_theme_file(path: Path) -> Theme:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ThemeError(f"not readable ({exc})") from None
    except yaml.YAMLError as exc:
        raise ThemeError(f"not valid YAML ({str(exc).splitlines()[0]})") from None
    return theme_from_data(data)


def load_themes(directory: Path) -> tuple[list[Theme], list[ThemeFailure]]:
    """Every ``*.yaml`` theme in ``directory`` (sorted by file name) and the files that failed."""
    loaded: list[Theme] = []
    failed: list[ThemeFailure] = []
    if not directory.is_dir():
        return loaded, failed
    for path in sorted(directory.glob("*.yaml")):
        try:
            loaded.append(load_theme_file(path))
        except ThemeError as exc:
            failed.append(ThemeFailure(path, str(exc)))
    return loaded, failed


def broken_themes_message(failures: list[ThemeFailure]) -> str:
    """One notification for all broken theme files."""
    listed = "\n".join(f"• {failure}" for failure in failures)
    return f"{len(failures)} theme file(s) could not be loaded; using the others:\n{listed}"
