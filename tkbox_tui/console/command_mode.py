"""The ``:`` command language, as one table (``COMMANDS``): parsing, Tab completion, and the list that ``?``,
the ``:`` line's hint and docs/keys.md show — all without touching the UI.

Every action of the console has a command: ``:new``, ``:exec CMD``, ``:shell``, ``:stop``, ``:rm``,
``:approvals``, ``:theme NAME``, ``:filter RE``, ``:box NAME``, ``:q`` and the rest below.  ``:stop``, ``:rm``, ``:shell``
act on the selected box, or on ``NAME`` when one is given; ``:exec CMD`` runs in the selected box as the exec
panel runs it (argv, no shell; ``!CMD`` through ``sh -c``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class CommandSpec:
    """One ``:`` command: its name, other spellings, argument (``""``: none), what it does, and what Tab
    completes its argument from (``box`` names, ``theme`` names, ``bundle`` paths, or nothing)."""

    name: str
    does: str
    argument: str = ""
    required: bool = False
    aliases: tuple[str, ...] = ()
    completes: str = ""

    @property
    def usage(self) -> str:
        """``:theme NAME``, ``:stop [NAME]``."""
        if not self.argument:
            return f":{self.name}"
        return f":{self.name} {self.argument}" if self.required else f":{self.name} [{self.argument}]"


COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec("new", "New box: the form"),
    CommandSpec("exec", "Run CMD in the selected box (argv, no shell; !CMD runs it through sh -c)", "CMD", True),
    CommandSpec("shell", "Shell in the box", "NAME", completes="box", aliases=("sh",)),
    CommandSpec("stop", "Stop the box (asks first)", "NAME", completes="box"),
    CommandSpec("rm", "Remove the box (asks first)", "NAME", completes="box", aliases=("remove",)),
    CommandSpec("open", "The box's page: its execs and their output", "NAME", completes="box"),
    CommandSpec("review", "The stopped box's patch, file by file: include, exclude, apply", "NAME", completes="box",
                aliases=("patch",)),
    CommandSpec("export", "Export the box's run and verify it (the form first)", "NAME", completes="box"),
    CommandSpec("verify", "Verify a bundle offline (trust: the .trust.json beside it unless given)",
                "PATH [--trust PATH]", True, completes="bundle"),
    CommandSpec("approvals", "The approvals inbox: every pending approval, across all boxes", aliases=("inbox",)),
    CommandSpec("network", "The network view: the hosts every box (or NAME) contacted; allow or block one", "NAME",
                completes="box", aliases=("net",)),
    CommandSpec("daemon", "The daemon's page: its health and what its host gives a box (tkbox doctor)",
                aliases=("doctor",)),
    CommandSpec("theme", "Switch theme", "NAME", True, completes="theme"),
    CommandSpec("filter", "Filter the events (empty clears)", "RE"),
    CommandSpec("box", "Select a box", "NAME", True, completes="box"),
    CommandSpec("boxes", "Focus the boxes", aliases=("b",)),
    CommandSpec("events", "Focus the events", aliases=("ev", "e")),
    CommandSpec("help", "Keys and commands", aliases=("h",)),
    CommandSpec("quit", "Quit (boxes keep running)", aliases=("q", "exit")),
)
BY_WORD = {word: spec for spec in COMMANDS for word in (spec.name, *spec.aliases)}
PLACEHOLDER = ("new | exec CMD | shell | stop | rm | open | review | export | verify PATH | approvals | network "
               "| daemon | theme NAME | filter RE | box NAME | q   (Tab completes)")


class CommandError(ValueError):
    """The command is unknown or lacks its argument; the message says what works."""


def parse_command(text: str) -> tuple[str, str]:
    """``"box web-1"`` → ``("box", "web-1")``; a leading ``:`` is allowed; aliases give the command's name."""
    words = text.strip().lstrip(":").split(maxsplit=1)
    if not words:
        raise CommandError(f"type a command: {PLACEHOLDER}")
    spec = BY_WORD.get(words[0].lower())
    if spec is None:
        raise CommandError(f"unknown command {words[0]!r}; the commands: {', '.join(s.usage for s in COMMANDS)}")
    argument = words[1].strip() if len(words) > 1 else ""
    if spec.required and not argument:
        what = "a name" if spec.argument == "NAME" else f"an argument ({spec.argument})"
        raise CommandError(f":{spec.name} needs {what}, e.g. {spec.usage}")
    return spec.name, argument


def completions(text: str, names: dict[str, Iterable[str]]) -> list[str]:
    """What Tab can make of the ``:`` line ``text``: whole lines, sorted.  A command name (then a space when it
    takes an argument) while the first word is typed; then, for a command that completes one, the ``names`` of
    its kind (``names["box"]``, ``names["theme"]``) that start with what is typed."""
    stripped = text.lstrip().lstrip(":")
    if " " not in stripped:
        word = stripped.lower()
        matches = [spec for spec in COMMANDS if spec.name.startswith(word)]
        if not matches:  # only an alias starts so (``qu``): offer the command it spells
            matches = list(dict.fromkeys(BY_WORD[alias] for alias in BY_WORD if alias.startswith(word)))
        return sorted(spec.name + (" " if spec.argument else "") for spec in matches)
    verb, _, argument = stripped.partition(" ")
    spec = BY_WORD.get(verb.lower())
    if spec is None or not spec.completes:
        return []
    typed = argument.lstrip()
    return sorted(f"{spec.name} {name}" for name in set(names.get(spec.completes, ())) if name.startswith(typed))


def next_completion(value: str, candidates: list[str]) -> str:
    """What one Tab press makes of ``value``: the only candidate; else their common prefix when it is longer
    than ``value``; else the candidate after ``value`` among them (so Tab again cycles), or the first."""
    if not candidates:
        return value
    if len(candidates) == 1:
        return candidates[0]
    common = os.path.commonprefix(candidates)
    current = value.lstrip().lstrip(":")
    if len(common) > len(current):
        return common
    if current in candidates:
        return candidates[(candidates.index(current) + 1) % len(candidates)]
    return candidates[0]


def help_rows() -> list[tuple[str, str]]:
    """(usage, what it does) for every command, with its other spellings: what ``?`` lists."""
    rows = []
    for spec in COMMANDS:
        also = f" (also :{', :'.join(spec.aliases)})" if spec.aliases else ""
        rows.append((spec.usage, spec.does + also))
    return rows


def commands_markdown() -> str:
    """The commands section of docs/keys.md."""
    lines = ["## Commands (`:` on the main screen)", "",
             "Tab completes a command's name, then a box or theme name (after `:verify`, a bundle in the "
             "console's working directory).  `:stop`, `:rm`, `:shell`, `:open`, `:review` and `:export` act on the "
             "selected box, or on NAME when given.", "", "| Command | Does |", "|---|---|"]
    lines += [f"| `{usage}` | {does} |" for usage, does in help_rows()]
    return "\n".join(lines) + "\n"
