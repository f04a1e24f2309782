"""``tkbox exec BOX -- PROGRAM [ARGS…]``: one command in a box, decided by the signer first.

On a terminal (the default) the command's stdout and stderr are written as they come, as ``docker exec`` does, and
the CLI's own words (flagged, denied, errors) go to stderr, escaped.  ``--tty`` runs the command on a terminal in
the box, with the operator's terminal raw while it runs.

``--json`` is for a program that calls ``tkbox exec`` in a loop (an agent): it prints one JSON object when the
command has ended, so one parse gives everything the next step needs: the decision (verdict, rule ids, reason,
hint), the exit code, how it ended (signal, time limit, or the host's reason when the command had no exit of its
own) and the tail of stdout and stderr as text.  One object rather than a stream of JSON lines because a caller in
a loop acts on the outcome, never on half of it; a person watching a long command runs it without ``--json``.
A denial is a result too (its decision and exit code 126); an exec that did not run otherwise (no daemon, no such
box, refused before deciding, or a program the box could not start) is an ``{"error": …}`` object.  The exit
status is the same as without ``--json``: the shell's 127 when the program is not found in the box, 126 when it
cannot be executed, is refused or denied.

A command the policy answers ``ask`` is held for a person's approval (``exec_held``): one line on stderr says how to
approve it, and the exec waits; approved, it runs as usual; rejected or expired, it ends with 126 and the daemon's
reason.  Ctrl+C while it is held withdraws the approval (exit 130).

The command runs without an event loop, like every other daemon command: the client's calls block, and
``exec_driver`` reads the daemon, stdin or the keys, and signals from one ``selectors`` loop.
"""

from __future__ import annotations

import json
import os
import sys
import termios
import tty
from typing import Any

from tkbox_daemon.limits import EXEC_JSON_OUTPUT

from ..client import DaemonClient, DaemonError
from ..client_exec import BlockingExecCall
from .daemon_refusals import from_daemon
from .exec_driver import EXIT_DENIED, drive_exec
from .report import CliError, CliParser

__all__ = ["COMMANDS", "EXIT_DENIED", "ExecResult", "RawTerminal", "drive_exec", "exec_main"]

JSON_OUTPUT_KEPT = EXEC_JSON_OUTPUT.default  # bytes of each of stdout and stderr that --json keeps: the last ones


def _parser() -> CliParser:
    parser = CliParser(prog="tkbox exec", usage="tkbox exec [options] BOX -- PROGRAM [ARGS…]",
                       description="Run a command in a box, decided by the signer first. The command is argv, "
                                   "not a shell line: write sh -c 'LINE' for a shell. Exits with the command's "
                                   "status; 126 when it is denied or refused, or its program cannot be "
                                   "executed; 127 when its program is not found. A command the policy asks about "
                                   "waits for a person's approval (tkbox approve ID, the console, or with --tty a "
                                   "key here); "
                                   "rejected or expired, it exits 126 with the reason. Ctrl+C while it waits "
                                   "withdraws the approval (exit 130).")
    parser.add_argument("box", help="the box's name or id")
    parser.add_argument("--cwd", default="/workspace", help="working directory in the box (default /workspace)")
    parser.add_argument("-e", "--env", action="append", default=[], help="K=V for this command (repeatable)")
    parser.add_argument("--stdin", choices=("auto", "none", "stream"), default="auto",
                        help="auto: stream when stdin is not a terminal; none: no stdin")
    parser.add_argument("--timeout", type=int, help="seconds before the command is killed")
    parser.add_argument("-t", "--tty", action="store_true",
                        help="run on a terminal in the box (interactive: keys go raw to the command); needs a "
                             "terminal on stdin. When the command waits for an approval, you can answer here "
                             "with one key: a approve, r approve and remember, x reject")
    parser.add_json("print one JSON object when the command has ended: its decision, exit and the last MiB of "
                    "its stdout and stderr as text")
    return parser


