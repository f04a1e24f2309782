"""The commands whose code lives in ``tkbox_daemon`` (``signer``, ``verify``, ``policy check``, ``daemon``), run
under the CLI's rules for failures: one line on stderr, or with ``--json`` an error object on stdout.

Those commands print a refusal on stderr themselves (``tkbox signer: …``, after a usage line for argparse's
errors) and return 2.  The short-lived ones run here with stdout and stderr captured: a refusal they wrote is raised
as a ``CliError`` (so it is shown as every other command's is); what they printed is then written out by the CLI
(so a reader that has gone is seen, which argparse's help and verify's report would otherwise swallow).  The
foreground servers (``daemon``, ``signer serve``) log to stderr for as long as they run, so they are never captured:
their command line is checked first with their own parser, its mistakes raised as CliErrors.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from collections.abc import Callable
from typing import NoReturn

from .report import CliError, print_unswallowed

# "tkbox signer: …", "tkbox signer export: …", "tkbox policy check: error: …", argparse's "PROG: error: …"
REFUSAL_PREFIX = re.compile(r"^tkbox(?: [a-z-]+)*: (?:error: )?")
POLICY_DESCRIPTION = ("Policy packs from the command line. The one command is check: evaluate tool calls against a "
                      "pack and print the verdicts, recording nothing (tkbox policy check --help).")


def run_captured(command: str, run: Callable[[list[str]], int], argv: list[str]) -> int:
    """Run ``run(argv)`` with its output captured; a refusal it printed is raised as a CliError instead."""
    captured, printed = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(printed):
            status = run(argv)
    except SystemExit as exit:  # argparse: --help (0) or a usage error (2)
        status = exit.code if isinstance(exit.code, int) else 2
    sys.stdout.write(printed.getvalue())
    text = captured.getvalue()
    if status == 0 or not text.strip():  # done, or its own output (such as verify's report) says why not
        sys.stderr.write(text)
        return status
    lines = [line for line in text.splitlines() if line.strip()]
    starts = [index for index, line in enumerate(lines) if REFUSAL_PREFIX.match(line)]
    first = starts[-1] if starts else len(lines) - 1
    before, usage = _without_usage(lines[:first])
    if before:
        print("\n".join(before), file=sys.stderr)
    hint = " ".join(line.strip() for line in lines[first + 1:]) or (f"see: tkbox {command} --help" if usage else None)
    raise CliError("usage" if usage else "failed", REFUSAL_PREFIX.sub("", lines[first], count=1), hint,
                   status=status)


def _without_usage(lines: list[str]) -> tuple[list[str], bool]:
    """The lines without argparse's usage block (``usage: …`` and its indented continuation), and whether one was
    there: the refusal's hint points at ``--help`` instead."""
    kept: list[str] = []
    in_usage = found = False
    for line in lines:
        in_usage = line.startswith("usage:") or (in_usage and line[:1].isspace())
        found = found or in_usage
        if not in_usage:
            kept.append(line)
    return kept, found


def check_usage(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with every mistake, in any subcommand, raised as a CliError (``--help`` prints
    the help and exits 0, as always)."""
    _prepare(parser)
    return parser.parse_args(argv)


def _prepare(parser: argparse.ArgumentParser) -> None:
    """Mistakes become CliErrors; a subcommand with no description of its own gets the line its group lists it
    with, so ``tkbox signer up --help`` says what the command does."""

    def refuse(message: str) -> NoReturn:
        raise CliError("usage", message, f"see: {parser.prog} --help")

    parser.error = refuse  # type: ignore[method-assign]
    parser._print_message = print_unswallowed  # type: ignore[method-assign]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not sub.description and listed.get(name):
                    sub.description = f"{listed[name][:1].upper()}{listed[name][1:]}."
                _prepare(sub)


def signer(argv: list[str]) -> int:
    from tkbox_daemon.signer.cli import build_parser, signer_main

    if check_usage(build_parser(), argv).command == "serve":
        return signer_main(argv)  # the signer in the foreground: its log is its stderr
    return run_captured("signer", signer_main, argv)


def signer_subcommands() -> list[str]:
    """The ``tkbox signer`` subcommands, read from its parser."""
    from tkbox_daemon.signer.cli import build_parser

    actions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return [name for action in actions for name in action.choices]


def verify(argv: list[str]) -> int:
    from tkbox_daemon.evidence.verify import verify_main

    return run_captured("verify", verify_main, argv)


def policy(argv: list[str]) -> int:
    if not argv:
        raise CliError("usage", "name a policy command (the one there is: check)", "see: tkbox policy --help")
    if argv[0] in ("-h", "--help"):
        print(f"usage: tkbox policy check [--tool TOOL --args ARGS | --file CALLS.json] [--pack PACK] [--json]\n\n"
              f"{POLICY_DESCRIPTION}")
        return 0
    if argv[0] != "check":
        raise CliError("usage", f"unknown policy command '{argv[0]}'; the only one is: check",
                       "see: tkbox policy --help")
    from tkbox_daemon.policy import check_main

    return run_captured("policy check", check_main, argv[1:])


def daemon(argv: list[str]) -> int:
    from tkbox_daemon.daemon_process import build_parser, daemon_main

    check_usage(build_parser(), argv)
    return daemon_main(argv)  # the daemon in the foreground: its log is its stderr
