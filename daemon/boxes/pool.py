"""Boxes started ahead: the daemon keeps up to ``boxes_started_ahead`` boxes running without a workspace, so that a
create takes one and only attaches its workspace (issue 14: a box starts in <= 50 ms).

A box started ahead has everything that does not depend on what a user asks: its id, its two uids, its runtime dir
with the boot, agent and egress sockets, its layers' directories and its own disk (of the default size, formatted
and mounted, with empty upper and work dirs), its cgroups (with the default limits), its user namespace, its
launcher and bubblewrap, and its guest: Python started, every module of its first request imported, waiting in its
boot for a configuration (``guest/boot.py``). It runs at a lower CPU priority (``START_AHEAD_NICE``) until taken,
so starting one never slows a box in use.

A create takes one only when the box asked for has the image and disk size the pool starts with (``PoolShape``:
the host image, the default ``box_disk``); its memory, CPU and process limits are written into the box's cgroups
at the take, before anything runs in it. Any other box starts cold, as before. Taking one
(``box_start.start_taken_box``): the base is built, the workspace attached in the running box
(``late_mounts.py``), the guest's priority restored, its configuration released; the run's registration goes on
beside all of that, as for a cold start. Until it is taken, no event, registry record or run exists for it: it is
not a box yet.

Each box started ahead leaves a marker (``<state dir>/started-ahead/<id>``) from its first step until it is taken
or discarded, so a daemon that died with boxes started ahead clears what they left (layers, disk, dirs) at its
next start; their uid claims are then released by the recovery (they name no box of the registry) and their
processes ended by their guards. A box started ahead that ends by itself is discarded and replaced; a failure to
start one is reported once (event ``daemon.pool`` with the reason; each box made ready is one too, with the
count) and the pool then stays as it is until the next create asks,
so a host that cannot start one does not retry in a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import limits
from ..box.backend import BoxError, BoxLimits, BoxProcess, BoxSpec
from ..tasks import spawn
from .channels import AgentListener, BootServer
from .egress_listener import EgressListener, refuse_door_not_enabled
from .layers import BoxLayers
from .settings import BoxSettings

if TYPE_CHECKING:
    from .manager import BoxManager

log = logging.getLogger("tkbox.pool")
Launch = Callable[..., Awaitable[None]]  # (manager, warm box, shape, *, owner) -> its box started

MARKER_DIR = "started-ahead"
START_AHEAD_NICE = 10  # a box started ahead takes CPU only when boxes in use leave some
REFILL_DELAY_S = 1.0  # after a take, the next start ahead waits this long: the taken box's first commands go first


class PoolShape(NamedTuple):
    """What a box started ahead is made with before anyone asks: a box asked for with another shape starts cold."""

    image: str
    memory: int
    cpus: int
    pids: int
    disk: int

    @classmethod
    def default(cls) -> PoolShape:
        return cls("host", limits.BOX_MEMORY.default, limits.BOX_VCPUS.default, limits.BOX_PIDS.default,
                   limits.BOX_DISK.default)

    @classmethod
    def of(cls, settings: BoxSettings) -> PoolShape:
        return cls(settings.image, settings.limit("memory"), settings.limit("cpus"), settings.limit("pids"),
                   settings.limit("disk"))

    def fits(self, other: PoolShape) -> bool:
        """Whether a box started with this shape can become one of ``other``: the same image and disk (both made
        before the start); memory, CPU and processes are cgroup limits, written again at the take."""
        return (self.image, self.disk) == (other.image, other.disk)

    def limits(self) -> BoxLimits:
        return BoxLimits(memory_bytes=self.memory, pids_max=self.pids, cpu_quota_us=self.cpus * 100_000)


@dataclass
class WarmBox:
    """One box started ahead (see the module docstring); its parts pass to the ``Box`` that takes it."""

    box_id: str
    uid: int
    job_uid: int
    layers: BoxLayers
    runtime_dir: Path
    boot: BootServer
    agent: AgentListener
    egress: EgressListener
    spec: BoxSpec | None = None
    process: BoxProcess | None = None

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


class BoxPool:
    """Keeps up to ``size`` boxes started ahead for ``manager`` (see the module docstring)."""

    def __init__(self, manager: BoxManager, size: int, launch: Launch) -> None:
        self.manager = manager
        self.launch = launch  # box_start.launch_ahead: starts a WarmBox's box
        self.size = size if manager.backend.starts_ahead else 0
        self.shape = PoolShape.default()
        self.ready: deque[WarmBox] = deque()
        self.taken = 0
        self.failure = ""  # why the last start ahead failed; "" once one succeeds again
        self._filling: asyncio.Task[None] | None = None
        self._refill: asyncio.TimerHandle | None = None
        self._closed = False
        self._owner: tuple[int, int] = (0, 0)  # the checkout owner the next view is made for (the last one seen)

    @property
    def marker_dir(self) -> Path:
        return self.manager.config.paths.state_dir / MARKER_DIR

    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {"size": self.size, "ready": len(self.ready), "taken": self.taken}
        if self.failure:
            report["failure"] = self.failure
        return report

    # ---- filling -----------------------------------------------------------------------
    def fill_soon(self) -> None:
        """Start boxes ahead until ``size`` are ready (one at a time, in the background)."""
        if self._closed or self.size == 0 or (self._filling is not None and not self._filling.done()):
            return
        self._filling = spawn(self._fill(), name="box-pool-fill")

    async def settle(self) -> None:
        """Return once no box is being started ahead (now, if none is)."""
        if self._filling is not None and not self._filling.done():
            await asyncio.shield(self._filling)

    def fill_later(self) -> None:
        """``fill_soon`` once ``REFILL_DELAY_S`` has passed without another take: starting a box ahead costs the
        daemon forks and a file system's format, which would slow the box just taken in its first commands."""
        if self._refill is not None:
            self._refill.cancel()
        if not self._closed:
            self._refill = asyncio.get_running_loop().call_later(REFILL_DELAY_S, self.fill_soon)

    async def _fill(self) -> None:
        while not self._closed and len(self.ready) < self.size:
            try:
                warm = await self._start_one()
            except Exception as error:  # noqa: BLE001 - reported, then the pool waits for the next create
                self._report_failure(error)
                return
            if self._closed:
                await self.discard(warm)
                return
            self.failure = ""
            self.ready.append(warm)
            self.manager.events.emit("", "daemon.pool", {"ready": len(self.ready), "size": self.size})
            spawn(self._watch(warm), name=f"box-pool-watch-{warm.box_id}")

    def _report_failure(self, error: BaseException) -> None:
        reason = f"a box could not be started ahead ({type(error).__name__}: {error}); boxes start cold"
        if reason != self.failure:
            self.failure = reason
            log.warning("%s", reason)
            self.manager.events.emit("", "daemon.pool", {"reason": reason})

    async def _watch(self, warm: WarmBox) -> None:
        """A box started ahead that ends before it is taken is discarded and replaced."""
        assert warm.process is not None
        await warm.process.wait()
        if warm in self.ready:
            self.ready.remove(warm)
            log.warning("box %s, started ahead, ended before it was taken: replaced", warm.box_id)
            await self.discard(warm)
            self.fill_soon()

    async def _start_one(self) -> WarmBox:
        manager = self.manager
        box_id = manager.new_box_id()
        self.marker_dir.mkdir(mode=0o700, exist_ok=True)
        (self.marker_dir / box_id).write_text("")
        try:
            uid, job_uid = await manager.claim_uids(box_id)
        except BaseException:
            (self.marker_dir / box_id).unlink(missing_ok=True)
            raise
        runtime_dir = manager.config.paths.box_runtime(box_id)
        warm = WarmBox(box_id, uid, job_uid, BoxLayers(manager.config.paths.box_layers(box_id)), runtime_dir,
                       BootServer(runtime_dir / "boot.sock", uid),
                       AgentListener(runtime_dir / "agent.sock", uid),
                       EgressListener(runtime_dir / "egress.sock", uid, refuse_door_not_enabled))
        try:
            await self.launch(manager, warm, self.shape, owner=self._owner)
        except BaseException:
            await self.discard(warm)
            raise
        return warm

    # ---- taking ------------------------------------------------------------------------
    async def take(self, settings: BoxSettings) -> WarmBox | None:
        """A box started ahead for a box of ``settings``, or None (start it cold). Waits for one being started
        when none is ready (it is further along than a cold start would be)."""
        wanted = PoolShape.of(settings)
        if self.size == 0 or self._closed or not self.shape.fits(wanted):
            return None
        with contextlib.suppress(OSError):
            info = os.stat(settings.workspace)
            self._owner = (info.st_uid, info.st_gid)
        if not self.ready:
            await self.settle()
        while self.ready:
            warm = self.ready.popleft()
            if warm.alive() and self._limited(warm, wanted):
                self.taken += 1
                self.fill_later()
                return warm
            await self.discard(warm)
        self.fill_later()
        return None

    def _limited(self, warm: WarmBox, wanted: PoolShape) -> bool:
        """``warm``'s cgroup limits made ``wanted``'s (before anything runs in it); False, logged, when the host
        refused (the caller discards it and the box starts cold, its limits set at its start)."""
        if wanted == self.shape:
            return True
        assert warm.process is not None
        try:
            self.manager.backend.apply_limits(warm.process, wanted.limits())
        except (BoxError, OSError) as error:
            log.warning("box %s, started ahead, could not take the limits asked for (%s): discarded", warm.box_id,
                        error)
            return False
        return True

    def registered(self, warm: WarmBox) -> None:
        """``warm`` is in the daemon's registry now, as a box: a restart recovers it as one, so its marker goes."""
        (self.marker_dir / warm.box_id).unlink(missing_ok=True)

    # ---- ending ------------------------------------------------------------------------
    async def discard(self, warm: WarmBox) -> None:
        """End a box started ahead and clear all it had (its process, sockets, layers, dirs, uid claims)."""
        if warm.process is not None:
            warm.process.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(warm.process.wait(), 10)
        await warm.boot.close()
        await warm.agent.close()
        await warm.egress.close()
        await asyncio.to_thread(self._clear, warm.box_id, warm.layers)
        self.manager.release_uids_of(warm.box_id, (warm.uid, warm.job_uid))
        self.manager.layer_reaper.sweep()

    def _clear(self, box_id: str, layers: BoxLayers) -> None:
        paths = self.manager.config.paths
        try:
            layers.remove()  # into the trash, which the layer reaper empties
        except OSError as error:
            log.warning("box %s, started ahead: its layers are kept (%s)", box_id, error)
        for directory in (paths.box_runtime(box_id), paths.box_state(box_id)):
            shutil.rmtree(directory, ignore_errors=True)
        (self.marker_dir / box_id).unlink(missing_ok=True)

    def clear_left_behind(self) -> None:
        """At the daemon's start: clear what boxes started ahead by an earlier daemon left."""
        try:
            left = sorted(entry.name for entry in os.scandir(self.marker_dir) if entry.is_file())
        except FileNotFoundError:
            return
        for box_id in left:
            self._clear(box_id, BoxLayers(self.manager.config.paths.box_layers(box_id)))

    async def close(self) -> None:
        """Stop starting boxes ahead and discard those ready (the daemon's shutdown)."""
        self._closed = True
        if self._refill is not None:
            self._refill.cancel()
        await self.settle()
        while self.ready:
            await self.discard(self.ready.popleft())
