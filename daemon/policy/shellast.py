"""The shell syntax tree the parser builds and the normaliser renders (see shellparse.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Lit:
    """Literal text; ``quoted`` if it came from quotes or a backslash (no splitting, no globbing)."""

    text: str
    quoted: bool


@dataclass(slots=True)
class Param:
    """A parameter expansion: $name or ${name<op>} (op is what follows the name, e.g. "%?" or ":-x")."""

    name: str
    op: str
    quoted: bool


@dataclass(slots=True)
class Subst:
    """Command substitution (kind "$(", also for backticks) or process substitution ("<(" / ">(")."""

    body: Script
    kind: str
    quoted: bool


@dataclass(slots=True)
class Arith:
    """$((...)), kept as text."""

    text: str
    quoted: bool


Part = Lit | Param | Subst | Arith


@dataclass(slots=True)
class Word:
    parts: list[Part]


@dataclass(slots=True)
class Redirect:
    op: str                  # > >> >| < <> <& >& &> &>> << <<- <<<
    fd: str                  # "" or the digits before the operator
    target: Word | None      # None for a here-document
    heredoc: str | None = None
    heredoc_quoted: bool = False


@dataclass(slots=True)
class Command:
    """A simple command (words and redirections) or a subshell ( ... )."""

    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    subshell: Script | None = None


@dataclass(slots=True)
class Pipeline:
    commands: list[Command]


@dataclass(slots=True)
class Script:
    # (pipeline, the operator after it: ";" "&" "&&" "||" "\n" or "")
    items: list[tuple[Pipeline, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    truncated: bool = False
