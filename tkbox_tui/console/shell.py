"""The ``s`` key: an interactive shell in a box via ``tkbox exec BOX --tty -- /bin/sh``, with the console suspended.

The shell is decided like any command.  Under the default policy pack ``/bin/sh`` is an ``ask`` (TK-A005: it runs
code it reads from standard input, which the policy cannot see), and an ``ask`` needs a person's approval, which
tkbox cannot take yet (approvals arrive with the approvals issue): so today the shell is refused with exit 126.
The terminal that showed ``tkbox exec``'s refusal is gone once the console resumes, so the console reads the
daemon's ``exec.denied`` event of the shell (verdict, rule ids, reason) and says what is missing in words.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Any

from tkbox_daemon.wire import Event

from ..terminal_text import safe_text

NO_PTY_MESSAGE = "interactive shells need pty support (not yet available)"
NO_SUSPEND_MESSAGE = "this terminal cannot suspend the console for a shell"
SHELL_PROGRAM = "/bin/sh"
EXIT_REFUSED = 126
"""``tkbox exec``'s exit status when the command was denied or refused before it ran."""
REFUSAL_WAIT = 5.0
"""Seconds the console waits, after a refused shell, for the daemon's ``exec.denied`` event (it is emitted before
the refusal is sent, so it is normally there at once); then it reports the refusal without the reason."""
REFUSAL_POLL = 0.05
"""Seconds between looks at the events received while waiting for that event."""


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


async def wait_for_refusal(events: Callable[[], Iterable[Event]], box_id: str, after_seq: int,
                           wait: float | None = None) -> Event | None:
    """``find_refusal`` over ``events()`` (the events received so far), looked at every ``REFUSAL_POLL`` seconds
    until it is found or ``wait`` seconds (``REFUSAL_WAIT`` by default) have passed (then None)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (REFUSAL_WAIT if wait is None else wait)
    while (found := find_refusal(events(), box_id, after_seq)) is None and loop.time() < deadline:
        await asyncio.sleep(REFUSAL_POLL)
    return found


def describe_refusal(event: Event | None) -> str:
    """What to tell the operator about a refused shell, from its ``exec.denied`` event (None: not received)."""
    if event is None:
        return describe_exit(EXIT_REFUSED)
    rule_ids = event.data.get("rule_ids")
    rules = ", ".join(safe_text(rule) for rule in rule_ids) if isinstance(rule_ids, list) and rule_ids else "a rule"
    reason = safe_text(event.data.get("reason") or "no reason given")
    if event.data.get("verdict") == "ask":
        return (f"A person's approval is what is missing: the policy asks before {SHELL_PROGRAM} ({rules}: "
                f"{reason}), and tkbox cannot take approvals yet (they arrive with the approvals issue), so the "
                "shell was refused. Meanwhile, e runs one command at a time in the box, each decided on its own.")
    return f"The shell was denied by {rules}: {reason}."
