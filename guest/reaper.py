"""The one place in the guest that waits for children: ``waitpid(-1, WNOHANG)`` on every SIGCHLD.

As PID 1 the guest inherits every orphan in the box and must reap it, or zombies pile up. Reaping with
``waitpid(-1)`` would steal the exit status of the execs the guest started, so every exec registers its pid with
:meth:`Reaper.watch` right after it is spawned (in the same turn of the event loop, so the SIGCHLD handler cannot
run in between) and the reaper hands that pid's status to it; any other pid is an orphan, reaped and counted.
Nothing else in the guest may call ``wait``/``waitpid``.
"""

from __future__ import annotations

import asyncio
import os
import signal


class Reaper:
    def __init__(self) -> None:
        self._waiters: dict[int, asyncio.Future[int]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.orphans_reaped = 0

    def start(self) -> None:
        """Install the SIGCHLD handler on the running loop, then reap whatever is already waiting."""
        self._loop = asyncio.get_running_loop()
        self._loop.add_signal_handler(signal.SIGCHLD, self.reap)
        self.reap()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGCHLD)
            self._loop = None

    def watch(self, pid: int) -> asyncio.Future[int]:
        """The raw wait status of ``pid``, a child just spawned in this turn of the loop."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters[pid] = future
        return future

    def reap(self) -> None:
        """Collect every child that has ended (signals coalesce, so one SIGCHLD may stand for many)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            future = self._waiters.pop(pid, None)
            if future is None:
                self.orphans_reaped += 1
            elif not future.done():
                future.set_result(status)
