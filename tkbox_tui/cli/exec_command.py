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
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import sys
import termios
import tty
from typing import Any

from tkbox_daemon.limits import EXEC_JSON_OUTPUT
from tkbox_daemon.tasks import spawn

from ..client import DaemonClient, DaemonError
from ..terminal_text import safe_text
from .daemon_refusals import from_daemon
from .exec_held import PROMPT, Answer, answer_in_place, approved_line, held_line, not_approved_line, say
from .report import CliError, CliParser, interrupted

EXIT_DENIED = 126
EXIT_STATUSES_OF_REFUSALS = (126, 127)  # what the daemon's exit_code may say for a command that never ran
REFUSAL_CODES = ("exec_refused", "program_not_found", "cannot_execute")
EXIT_NO_EXIT_CODE = 2  # the command ended without an exit code of its own (the host ended it; the message says why)
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
    async with DaemonClient() as client:
        call = client.exec(args.box)
        try:
            await call.start(command, cwd=args.cwd, env=env, stream_stdin=stream, timeout=args.timeout,
                             tty=args.tty, rows=size[0] if size else None, cols=size[1] if size else None)
        except DaemonError as error:
            raise from_daemon(error, args.box) from None
        return await _drive_exec(call, stream, terminal, collected)


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


def _without_type(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "type"}


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


