"""Background tasks that are never garbage-collected mid-run, and fd readiness as awaitables."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class TaskSet:
    """Keeps a strong reference to every task it started until that task ends."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    def cancel_nowait(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def _ready(fd: int, write: bool) -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, wake)
    try:
        await future
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def readable(fd: int) -> None:
    """Wait until ``fd`` (non-blocking) can be read or has hit EOF/error."""
    await _ready(fd, False)


async def writable(fd: int) -> None:
    """Wait until ``fd`` (non-blocking) can be written or has an error."""
    await _ready(fd, True)
