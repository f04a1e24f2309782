"""One way to start background tasks: ``spawn`` keeps a strong reference until the task ends."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

_running: set[asyncio.Task[Any]] = set()


def spawn(coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
    """Start ``coro`` as a named task that cannot be garbage-collected mid-run."""
    task = asyncio.get_running_loop().create_task(coro, name=name)  # noqa: TID251 - the one allowed place
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task
