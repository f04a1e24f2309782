"""``tkbox exec`` while its command runs: the daemon's messages read and shown, stdin (or the keys of ``--tty``) sent
within the daemon's credit, Ctrl+C, window size and hang-ups forwarded, and a held exec's approval answered with a
key, all from one ``selectors`` loop: no event loop, so ``exec`` starts without importing asyncio.

Signals are noted by their handlers and wake the loop through ``signal.set_wakeup_fd`` (so they are handled between
reads, never in the middle of one); the loop runs in the main thread, where Python delivers signals.  The terminal's
descriptor stays blocking (O_NONBLOCK would be shared with the operator's shell), so it is read only once ``poll``
says it has bytes.
"""

from __future__ import annotations

import os
import selectors
import signal
import sys
from typing import Any

from ..client import DaemonError
from ..terminal_text import safe_text
from .exec_held import PROMPT, Answer, KeyAnswer, approved_line, held_line, not_approved_line, say
from .report import CliError, interrupted

EXIT_DENIED = 126
EXIT_STATUSES_OF_REFUSALS = (126, 127)  # what the daemon's exit_code may say for a command that never ran
REFUSAL_CODES = ("exec_refused", "program_not_found", "cannot_execute")
EXIT_NO_EXIT_CODE = 2  # the command ended without an exit code of its own (the host ended it; the message says why)
STDIN_CHUNK = 64 * 1024
KEYS_CHUNK = 4096


class _Stopped(Exception):
    """The loop ends here: a signal stopped it (``status``), or Ctrl+C withdrew a held approval."""

    def __init__(self, status: int | None = None) -> None:
        super().__init__()
        self.status = status


class _Signals:
    """The signals the loop handles, noted by their handlers and woken through a pipe; restored by ``restore``."""

    def __init__(self, signums: tuple[int, ...]) -> None:
        self.read_fd, self.write_fd = os.pipe()
        for fd in (self.read_fd, self.write_fd):
            os.set_blocking(fd, False)
        self.arrived: list[int] = []
        self._previous_wakeup = signal.set_wakeup_fd(self.write_fd)
        self._previous: dict[int, Any] = {}
        try:
            for signum in signums:
                self._previous[signum] = signal.signal(signum, self._note)
        except BaseException:
            self.restore()
            raise

    def _note(self, signum: int, frame: object) -> None:
        self.arrived.append(signum)

    def take(self) -> list[int]:
        try:
            while os.read(self.read_fd, 512):
                pass
        except BlockingIOError:
            pass
        arrived, self.arrived = self.arrived, []
        return arrived

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        signal.set_wakeup_fd(self._previous_wakeup)
        for fd in (self.read_fd, self.write_fd):
            os.close(fd)


