"""A scripted exec for ``tkbox_tui.cli.exec_driver.drive_exec``: the daemon's side is a list of messages given one
at a time; ``None`` in the list waits (``waiting`` is set) until the test calls ``go`` from another thread, or for
good when it never does (only a signal can end the wait then).  The end of the list is the daemon closing."""

from __future__ import annotations

import os
import threading
from typing import Any


class ScriptedExec:
    def __init__(self, messages: list[Any]) -> None:
        self.script = list(messages)
        self.position = 0
        self.waiting = threading.Event()
        self.signalled = threading.Event()
        self.signals: list[str] = []
        self.closed = False
        self.credit = 0
        self._wake_read, self._wake_write = os.pipe()

    def fileno(self) -> int:
        return self._wake_read

    @property
    def ready(self) -> bool:
        """A message (or the end) is there; at a ``None`` the driver waits on ``fileno`` until ``go`` (asked from
        inside its loop: its signal handlers are in place by then, so ``waiting`` says a signal may come)."""
        if self.position < len(self.script) and self.script[self.position] is None:
            self.waiting.set()
            return False
        return True

    def go(self) -> None:
        os.write(self._wake_write, b"x")

    def receive_ready(self) -> list[Any] | None:
        if self.position >= len(self.script):
            return None
        item = self.script[self.position]
        if item is None:  # the descriptor is readable: go() was called
            os.read(self._wake_read, 1)
            self.waiting.clear()
        self.position += 1
        return [] if item is None else [item]

    def signal(self, name: str) -> None:
        self.signals.append(name)
        self.signalled.set()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._wake_read)
            os.close(self._wake_write)
