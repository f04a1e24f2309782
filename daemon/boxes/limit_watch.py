"""What a box's limits did, read by the host and recorded: out-of-memory kills counted by the box's memory cgroup,
and a full disk (its own file system). Each is an event (``box.oom``, ``box.disk_full``) and a trusted must-keep
``tkbox.limit`` observation in the box's run: the host's own reading, never the guest's word.

The kill count is read at each command's end and at the box's end; the disk at each command's end (before the
exit reaches the client) and every ``DISK_POLL_S`` while the box runs, since a job may write in the background.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .. import limits
from .layers import DISK_POLL_S, LIMIT_SOURCE, FullDiskWatch, disk_full_record

if TYPE_CHECKING:
    from ..box.disk import DiskUsage
    from .box import Box


class LimitWatch:
    def __init__(self, box: Box) -> None:
        self.box = box
        self.disk = FullDiskWatch(box.layers, self._disk_full)
        self.oom_kills_seen = 0  # the kills already reported in a box.oom event

    def oom_kills(self) -> int:
        """The box's out-of-memory kills as its memory cgroup counts them (0 when the host cannot say); records
        the new ones when there are more since the last look."""
        process = self.box.process
        kills = process.oom_kills() if process is not None else None
        if kills is None:
            return 0
        if kills > self.oom_kills_seen:
            self._record("box.oom", {
                "limit": limits.BOX_MEMORY.name, "oom_kills": kills, "new": kills - self.oom_kills_seen,
                "reason": f"limit {limits.BOX_MEMORY.name} reached: the kernel killed {kills} process(es) of the "
                          f"box for memory; {limits.BOX_MEMORY.how_to_raise}"})
            self.oom_kills_seen = kills
        return kills

    def _disk_full(self, usage: DiskUsage) -> None:
        """The box filled its disk (its writes fail with ENOSPC; nothing else on the host is touched): recorded,
        and the box runs on."""
        self._record("box.disk_full", disk_full_record(usage))

    def _record(self, kind: str, data: dict[str, Any]) -> None:
        self.box.emit(kind, data)
        recorder = self.box.recorder
        if recorder is not None and not recorder.closed:
            recorder.observe_must_keep(LIMIT_SOURCE, data, trust="trusted")

    async def watch_disk(self) -> None:
        """Between commands too: read the disk every ``DISK_POLL_S`` while the box runs."""
        while self.box.state in ("running", "held"):
            await asyncio.sleep(DISK_POLL_S)
            self.disk.check()
