"""What the console remembers between runs (today: the theme the operator chose), in ``console.json``.

The console writes the file itself, all or nothing (a temporary file in the same directory, fsync, rename, fsync
of the directory), so a crash or a full disk never leaves half a file.  It reads it strictly and boundedly: a
JSON object of at most ``MAX_SAVED_SETTINGS`` bytes whose ``theme`` is a theme name; keys it does not know are
kept on the next write (a newer console may have added them).  A file that is not so is reported once and the
defaults used; it is replaced the next time the operator chooses a theme.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tkbox_daemon.fsutil import write_atomically

from .themes import THEME_NAME

SAVED_SETTINGS_NAME = "console.json"
MAX_SAVED_SETTINGS = 64 * 1024
"""The largest ``console.json`` read, in bytes (it holds a theme name; anything bigger is not the console's)."""


class SavedSettingsError(ValueError):
    """``console.json`` cannot be used; the message says what is wrong (the defaults are used instead)."""


@dataclass(frozen=True)
class SavedSettings:
    """The settings the console keeps between runs."""

    theme: str | None = None
    """The theme the operator last chose (None: never chose one)."""
    other: dict[str, Any] = field(default_factory=dict)
    """Keys this console does not know, written back as they were."""

    def to_json(self) -> dict[str, Any]:
        return {**self.other, **({"theme": self.theme} if self.theme is not None else {})}


def parse_saved_settings(raw: bytes) -> SavedSettings:
    """``console.json``'s bytes as ``SavedSettings``, or ``SavedSettingsError`` saying what is wrong."""
    if len(raw) > MAX_SAVED_SETTINGS:
        raise SavedSettingsError(f"larger than {MAX_SAVED_SETTINGS} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise SavedSettingsError(f"not JSON ({exc})") from None
    except RecursionError:
        raise SavedSettingsError("not JSON the console wrote (nested too deeply)") from None
    if not isinstance(data, dict):
        raise SavedSettingsError("not a JSON object")
    theme = data.get("theme")
    if theme is not None and not (isinstance(theme, str) and THEME_NAME.match(theme)):
        raise SavedSettingsError("theme is not a theme name (1-41 of a-z, 0-9 and '-')")
    return SavedSettings(theme, {key: value for key, value in data.items() if key != "theme"})


def read_saved_settings(path: Path) -> SavedSettings:
    """The settings saved at ``path``; empty ones when there is no file.  Raises ``SavedSettingsError``."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_SAVED_SETTINGS + 1)
    except FileNotFoundError:
        return SavedSettings()
    except OSError as exc:
        raise SavedSettingsError(f"not readable ({exc.strerror or exc})") from None
    return parse_saved_settings(raw)


def write_saved_settings(path: Path, saved: SavedSettings) -> None:
    """Write ``saved`` to ``path`` all or nothing, creating its directory; raises ``OSError`` on failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, (json.dumps(saved.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8"))
