"""A client call's coroutine run to its end without an event loop (and without importing asyncio).

A ``DaemonClient`` with no loop running does its I/O on a blocking socket, so its coroutines never suspend: a call
awaited only on such calls finishes at its first step. ``finish`` takes that step.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class NeedsEventLoop(RuntimeError):
    """The coroutine awaited something only an event loop gives (a bug: that command must run under asyncio)."""


def finish(coroutine: Coroutine[Any, Any, T]) -> T:
    """Step ``coroutine`` once: its result, or its exception as it is; a coroutine that suspends is closed and
    ``NeedsEventLoop``."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise NeedsEventLoop(f"{coroutine.__qualname__} waited for an event loop; run it with asyncio.run")
