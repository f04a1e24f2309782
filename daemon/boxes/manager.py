"""All boxes of one daemon: create within limits, look up by id or name, stop, remove, diff, shut down.

Every box is in the daemon's registry on disk (``registry.py``) from the moment it holds its uids until its
removal is complete, so a restarted daemon lists every box it knew (``recovery.py``).  Each box claims two host
uids (the guest's and the jobs') in the host-wide uid registry (``box/uids.py``), in the name of this daemon's state
directory; they are released when the box is removed or fails to start, and a restart releases the claims of a
creation it cut short and of every box it finds lost.

Removing a box returns once it is gone from the API (stopped, run closed, uids given back, record forgotten) and its
layers are out of the way (moved to the trash); a ``LayerReaper`` deletes them afterwards, and a restart deletes
what it left.
"""

from __future__ import annotations

import asyncio
import importlib.util
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .. import limits
from ..api.errors import ApiError, not_found
from ..approvals.registry import ApprovalRegistry
from ..box.backend import BoxBackend, BoxError
from ..box.etcgen import generate_etc
from ..box.uid_claims import ClaimHolder
from ..box.uids import UidAllocator, UidRegistryError, UidsExhausted
from ..config import DaemonConfig
from ..egress.hostaddrs import HostAddresses
from ..events import EventBus
from ..signer_link import AsyncSignerClient, SignerCallError
from ..wire import BoxInfo
from .box import Box, BoxOperationError
from .box_start import GUEST_ARGV, launch_ahead
from .channels import ChannelError
from .guest_link import GuestFailure
from .layer_reaper import LayerReaper
from .pool import BoxPool
from .recovery import recover_boxes
from .registry import BOX_ID, BoxRegistry
from .removed_boxes import forget_removed_box
from .settings import SettingsError, parse_settings


def _guest_dir() -> Path:
    """Where the guest agent's package is (the checkout's ``guest/``, or ``tkbox_guest`` in an installed wheel),
    found without importing it: the daemon imports nothing of the guest but its protocol."""
    spec = importlib.util.find_spec("tkbox_guest")
    if spec is None or not spec.submodule_search_locations:
        return Path(__file__).resolve().parents[2] / "guest"
    return Path(next(iter(spec.submodule_search_locations))).resolve()


GUEST_DIR = _guest_dir()