async def exec_main(argv: list[str]) -> int:
    parser = _parser()
    if "--" not in argv:  # the options are checked first (--help among them), then the missing --
        _, extra = parser.parse_known_args(argv)
        if any(word.startswith("-") for word in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        raise CliError("usage", "put -- before the command", "e.g. tkbox exec mybox -- ls -la")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        raise CliError("usage", "no command after --", "e.g. tkbox exec mybox -- ls -la")
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise CliError("usage", f"--env takes K=V, not {json.dumps(item)}", "e.g. -e LANG=C.UTF-8")
        env[name] = value
    terminal = None
    if args.tty:
        if args.json:
            raise CliError("usage", "--tty shows the command on your terminal and --json collects its output; "
                                    "use one of them")
        if not sys.stdin.isatty():
            raise CliError("usage", "--tty needs a terminal on stdin, and stdin is not one",
                           "drop --tty to stream stdin to the command instead")
        if args.stdin != "auto":
            raise CliError("usage", "--tty reads the terminal; it does not combine with --stdin")
        terminal = RawTerminal(sys.stdin.fileno())
    stream = args.tty or args.stdin == "stream" or (args.stdin == "auto" and not sys.stdin.isatty())
    size = terminal.size() if terminal is not None else None
    collected = ExecResult(args.box, command) if args.json else None
    async with DaemonClient() as client:  # no loop runs: its calls do blocking I/O (``loopless``)
        call = BlockingExecCall(client, args.box)
        try:
            call.start(command, cwd=args.cwd, env=env, stream_stdin=stream, timeout=args.timeout,
                       tty=args.tty, rows=size[0] if size else None, cols=size[1] if size else None)
        except DaemonError as error:
            raise from_daemon(error, args.box) from None
        return drive_exec(call, stream, terminal, collected)


class ExecResult:
    """What ``tkbox exec --json`` prints: the decision, the end and the tail of each output stream."""

    def __init__(self, box: str, argv: list[str]) -> None:
        self.box = box
        self.argv = argv
        self.decision: dict[str, Any] | None = None
        self.approval: dict[str, Any] | None = None  # once held: id, expiry, and how it was answered
        self.tails = {1: bytearray(), 2: bytearray()}
        self.sizes = {1: 0, 2: 0}

    def output(self, stream_no: int, data: bytes) -> None:
        tail = self.tails[1 if stream_no == 1 else 2]
        tail += data
        self.sizes[1 if stream_no == 1 else 2] += len(data)
        if len(tail) > JSON_OUTPUT_KEPT:
            del tail[: len(tail) - JSON_OUTPUT_KEPT]

    def finish(self, exit_code: int, end: dict[str, Any] | None) -> int:
        """Print the result (ASCII JSON: box bytes arrive as ``\\uXXXX``, never raw); return the exit status."""
        result = {
            "box": self.box, "argv": self.argv, "decision": self.decision, "approval": self.approval,
            "exit_code": exit_code, "exit": end,
            # Text for a reader: bytes that are not UTF-8 become U+FFFD (the exact bytes: run without --json).
            "stdout": self.tails[1].decode("utf-8", "replace"), "stderr": self.tails[2].decode("utf-8", "replace"),
            "stdout_bytes": self.sizes[1], "stderr_bytes": self.sizes[2],
            "output_cut": any(self.sizes[n] > len(self.tails[n]) for n in (1, 2)),
        }
        print(json.dumps(result, indent=2, sort_keys=True), flush=True)
        return exit_code


class RawTerminal:
    """The operator's terminal for ``--tty``: raw while the command runs, restored (idempotently) after."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.saved: list[Any] | None = None

    def size(self) -> tuple[int, int] | None:
        """(rows, cols) of the terminal, or None when it reports none (0 x 0) or an absurd one."""
        try:
            cols, rows = os.get_terminal_size(self.fd)
        except OSError:
            return None
        return (rows, cols) if 1 <= rows <= 1000 and 1 <= cols <= 1000 else None

    def enter(self) -> None:
        if self.saved is not None:  # already raw: keep the attributes to restore
            return
        self.saved = termios.tcgetattr(self.fd)
        tty.setraw(self.fd, termios.TCSANOW)  # TCSANOW: keys typed ahead are kept, not flushed

    def restore(self) -> None:
        if self.saved is not None:
            saved, self.saved = self.saved, None
            termios.tcsetattr(self.fd, termios.TCSADRAIN, saved)


COMMANDS = {"exec": exec_main}