class _Driver:
    def __init__(self, call: Any, stream: bool, terminal: Any, collected: Any, answer: Answer | None) -> None:
        self.call = call
        self.stream = stream
        self.terminal = terminal
        self.collected = collected
        self.answer = answer
        self.interrupts = 0
        self.decision: dict[str, Any] | None = None
        self.held_id: str | None = None  # the approval the exec waits for, until it is answered
        self.keys: KeyAnswer | None = None  # the key that answers it here (--tty), while it may
        self.feeding: str | None = None  # "keys" (--tty) or "stdin", once the command started
        self.input_fd: int | None = None
        self.watched: int | None = None  # the input descriptor the selector watches now

    # -- the loop ------------------------------------------------------------------------------------------------

    def run(self) -> int:
        signums = (signal.SIGINT,) + ((signal.SIGTERM, signal.SIGHUP, signal.SIGWINCH) if self.terminal else ())
        signals = _Signals(signums)
        selector = selectors.PollSelector()  # poll, not epoll: it takes a regular file or /dev/null on stdin
        try:
            selector.register(signals.read_fd, selectors.EVENT_READ, "signal")
            selector.register(self.call.fileno(), selectors.EVENT_READ, "daemon")
            while True:
                self._watch_input(selector)
                ready = {key.data for key, _ in selector.select(0 if self.call.ready else None)}
                for signum in signals.take():
                    self._on_signal(signum)
                if "daemon" in ready or self.call.ready:
                    messages = self.call.receive_ready()
                    if messages is None:
                        raise CliError("daemon_lost", "the daemon closed the connection before the command ended",
                                       "see whether it still runs: tkbox ls")
                    for message in messages:
                        status = self._on_message(message)
                        if status is not None:
                            return status
                if "input" in ready:
                    self._on_input()
        except _Stopped as stopped:
            if stopped.status is None:
                raise interrupted(f"the approval {self.held_id} is withdrawn; nothing ran") from None
            return stopped.status  # the command is stopped by closing the connection (the daemon kills it)
        finally:
            if self.terminal is not None:
                self.terminal.restore()
            selector.close()
            signals.restore()
            self.call.close()

    def _watch_input(self, selector: selectors.BaseSelector) -> None:
        """Watch the terminal or stdin while something reads it: an approval's key, or input with credit for it."""
        wanted = None
        if self.keys is not None or (self.feeding is not None and self.call.credit > 0):
            wanted = self.input_fd
        if wanted == self.watched:
            return
        if self.watched is not None:
            selector.unregister(self.watched)
        if wanted is not None:
            selector.register(wanted, selectors.EVENT_READ, "input")
        self.watched = wanted

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGINT:  # Ctrl+C interrupts the command, a second kills it, a third stops waiting
            if self.held_id is not None:
                raise _Stopped()  # withdraw: closing the connection withdraws the approval
            self.interrupts += 1
            if self.interrupts >= 3:
                raise _Stopped(128 + signal.SIGINT)
            self._send(self.call.signal, "INT" if self.interrupts == 1 else "KILL")
        elif signum == signal.SIGWINCH:
            size = self.terminal.size() if self.terminal is not None and self.feeding else None
            if size is not None:
                self._send(self.call.resize, *size)
        elif signum in (signal.SIGTERM, signal.SIGHUP):  # while the terminal is raw: end here
            raise _Stopped(128 + signum)

    @staticmethod
    def _send(method: Any, *args: Any) -> None:
        """A message to the daemon that need not arrive: a connection that is gone shows on the reading side."""
        try:
            method(*args)
        except DaemonError:
            pass

    def _on_input(self) -> None:
        assert self.input_fd is not None
        if self.keys is not None:
            outcome = self.keys.read()
            if outcome == "withdraw":
                raise _Stopped()
            if outcome == "done":
                self.keys = None
            return
        size = min(self.call.credit, KEYS_CHUNK if self.feeding == "keys" else STDIN_CHUNK)
        try:
            data = os.read(self.input_fd, size)
        except OSError:
            data = b""
        if not data:  # the end of stdin; a terminal that hung up (on a pty, STDIN_EOF would change nothing)
            if self.feeding == "stdin":
                self._send(self.call.close_stdin)
            self.feeding = None
            return
        self.call.send_stdin(data)

    # -- the daemon's messages -----------------------------------------------------------------------------------

    def _on_message(self, message: dict[str, Any] | tuple[int, bytes]) -> int | None:
        """Show one message; the exit status once the exec has ended (CliError when it failed without an end)."""
        collected, terminal = self.collected, self.terminal
        if isinstance(message, tuple):
            stream_no, data = message
            if collected is not None:
                collected.output(stream_no, data)
                return None
            target = sys.stdout.buffer if stream_no == 1 else sys.stderr.buffer
            target.write(data)
            target.flush()
            return None
        kind = message.get("type")
        if kind != "started" and terminal is not None:
            terminal.restore()  # anything but output is printed on a sane terminal
        if kind != "held":
            self.keys = None  # whatever comes next, a key here is no longer the answer
        if kind == "decision":
            self._on_decision(message)
        elif kind == "held":
            self._on_held(message)
        elif kind == "approved":
            self.held_id = None
            if collected is not None:
                collected.approval = {**(collected.approval or {}), "id": message.get("approval_id"),
                                      "state": "approved", "by": message.get("by")}
            else:
                print(approved_line(message), file=sys.stderr, flush=True)
        elif kind == "denied" and message.get("approval_id"):  # held, then not approved
            self.held_id = None
            if collected is not None:
                collected.approval = {**(collected.approval or {}), "id": message.get("approval_id"),
                                      "state": message.get("state"), "reason": message.get("reason")}
                if collected.decision is None:
                    collected.decision = _without_type(message)
                return collected.finish(EXIT_DENIED, None)
            print(not_approved_line(message), file=sys.stderr, flush=True)
            return EXIT_DENIED
        elif kind == "started" and (terminal is not None or self.stream):
            self._on_started()
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
        return None

    def _on_decision(self, message: dict[str, Any]) -> None:
        self.decision = message
        if self.collected is not None:
            self.collected.decision = _without_type(message)
        rule_ids = message.get("rule_ids")
        if isinstance(rule_ids, list) and "TK-UNRECORDED" in rule_ids:
            print("tkbox: WARNING: UNRECORDED — this daemon has no signer; nothing is decided or recorded",
                  file=sys.stderr)
        elif message.get("verdict") == "flag" and self.collected is None:
            print(f"tkbox: flagged by {_rules(message)}: {safe_text(message.get('reason', ''))}", file=sys.stderr)

    def _on_held(self, message: dict[str, Any]) -> None:
        self.held_id = str(message.get("approval_id", ""))
        print(held_line(self.decision, message), file=sys.stderr, flush=True)
        if self.collected is not None:
            self.collected.approval = {"id": self.held_id, "expires_at": message.get("expires_at"),
                                       "state": "pending"}
        if self.terminal is not None and self.keys is None:
            self.terminal.enter()  # before the prompt shows: a key typed after it is never echoed
            say(PROMPT, raw=True)
            self.input_fd = self.terminal.fd
            self.keys = KeyAnswer(self.terminal.fd, self.held_id, self.answer or _answer_through(self.call))

    def _on_started(self) -> None:
        if self.terminal is not None:
            self.terminal.enter()
            self.feeding, self.input_fd = "keys", self.terminal.fd
        else:
            self.feeding, self.input_fd = "stdin", sys.stdin.fileno()


