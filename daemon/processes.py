"""Helpers for the background processes tkbox starts (signer, daemon): one-instance locks, liveness, log tails."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class AlreadyRunning(RuntimeError):
    """Another process holds the lock."""


def take_lock(path: Path) -> int:
    """Hold an exclusive flock on ``path`` for the caller's life; raises AlreadyRunning when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyRunning(str(path)) from None
    return fd


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().rsplit(") ", 1)[-1][:1] != "Z"
    except OSError:
        return False


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


class StartFailed(RuntimeError):
    """A background process exited or did not answer in time; the message holds the tail of its log."""


def start_in_background(argv: list[str], log_path: Path, answer: Callable[[], T | None], *, what: str,
                        timeout: float, env: dict[str, str] | None = None, umask: int = 0o077) -> tuple[T, int]:
    """Start ``argv`` in its own session (with ``umask``, output to ``log_path``) and wait until ``answer()``
    gives something; returns that and the child's pid."""
    with open(log_path, "ab") as log:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                 start_new_session=True, preexec_fn=lambda: os.umask(umask))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise StartFailed(f"the {what} exited with status {child.returncode}:\n{log_tail(log_path)}")
        reply = answer()
        if reply is not None:
            return reply, child.pid
        time.sleep(0.05)  # the child is starting; poll its socket
    child.terminate()
    raise StartFailed(f"the {what} did not answer within {timeout:.0f}s:\n{log_tail(log_path)}")


def wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)  # no portable event for another process's exit
    return False
