"""The ``s`` key: an interactive shell in a box via ``tkbox exec BOX --tty``, with the console suspended.

Interactive shells need an exec with a pty; until ``tkbox exec`` offers ``--tty`` the console says so instead.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Any

NO_PTY_MESSAGE = "interactive shells need pty support (not yet available)"
NO_SUSPEND_MESSAGE = "this terminal cannot suspend the console for a shell"


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
    return [*tkbox_executable(), "exec", box_name, "--tty", "--", "/bin/sh"]


def run_suspended(app: Any, command: list[str]) -> int | None:
    """Run ``command`` on the real terminal with ``app`` suspended; None when the app cannot suspend."""
    from textual.app import SuspendNotSupported

    try:
        with app.suspend():
            return subprocess.run(command).returncode
    except SuspendNotSupported:
        return None


def describe_exit(code: int | None) -> str:
    """What to tell the operator when the shell returns (a denial is shown, not lost with the terminal)."""
    if code is None:
        return NO_SUSPEND_MESSAGE
    if code == 126:
        return "the shell was refused (exit 126): the signer did not allow it; the event log says which rule"
    return f"shell ended (exit {code})"