def drive_exec(call: Any, stream: bool, terminal: Any = None, collected: Any = None,
               answer: Answer | None = None) -> int:
    """Read the exec's messages to its end; the command's output goes to our stdout/stderr, or into ``collected``
    (``--json``).  Returns the exit status; raises CliError when the exec fails without an end of its own.

    ``call`` is a started ``BlockingExecCall`` (or one like it: ``fileno``, ``ready``, ``receive_ready``,
    ``credit``, ``send_stdin``, ``close_stdin``, ``signal``, ``resize``, ``close``); ``stream``: send our stdin;
    ``terminal``: the ``RawTerminal`` of ``--tty``; ``answer`` answers a held exec's approval from the terminal
    (default: through ``call.client``).  Runs in the main thread (it handles SIGINT)."""
    return _Driver(call, stream, terminal, collected, answer).run()


def _without_type(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "type"}


def _refusal_status(message: dict[str, Any]) -> int:
    """The exit status of an exec that never ran: the daemon's 126 or 127 for a refusal, else 2 (a failure)."""
    if message.get("code") not in REFUSAL_CODES:
        return 2
    status = message.get("exit_code")
    return status if type(status) is int and status in EXIT_STATUSES_OF_REFUSALS else EXIT_DENIED


def _answer_through(call: Any) -> Answer:
    """Answer an approval through the exec's own client (the same socket, so the same person), with no loop: the
    client's call does blocking I/O and finishes at its first step."""
    from .loopless import finish

    def answer(approval_id: str, verb: str, remember: bool) -> None:
        finish(call.client.answer_approval(approval_id, verb, remember=remember))

    return answer


def _rules(message: dict[str, Any]) -> str:
    """The rule ids of a decision, escaped (they name policy rules, but arrive with the rest of the message)."""
    rule_ids = message.get("rule_ids")
    return ", ".join(safe_text(rule) for rule in rule_ids) if isinstance(rule_ids, list) else safe_text(rule_ids)
