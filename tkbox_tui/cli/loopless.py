"""Run a command's coroutine to its end without an event loop (and without importing asyncio).

A ``DaemonClient`` with no loop running does its I/O on a blocking socket, so its coroutines never suspend: a
command that awaits only such calls finishes at its first step.  That is every daemon command (``tkbox exec``
waits for signals, stdin and output at once with ``selectors``: ``exec_driver``), and it is what lets them start
like a small program: ``import asyncio`` alone costs more than the rest of ``tkbox ls``.  Ctrl+C arrives as
KeyboardInterrupt wherever the command is (but in ``exec_driver``, which handles it).
"""

from __future__ import annotations

from typing import Any

from ..client_loopless import NeedsEventLoop, finish

__all__ = ["InterruptPoints", "NeedsEventLoop", "finish"]


class InterruptPoints:
    """Ctrl+C where a following command may stop: at once while it waits for the daemon (``waiting``), else held
    until the item being shown is out (``check``), so "resume after N" never skips or repeats an item.  Outside the
    main thread (where no signal handler can be set) Ctrl+C is left as it is."""

    def __init__(self) -> None:
        self._waiting = False
        self._pending = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> InterruptPoints:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_interrupt)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._installed:
            signal.signal(signal.SIGINT, self._previous)

    def _on_interrupt(self, signum: int, frame: object) -> None:
        if self._waiting:
            raise KeyboardInterrupt
        self._pending = True

    def check(self) -> None:
        """Stop here if Ctrl+C came while the last item was shown."""
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt

    def waiting(self) -> _Waiting:
        return _Waiting(self)


class _Waiting:
    def __init__(self, points: InterruptPoints) -> None:
        self._points = points

    def __enter__(self) -> None:
        self._points.check()
        self._points._waiting = True

    def __exit__(self, *exc: object) -> None:
        self._points._waiting = False
