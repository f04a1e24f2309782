"""One way to write a key for a person, used by ``?`` and meant for docs/keys.md: ``Ctrl+P``, ``Shift+Tab``,
``PgUp``, ``Esc``, ``?``, ``n``, ``N``, ``F1``.

Textual names keys ``ctrl+p``, ``pageup``, ``question_mark``, ``super+c``; a person reads modifiers capitalised
and joined with ``+`` (the key after a modifier in capitals: ``Ctrl+C``), named keys as keyboards label them
(``PgUp``, ``Esc``, ``Enter``, ``Up``), and a printable key as its character (``?``, ``/``, ``:``).
"""

from __future__ import annotations

import string

from textual.keys import _character_to_key

MODIFIERS = {"ctrl": "Ctrl", "shift": "Shift", "alt": "Alt", "meta": "Meta", "super": "Super", "hyper": "Hyper"}
NAMED_KEYS = {
    "escape": "Esc", "enter": "Enter", "tab": "Tab", "space": "Space", "backspace": "Backspace",
    "delete": "Del", "insert": "Ins", "home": "Home", "end": "End", "pageup": "PgUp", "pagedown": "PgDn",
    "up": "Up", "down": "Down", "left": "Left", "right": "Right",
}
_PRINTABLE = {_character_to_key(character): character for character in string.punctuation}


def key_label(key: str) -> str:
    """One Textual key name (``ctrl+pageup``) as a person writes it (``Ctrl+PgUp``)."""
    *modifiers, name = key.strip().split("+") if key.strip() != "+" else ["+"]
    if not name and modifiers:  # "ctrl++": the key is "+"
        modifiers, name = modifiers[:-1], "+"
    if name in NAMED_KEYS:
        label = NAMED_KEYS[name]
    elif name in _PRINTABLE:
        label = _PRINTABLE[name]
    elif len(name) > 1 and name[0] == "f" and name[1:].isdigit():
        label = name.upper()
    elif len(name) == 1:
        label = name.upper() if modifiers else name  # Ctrl+C; alone, n and N are different keys
    else:
        label = name.replace("_", " ").capitalize()
    return "+".join([*(MODIFIERS.get(modifier, modifier.capitalize()) for modifier in modifiers), label])


def keys_label(keys: str | list[str]) -> str:
    """Several keys (``"f,G"`` or a list) as ``f, G``."""
    names = keys.split(",") if isinstance(keys, str) else keys
    return ", ".join(key_label(key) for key in names if key.strip())