def install_guest(source: Path, target: Path) -> Path:
    """Copy the guest agent's code where every box can read it (0755, root's), fixed for the daemon's life."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # Byte-compile with the interpreter boxes run, so a box (which cannot write there) starts without compiling.
    box_python = Path(GUEST_INTERPRETER)
    if box_python.exists():
        subprocess.run([str(box_python), "-I", "-m", "compileall", "-q", str(target)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    for path in (target, *target.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def install_etc(target: Path) -> Path:
    """The generated /etc every box of this daemon shares read-only (the same for all: hostname is "box")."""
    if target.exists():
        shutil.rmtree(target)
    generate_etc(target, hostname="box")
    return target
LIVE_STATES = ("creating", "running", "held", "stopping")
GUEST_INTERPRETER = GUEST_ARGV[0]


def open_uid_allocator(config: DaemonConfig) -> UidAllocator:
    """The host-wide uid registry, with this daemon (named by its state directory, so its restarts own its claims)
    as the holder of the claims it makes, and its box registry as the proof that a box still exists."""
    holder = ClaimHolder.this_process(daemon=str(config.paths.state_dir), records=box_registry_dir(config))
    return UidAllocator(config.paths.uid_registry, holder=holder)


def box_registry_dir(config: DaemonConfig) -> Path:
    return config.paths.state_dir / "registry"


class BoxManager:
    def __init__(self, config: DaemonConfig, events: EventBus, signer: AsyncSignerClient | None,
                 backend: BoxBackend, *, guest_dir: Path = GUEST_DIR) -> None:
        self.config = config
        self.events = events
        self.signer = signer
        self.backend = backend
        self.guest_dir = guest_dir
        self.boxes: dict[str, Box] = {}
        self.approvals = ApprovalRegistry(wait_seconds=config.approval_wait)  # every box's, in memory only
        self.host_addresses = HostAddresses()  # the host's own addresses, which no box's egress reaches
        self.registry = BoxRegistry(box_registry_dir(config))
        self.registry.lock()
        self.uids = open_uid_allocator(config)
        self._claiming = asyncio.Lock()  # one create claims at a time, in one thread (the pair is taken together)
        self.guest_dir = install_guest(guest_dir, config.paths.layers_root / "guest")
        self.etc_dir = install_etc(config.paths.layers_root / "etc")
        self.layer_reaper = LayerReaper(config.paths.layers_root)
        self.pool = BoxPool(self, config.pool_size, launch_ahead)
        self.pool.clear_left_behind()  # before the recovery releases their uid claims
        recover_boxes(self)
        self.layer_reaper.sweep()  # what an earlier daemon (or this restart's recovery) left in the trash

    def _claim_uids(self, box_id: str) -> tuple[int, int]:
        """The guest's host uid and the jobs' (never the same); both or neither."""
        return self.uids.allocate_pair(box_id)

    async def claim_uids(self, box_id: str) -> tuple[int, int]:
        """``_claim_uids`` off the event loop (the claims read /proc and wait on a host-wide lock), one at a time.
        Raises ``UidsExhausted`` or ``UidRegistryError``."""
        async with self._claiming:
            return await asyncio.to_thread(self._claim_uids, box_id)

    def new_box_id(self) -> str:
        while (box_id := secrets.token_hex(6)) in self.boxes:
            pass
        return box_id

    def health(self) -> dict[str, Any]:
        return {"version": "0.1.0", "recorded": self.signer is not None, "backend": self.backend.name,
                "boxes": len([b for b in self.boxes.values() if b.state in LIVE_STATES]),
                "max_boxes": self.config.max_boxes, "last_seq": self.events.last_seq,
                "started_ahead": self.pool.health()}

    def list(self) -> list[BoxInfo]:
        return [box.info() for box in self.boxes.values() if box.state != "removed"]

    def get(self, ref: str) -> Box:
        box = self.boxes.get(ref)
        if box is None or box.state == "removed":
            matches = [b for b in self.boxes.values() if b.settings.name == ref and b.state != "removed"]
            if not matches:
                raise not_found(f"box {ref!r}")
            box = matches[0]
        return box

    def resolve_id(self, ref: str) -> str:
        """A box id for ``ref`` (id or name), removed boxes included: their events stay readable."""
        if ref in self.boxes:
            return ref
        if BOX_ID.match(ref) and self.config.paths.box_state(ref).is_dir():
            return ref  # a box removed before this daemon started: its state dir (and events) remain
        named = [box for box in self.boxes.values() if box.settings.name == ref]
        if not named:
            raise not_found(f"box {ref!r}")
        return named[-1].id

    async def create(self, raw: dict[str, Any]) -> BoxInfo:
        try:
            settings = parse_settings(raw, default_name=f"box-{secrets.token_hex(3)}")
        except SettingsError as error:
            raise ApiError(400, "invalid_settings", str(error), field=error.field) from None
        if any(b.settings.name == settings.name and b.state != "removed" for b in self.boxes.values()):
            raise ApiError(409, "name_taken", f"a box named {settings.name} exists; choose another name or remove it")
        live = [b for b in self.boxes.values() if b.state in LIVE_STATES]
        if len(live) >= self.config.max_boxes:
            raise ApiError(429, "limit", limits.BOXES_PER_DAEMON.refusal(f"{len(live)} boxes alive"))
        warm = await self.pool.take(settings)
        if warm is not None:  # a box started ahead: its id, uids and layers' root are its own
            box = Box(self, warm.box_id, settings, warm.uid, warm.job_uid, layers=warm.layers)
        else:
            box_id = self.new_box_id()
            try:
                uid, job_uid = await self.claim_uids(box_id)
            except (UidsExhausted, UidRegistryError) as exc:
                raise ApiError(503, "no_uid", str(exc)) from None
            box = Box(self, box_id, settings, uid, job_uid)
        box_id = box.id
        try:
            self.registry.save(box.record())  # before anything is built: a restart must know every box
        except (OSError, ValueError) as exc:
            if warm is not None:
                await self.pool.discard(warm)  # its uids go with it
            else:
                self._release_uids(box)
            raise ApiError(500, "registry", f"the box could not be written to the daemon's registry: {exc}") from None
        if warm is not None:
            self.pool.registered(warm)
        self.boxes[box_id] = box
        try:
            await box.create(self.backend, warm)
        except SignerCallError as exc:
            await self._abandon(box, f"the signer did not register the box's run: {exc.message}")
            raise ApiError(503, "signer_unavailable", f"{exc.message}", box_id=box_id) from None
        except (BoxError, ChannelError, GuestFailure, OSError, ValueError, TimeoutError) as exc:
            await self._abandon(box, f"the box did not start: {exc}")
            raise ApiError(500, "box_failed", f"the box did not start: {exc}", box_id=box_id) from None
        return box.info()

    async def _abandon(self, box: Box, reason: str) -> None:
        await box.fail(reason)
        self._release_uids(box)

    def _release_uids(self, box: Box) -> None:
        self.release_uids_of(box.id, (box.uid, box.job_uid))

    def release_uids_of(self, box_id: str, uids: tuple[int, ...] | list[int]) -> None:
        """Give back ``uids`` and any other claim that names ``box_id`` (so none is left behind)."""
        owned = {uid for uid, owner in self.uids.claimed().items() if owner == box_id}
        for uid in sorted(owned | set(uids)):
            self.uids.release(uid, box_id)

    async def stop(self, ref: str, *, reason: str) -> BoxInfo:
        box = self.get(ref)
        if box.state == "lost":
            raise ApiError(409, "box_lost", f"box {box.settings.name} is lost ({box.reason}); nothing of it runs, so "
                                            f"there is nothing to stop: remove it with tkbox rm {box.settings.name}")
        await box.stop(reason)
        return box.info()

    async def remove(self, ref: str) -> BoxInfo:
        """Stop the box if needed, close its run, delete its layers, release its uids, forget its record. The
        registry says a removal began before anything is deleted, so a restart finishes one the daemon died in."""
        box = self.get(ref)
        box.removing = True
        box.save_record()
        if box.earlier_run is not None and not box.earlier_run.closed:
            box.emit("gap", {"kind": "close_run", "reason": f"run {box.earlier_run.id} stays open: its token was "
                                                            "in an earlier daemon's memory only"})
        await box.remove()  # its layers moved to the trash, not yet deleted
        self._release_uids(box)
        self.registry.forget(box.id)
        forget_removed_box(self, box.id)
        self.layer_reaper.sweep()
        return box.info()

    async def diff(self, ref: str) -> tuple[bytes, list[dict[str, Any]], str]:
        box = self.get(ref)
        if box.state in ("running", "held"):
            try:
                patch, files = await box.live_patch()
                return patch, files, "live"
            except (GuestFailure, BoxOperationError) as exc:
                raise ApiError(502, "diff_failed", f"the live patch could not be read: {exc}") from None
        saved = box.saved_patch()
        if saved is None and box.state == "lost":
            raise ApiError(404, "no_patch", f"box {box.settings.name} was lost before a patch was saved ({box.reason})")
        if saved is None:
            raise ApiError(404, "no_patch", f"box {box.settings.name} has no saved patch (it was {box.state} "
                                            "before one was saved)")
        return saved[0], saved[1], "saved"

    async def shutdown(self) -> None:
        """Answer every pending approval ``lost`` (recorded while the runs are open), stop every box and close every
        run; events are written as they happen, so none is lost."""
        await self.approvals.lose_all("the daemon stopped before anyone answered")
        await self.pool.close()
        live = [box for box in self.boxes.values() if box.state not in ("removed",)]
        await asyncio.gather(*(self._shutdown_box(box) for box in live), return_exceptions=True)
        self.layer_reaper.close()
        self.registry.unlock()

    async def _shutdown_box(self, box: Box) -> None:
        try:
            await box.stop("the daemon is shutting down")
        finally:  # a stop that failed still closes the run: its token dies with this daemon
            await box.close_run("daemon shutdown")
