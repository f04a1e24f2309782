"""The ``:`` command language: aliases and arguments, parsed into (verb, argument) without touching the UI."""

from __future__ import annotations

ALIASES = {
    "q": "quit", "quit": "quit", "exit": "quit",
    "boxes": "boxes", "b": "boxes",
    "events": "events", "ev": "events", "e": "events",
    "box": "box",
    "theme": "theme",
    "new": "new",
    "filter": "filter",
    "help": "help", "h": "help",
}
NEEDS_ARGUMENT = {"box", "theme"}


class CommandError(ValueError):
    """The command is unknown or lacks its argument; the message says what works."""


def parse_command(text: str) -> tuple[str, str]:
    """``"box web-1"`` → ``("box", "web-1")``; a leading ``:`` is allowed."""
    words = text.strip().lstrip(":").split(maxsplit=1)
    if not words:
        raise CommandError("type a command: boxes, events, box NAME, theme NAME, new, filter TEXT, q")
    verb = ALIASES.get(words[0].lower())
    if verb is None:
        raise CommandError(f"unknown command {words[0]!r}; try boxes, events, box NAME, theme NAME, new, q")
    argument = words[1].strip() if len(words) > 1 else ""
    if verb in NEEDS_ARGUMENT and not argument:
        raise CommandError(f":{verb} needs a name, e.g. :{verb} NAME")
    return verb, argument
