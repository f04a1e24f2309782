"""The ``s`` key: an interactive shell in a box via ``tkbox exec BOX --tty -- /bin/sh``, with the console suspended.

The shell is decided like any command.  Under the default policy pack ``/bin/sh`` is an ``ask`` (TK-A005: it runs
code it reads from standard input, which the policy cannot see): the daemon holds it for a person's approval, and
``tkbox exec --tty``, on the terminal the console left to it, offers the answer in place (``a`` approve, ``A``
approve and remember, ``x`` reject) while the approval also shows in every other console and in ``tkbox
approvals``.  Approved, the shell opens there.  Rejected, expired or withdrawn, it is refused with exit 126; the
terminal that showed why is gone once the console resumes, so the console says it again in words: from the shell's
approval as the daemon's events left it (who rejected it and why, or that it expired), else from the daemon's
``exec.denied`` event (verdict, rule ids, reason).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

from tkbox_daemon.wire import ApprovalInfo, Event

from ..terminal_text import safe_text

NO_PTY_MESSAGE = "interactive shells need pty support (not yet available)"
NO_SUSPEND_MESSAGE = "this terminal cannot suspend the console for a shell"
SHELL_PROGRAM = "/bin/sh"
EXIT_REFUSED = 126
"""``tkbox exec``'s exit status when the command was denied or refused before it ran."""
REFUSAL_WAIT = 5.0
"""Seconds the console waits, after a refused shell, for the daemon's word on why (the shell's settled approval, or
its ``exec.denied`` event: both are sent before the refusal, so they are normally there at once); then it reports
the refusal without the reason."""
REFUSAL_POLL = 0.05
"""Seconds between looks at the events received while waiting for that word."""
T = TypeVar("T")


def tkbox_executable() -> list[str]:
    found = shutil.which("tkbox")
    return [found] if found else [sys.executable, "-m", "tkbox_tui.cli.main"]


def exec_supports_tty() -> bool:
    """Whether ``tkbox exec`` offers ``--tty`` (asked at run time; run this off the UI thread)."""
    try:
        result = subprocess.run([*tkbox_executable(), "exec", "--help"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--tty" in result.stdout


def shell_command(box_name: str) -> list[str] | None:
    """The command line for a shell in ``box_name``, or None without pty support."""
    if not exec_supports_tty():
        return None
    return [*tkbox_executable(), "exec", box_name, "--tty", "--", SHELL_PROGRAM]


def run_suspended(app: Any, command: list[str]) -> int | None:
    """Run ``command`` on the real terminal with ``app`` suspended; None when the app cannot suspend."""
    from textual.app import SuspendNotSupported

    try:
        with app.suspend():
            return subprocess.run(command).returncode
    except SuspendNotSupported:
        return None


def describe_exit(code: int | None) -> str:
    """What to tell the operator when the shell returns (a refusal is explained by ``describe_refusal``)."""
    if code is None:
        return NO_SUSPEND_MESSAGE
    if code == EXIT_REFUSED:
        return "the shell was refused (exit 126) before it ran; the event log's exec.denied says which rule"
    return f"shell ended (exit {code})"


def find_refusal(events: Iterable[Event], box_id: str, after_seq: int) -> Event | None:
    """The daemon's ``exec.denied`` event of the shell in ``box_id``: the first after ``after_seq`` (the last event
    seen before the shell was asked for) whose command is the shell's."""
    for event in events:
        if (event.seq > after_seq and event.box_id == box_id and event.kind == "exec.denied"
                and event.data.get("command") == SHELL_PROGRAM):
            return event
    return None


def find_shell_approval(approvals: Iterable[ApprovalInfo], box_id: str,
                        known: Collection[str]) -> ApprovalInfo | None:
    """The shell's approval in ``box_id``, once settled without an approve: the newest not among ``known`` (the
    approvals the console knew before the shell was asked for) whose command is the shell's."""
    found = None
    for info in approvals:
        if (info.box_id == box_id and info.id not in known and info.asked.get("command") == SHELL_PROGRAM
                and info.state not in ("pending", "approved")):
            found = info
    return found


async def wait_for(find: Callable[[], T | None], wait: float | None = None) -> T | None:
    """``find()``, looked at every ``REFUSAL_POLL`` seconds until it gives something or ``wait`` seconds
    (``REFUSAL_WAIT`` by default) have passed (then None)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (REFUSAL_WAIT if wait is None else wait)
    while (found := find()) is None and loop.time() < deadline:
        await asyncio.sleep(REFUSAL_POLL)
    return found


async def wait_for_refusal(events: Callable[[], Iterable[Event]], box_id: str, after_seq: int,
                           wait: float | None = None) -> Event | None:
    """``find_refusal`` over ``events()`` (the events received so far), until found or ``wait`` has passed."""
    return await wait_for(lambda: find_refusal(events(), box_id, after_seq), wait)


def _rules(rule_ids: object) -> str:
    return ", ".join(safe_text(rule) for rule in rule_ids) if isinstance(rule_ids, list | tuple) and rule_ids \
        else "a rule"


def describe_refusal(found: Event | ApprovalInfo | None) -> str:
    """What to tell the operator about a refused shell, from its settled approval or its ``exec.denied`` event
    (None: neither received)."""
    if found is None:
        return describe_exit(EXIT_REFUSED)
    if isinstance(found, ApprovalInfo):
        asked = f"the policy asks a person before {SHELL_PROGRAM} ({_rules(found.rule_ids)}: " \
                f"{safe_text(found.reason or 'no reason given')})"
        if found.state == "rejected":
            why = f"{safe_text(found.answered_by or 'someone')} rejected it" + (
                f": {safe_text(found.answer_reason)}" if found.answer_reason else " (no reason given)")
        elif found.state == "expired":
            why = "nobody answered before it expired"
        else:
            why = f"it was {safe_text(found.state)}" + (f": {safe_text(found.answer_reason)}"
                                                        if found.answer_reason else "")
        return (f"The shell was not approved, so it was refused: {asked}, and {why}. s asks again; meanwhile e "
                "runs one command at a time, each decided on its own.")
    rules = _rules(found.data.get("rule_ids"))
    reason = safe_text(found.data.get("reason") or "no reason given")
    if found.data.get("verdict") == "ask":
        return (f"The shell was not approved, so it was refused: the policy asks a person before {SHELL_PROGRAM} "
                f"({rules}: {reason}). s asks again (answer it on the shell's terminal, or in the inbox: i).")
    return f"The shell was denied by {rules}: {reason}."
