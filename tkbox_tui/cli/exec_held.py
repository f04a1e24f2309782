"""``tkbox exec`` while its command is held for a person's approval: the lines that say so and how it ended, and,
with ``--tty``, the answer given in place with one key.

The daemon holds an exec whose decision is ``ask`` (``{"type": "held", "approval_id", "expires_at"}``) and keeps
the deadline; the CLI says on stderr how to approve it and waits.  With ``--tty`` the person at the terminal is the
operator on the host, so the CLI also reads one key (raw mode) and answers through the API as that person;
whichever answer reaches the daemon first wins, and the exec's own messages (``approved``, ``denied``) say what
happened.  Every field shown is escaped: the reason may quote the box's command line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from ..client import DaemonError
from ..terminal_text import safe_text
from .approval_text import clock

PROMPT = "approve? [a] approve  [r] approve and remember  [x] reject  (or answer elsewhere)"
KEYS = {b"a": ("approve", False), b"r": ("approve", True), b"x": ("reject", False)}
CTRL_C = b"\x03"
FINAL_REFUSALS = ("approval_answered", "approval_expired", "record_refused")  # no point in another key

Answer = Callable[[str, str, bool], Any]  # (approval id, "approve" | "reject", remember); blocks until answered


def _rules(decision: dict[str, Any]) -> str:
    rule_ids = decision.get("rule_ids")
    if isinstance(rule_ids, list):
        return ", ".join(safe_text(rule) for rule in rule_ids)
    return safe_text(rule_ids) if rule_ids is not None else ""


def held_line(decision: dict[str, Any] | None, held: dict[str, Any]) -> str:
    """``tkbox: held for a person's approval: TK-A001 <reason> — approve with: tkbox approve apr-… (expires at
    12:34:56 UTC)``: the rule ids and reason are the ``ask`` decision's."""
    decision = decision or {}
    why = " ".join(part for part in (_rules(decision), safe_text(decision.get("reason", ""))) if part)
    approval_id = safe_text(held.get("approval_id", "?"))
    return (f"tkbox: held for a person's approval: {why or 'the policy asks'} — approve with: tkbox approve "
            f"{approval_id} (expires at {clock(str(held.get('expires_at', '')))})")


def approved_line(message: dict[str, Any]) -> str:
    by = f" by {safe_text(message['by'])}" if message.get("by") else ""
    return f"tkbox: approved{by}; running it"


def not_approved_line(message: dict[str, Any]) -> str:
    """A held exec that did not run: rejected, expired, withdrawn or lost, with the daemon's reason."""
    state = safe_text(message.get("state") or "denied")
    reason = safe_text(message.get("reason", "")) or "no reason given"
    hint = f"\n  hint: {safe_text(message['hint'])}" if message.get("hint") else ""
    return f"tkbox: not approved ({state}): {reason}{hint}"


def say(text: str, raw: bool) -> None:
    """A line on stderr; on a raw terminal a newline does not return the carriage, so it is written."""
    sys.stderr.write(text + ("\r\n" if raw else "\n"))
    sys.stderr.flush()


class KeyAnswer:
    """The answer typed on the terminal ``fd`` (already raw) to the approval ``approval_id``: ``a`` approves, ``r``
    approves and remembers, ``x`` rejects, Ctrl+C withdraws; other keys are ignored.  A refused answer is said on the
    terminal, and keys are read again unless the approval can no longer be answered.

    ``read`` is called when the terminal has bytes; keys are read one byte at a time, so what is typed after the
    answer stays in the terminal for the command."""

    def __init__(self, fd: int, approval_id: str, answer: Answer) -> None:
        self.fd = fd
        self.approval_id = approval_id
        self.answer = answer

    def read(self) -> str:
        """``"done"`` (answered, refused for good, or the terminal hung up: the answer can still come from
        elsewhere), ``"withdraw"`` (Ctrl+C), or ``"again"`` (read the next key)."""
        try:
            key = os.read(self.fd, 1)
        except OSError:
            key = b""
        if not key:
            return "done"
        if key == CTRL_C:
            return "withdraw"
        if key not in KEYS:
            return "again"
        verb, remember = KEYS[key]
        try:
            self.answer(self.approval_id, verb, remember)
            return "done"
        except DaemonError as error:
            hint = error.extra.get("hint")
            say(f"tkbox exec: could not {verb}: {safe_text(error.message)}"
                f"{'; ' + safe_text(hint) if isinstance(hint, str) and hint else ''}", raw=True)
            return "done" if error.code in FINAL_REFUSALS else "again"
