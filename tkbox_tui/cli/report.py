"""How every ``tkbox`` command reports a failure: one ``CliError``, shown one way.

Without ``--json`` an error is one line on stderr, ``tkbox COMMAND: MESSAGE; HINT``, escaped (messages may quote box
or guest text).  With ``--json`` it is one line on stdout, ``{"error": {"code", "message", "hint"}}`` (``hint`` is
null when there is none; ``field`` is added when a setting is named), and nothing on stderr.  The exit status is
the same either way.  The codes are listed in docs/cli.md.

The messages that several commands share are written once: a box that does not exist (``box_not_found``), a
wrong command line (``CliParser``), Ctrl+C (``interrupted``) here, and no daemon in ``daemon_refusals``.  Standard
library only, so ``tkbox --help`` stays quick.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import IO, Any, NoReturn

from ..terminal_text import safe_text

EXIT_FAILED = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command Ctrl+C stopped
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `yes | head -1`


class CliError(Exception):
    """A command could not do what was asked: a code for programs, a message and a hint for people."""

    def __init__(self, code: str, message: str, hint: str | None = None, *, status: int = EXIT_FAILED,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.status = status
        self.field = field

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "hint": self.hint}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}


def wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON: ``--json`` among the words before a ``--`` (after it, the words
    belong to the command ``tkbox exec`` runs)."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in words


def report(error: CliError, command: str, as_json: bool) -> int:
    """Show ``error`` as ``tkbox COMMAND`` reports failures; returns its exit status."""
    if as_json:
        print(json.dumps(error.to_json(), sort_keys=True), flush=True)  # ensure_ascii: no control reaches a terminal
    else:
        who = f"tkbox {command}" if command else "tkbox"
        hint = f"; {error.hint}" if error.hint else ""
        print(f"{who}: {safe_text(error.message)}{safe_text(hint)}", file=sys.stderr, flush=True)
    return error.status


def print_unswallowed(message: str, file: IO[str] | None = None) -> None:
    """argparse's ``_print_message`` (help, usage) without its ``except OSError: pass``: a reader that has gone
    ends the command as it does for any other output (quietly, status 141) instead of being ignored."""
    if message:
        (file or sys.stderr).write(message)


def terminal_columns() -> int:
    """The terminal's width: ``$COLUMNS``, else stdout's terminal, else 80 (``shutil.get_terminal_size``'s rule)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def box_not_found(ref: str) -> CliError:
    """The one way every command says a box does not exist."""
    return CliError("not_found", f"box '{ref}' not found", "list the boxes with: tkbox ls")


def interrupted(hint: str | None = None) -> CliError:
    """Ctrl+C, for every command; ``hint`` says how to pick up where it stopped, when there is a way."""
    return CliError("interrupted", "stopped by Ctrl+C", hint, status=EXIT_INTERRUPTED)


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose mistakes are CliErrors (so ``--json`` gets them as JSON), with no abbreviated
    options (``--js`` is not ``--json``: a script's meaning must not change when an option is added)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise CliError("usage", message, f"see: {self.prog} --help")

    def _print_message(self, message: str, file: IO[str] | None = None) -> None:
        print_unswallowed(message, file)

    def _get_formatter(self) -> argparse.HelpFormatter:
        """argparse's formatter, given the terminal's width as ``shutil.get_terminal_size`` measures it: argparse
        asks shutil itself, and shutil's import (bz2, lzma, …) is a good part of a daemon command's start."""
        return self.formatter_class(prog=self.prog, width=terminal_columns() - 2)

    def add_json(self, text: str = "print JSON (an error is {\"error\": {...}} on stdout)") -> None:
        self.add_argument("--json", action="store_true", help=text)