async def _drive_exec(call: Any, stream: bool, terminal: RawTerminal | None = None,
                      collected: ExecResult | None = None, answer: Answer | None = None) -> int:
    """Read the exec's messages to its end; the command's output goes to our stdout/stderr, or into ``collected``
    (``--json``).  Returns the exit status; raises CliError when the exec fails without an end of its own.

    ``answer`` answers a held exec's approval from the ``terminal`` (default: through ``call.client``)."""
    loop = asyncio.get_running_loop()
    interrupts = 0
    stopped_by: int | None = None
    main = asyncio.current_task()
    decision: dict[str, Any] | None = None
    held_id: str | None = None  # the approval the exec waits for, until it is answered
    withdrawn = False
    answerer: asyncio.Task[None] | None = None

    def withdraw() -> None:  # Ctrl+C while held: stop waiting; the connection closing withdraws the approval
        nonlocal withdrawn
        withdrawn = True
        if main is not None:
            main.cancel()

    def on_interrupt() -> None:  # Ctrl+C interrupts the command, a second kills it, a third stops waiting for it
        nonlocal interrupts
        if held_id is not None:
            withdraw()
            return
        interrupts += 1
        if interrupts >= 3:
            on_stop(signal.SIGINT)
            return
        spawn(call.signal("INT" if interrupts == 1 else "KILL"), name="exec-interrupt")

    def on_winch() -> None:
        size = terminal.size() if terminal is not None else None
        if size is not None:
            spawn(call.resize(*size), name="exec-resize")

    def on_stop(signum: int) -> None:  # SIGTERM/SIGHUP (while the terminal is raw), a third Ctrl+C: end here
        nonlocal stopped_by
        stopped_by = signum
        if main is not None:
            main.cancel()

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    if terminal is not None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, on_stop, signum)
    feeder = None
    try:
        async for message in call.messages():
            if isinstance(message, tuple):
                stream_no, data = message
                if collected is not None:
                    collected.output(stream_no, data)
                    continue
                target = sys.stdout.buffer if stream_no == 1 else sys.stderr.buffer
                target.write(data)
                target.flush()
                continue
            kind = message.get("type")
            if kind != "started" and terminal is not None:
                terminal.restore()  # anything but output is printed on a sane terminal
            if answerer is not None and kind != "held":
                answerer.cancel()  # whatever comes next, the key here is no longer the answer
                answerer = None
            if kind == "decision":
                decision = message
                if collected is not None:
                    collected.decision = _without_type(message)
                rule_ids = message.get("rule_ids")
                if isinstance(rule_ids, list) and "TK-UNRECORDED" in rule_ids:
                    print("tkbox: WARNING: UNRECORDED — this daemon has no signer; nothing is decided or recorded",
                          file=sys.stderr)
                elif message.get("verdict") == "flag" and collected is None:
                    print(f"tkbox: flagged by {_rules(message)}: {safe_text(message.get('reason', ''))}",
                          file=sys.stderr)
            elif kind == "held":
                held_id = str(message.get("approval_id", ""))
                print(held_line(decision, message), file=sys.stderr, flush=True)
                if collected is not None:
                    collected.approval = {"id": held_id, "expires_at": message.get("expires_at"), "state": "pending"}
                if terminal is not None and answerer is None:
                    terminal.enter()  # before the prompt shows: a key typed after it is never echoed
                    say(PROMPT, raw=True)
                    answerer = spawn(answer_in_place(terminal.fd, held_id, answer or _answer_through(call), withdraw),
                                     name="exec-approval-key")
            elif kind == "approved":
                held_id = None
                if collected is not None:
                    collected.approval = {**(collected.approval or {}), "id": message.get("approval_id"),
                                          "state": "approved", "by": message.get("by")}
                else:
                    print(approved_line(message), file=sys.stderr, flush=True)
            elif kind == "denied" and message.get("approval_id"):  # held, then not approved
                held_id = None
                if collected is not None:
                    collected.approval = {**(collected.approval or {}), "id": message.get("approval_id"),
                                          "state": message.get("state"), "reason": message.get("reason")}
                    if collected.decision is None:
                        collected.decision = _without_type(message)
                    return collected.finish(EXIT_DENIED, None)
                print(not_approved_line(message), file=sys.stderr, flush=True)
                return EXIT_DENIED
            elif kind == "started" and terminal is not None:
                terminal.enter()
                loop.add_signal_handler(signal.SIGWINCH, on_winch)
                feeder = spawn(_feed_keys(call, terminal.fd), name="exec-keys")
            elif kind == "started" and stream:
                feeder = spawn(_feed_stdin(call), name="exec-stdin")
            elif kind == "denied":
                if collected is not None:
                    if collected.decision is None:  # the daemon sends the decision first; this is a fallback
                        collected.decision = {k: v for k, v in message.items() if k not in ("type", "exit_code")}
                    return collected.finish(EXIT_DENIED, None)
                hint = f"\n  hint: {safe_text(message['hint'])}" if message.get("hint") else ""
                print(f"tkbox: denied by {_rules(message)}: {safe_text(message.get('reason', ''))}{hint}",
                      file=sys.stderr)
                return EXIT_DENIED
            elif kind == "error":
                raise CliError(str(message.get("code") or "exec_failed"), str(message.get("message", "")),
                               status=_refusal_status(message))
            elif kind == "exit":
                end = _without_type(message)
                exit_code = EXIT_NO_EXIT_CODE if message.get("exit_code") is None else int(message["exit_code"])
                if collected is not None:
                    return collected.finish(exit_code, end)
                if message.get("error"):
                    print(f"tkbox exec: {safe_text(message['error'])}", file=sys.stderr)
                return exit_code
        raise CliError("daemon_lost", "the daemon closed the connection before the command ended",
                       "see whether it still runs: tkbox ls")
    except asyncio.CancelledError:
        if withdrawn:
            raise interrupted(f"the approval {held_id} is withdrawn; nothing ran") from None
        if stopped_by is None:
            raise
        return 128 + stopped_by  # the command is stopped by closing the connection (the daemon kills it)
    finally:
        if answerer is not None:
            answerer.cancel()
        if terminal is not None:
            terminal.restore()
        for signum in (signal.SIGINT, signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        if feeder is not None:
            feeder.cancel()
        await call.close()


def _refusal_status(message: dict[str, Any]) -> int:
    """The exit status of an exec that never ran: the daemon's 126 or 127 for a refusal, else 2 (a failure)."""
    if message.get("code") not in REFUSAL_CODES:
        return 2
    status = message.get("exit_code")
    return status if type(status) is int and status in EXIT_STATUSES_OF_REFUSALS else EXIT_DENIED


def _answer_through(call: Any) -> Answer:
    """Answer an approval through the exec's own client (the same socket, so the same person)."""

    async def answer(approval_id: str, verb: str, remember: bool) -> None:
        await call.client.answer_approval(approval_id, verb, remember=remember)

    return answer


def _rules(message: dict[str, Any]) -> str:
    """The rule ids of a decision, escaped (they name policy rules, but arrive with the rest of the message)."""
    rule_ids = message.get("rule_ids")
    return ", ".join(safe_text(rule) for rule in rule_ids) if isinstance(rule_ids, list) else safe_text(rule_ids)


async def _feed_keys(call: Any, fd: int) -> None:
    """Forward what is typed, as it is typed, within the daemon's stdin credit.

    The descriptor stays blocking (O_NONBLOCK would be shared with the operator's shell and console), so each
    read is preceded by a zero-timeout ``select``.
    """
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    loop.add_reader(fd, ready.set)
    try:
        while True:
            await ready.wait()
            ready.clear()
            # The reader callback may have fired again before the last read: check, since the fd blocks.
            if not select.select([fd], [], [], 0)[0]:
                continue
            try:
                data = os.read(fd, 4096)
            except OSError:
                data = b""
            if not data:  # the terminal hung up; on a pty, STDIN_EOF would change nothing
                return
            await call.send_stdin(data)
    finally:
        loop.remove_reader(fd)


async def _feed_stdin(call: Any) -> None:
    """Forward our stdin (a pipe, a file or /dev/null: read in a thread, which works for all of them)."""
    source = sys.stdin.buffer
    while chunk := await asyncio.to_thread(source.read1, 64 * 1024):
        await call.send_stdin(chunk)
    await call.close_stdin()


COMMANDS = {"exec": exec_main}
