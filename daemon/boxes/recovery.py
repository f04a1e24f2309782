"""What a restarted daemon makes of the boxes an earlier one left: each is listed as it was, or as ``lost``; none
runs again.

At start the manager loads its registry (``registry.py``) and, for each record:

- a removal that had begun (``removing``, or ``removed``): finished now — layers moved to the trash, channels
  deleted, uid claims released, record forgotten — and ``box.removed`` says so;
- ``stopped`` or ``failed``: listed as it was, with its saved patch (in its state dir, as before);
- ``creating``, ``running``, ``held`` or ``stopping`` — live when the daemon ended, whether it stopped or died —:
  ``lost``, with the reason. The box guards (docs/box-isolation.md) take a box down when its daemon dies; what a
  restart can check, it checks: whatever is left in the box's cgroups or runs under either of its host uids once
  the guards have had ``GUARD_GRACE`` to finish is killed, and counted in the reason. A lost box runs nothing,
  cannot be stopped, and keeps its layers until ``tkbox rm``; its two uid claims are released now (a uid that a
  live process still holds is never handed out again: ``box/uids.py``);
- ``lost``: listed as it was.

Whatever the record, a box disk the earlier daemon left mounted (it died before the box stopped) is unmounted, its
loop device freed with it (``layers.py``); the image stays with the layers until ``tkbox rm``, and a removal
finished here unmounts before it deletes.

A box's run token lived only in the earlier daemon's memory, so a run that was not closed stays open in the
signer's log (``run_state`` ``orphaned``): nothing more is recorded into it, and removing the box cannot close it.

The trash (``<layers root>/.trash``: the layers of boxes removed, by this start or before it, whose deletion had not
finished) is then emptied in the background (``layer_reaper.py``; the manager sweeps it once this is done).

Finally, uid claims that name no box of any registry file are released: the daemon died between claiming a new
box's uids and writing its record, so no process of that box ever ran (any found is killed all the same). And the
claims of other daemons that are provably stale are given back (``UidAllocator.reclaim_stale``).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import time
from typing import TYPE_CHECKING

from ..box.cgroups import leftover_groups
from ..box.disk import DiskError
from .box import Box
from .layers import BoxLayers
from .registry import LIVE_RECORD_STATES, BoxRecord

if TYPE_CHECKING:
    from .manager import BoxManager

STATUS_READ = 4096  # bytes of /proc/<pid>/status read: the Uid and State lines come early
GUARD_GRACE = 5.0  # seconds a restart leaves the box guards to finish taking a box down before it kills the rest


def recover_boxes(manager: BoxManager) -> None:
    """Turn the registry's records into the manager's boxes (see the module docstring)."""
    loaded = manager.registry.load()
    for problem in loaded.problems:
        manager.events.emit("", "daemon.registry", {**problem.to_event(), "box_id": problem.box_id or ""})
    for record in loaded.records:
        if record.removing or record.state == "removed":
            _finish_removal(manager, record)
            continue
        box = box_from_record(manager, record)
        manager.boxes[box.id] = box
        if box.state_dir.is_dir():
            manager.events.attach_box(box.id, box.state_dir)
        if record.state in LIVE_RECORD_STATES:
            box.set_state("lost", _lost_reason(record, end_leftovers(record.id, {record.uid, record.job_uid})))
            manager.release_uids_of(record.id, (record.uid, record.job_uid))
        _release_disk(manager, box.layers, record.id)
    _release_unrecorded_claims(manager, loaded.named_ids)
    _reclaim_stale_claims(manager)


def box_from_record(manager: BoxManager, record: BoxRecord) -> Box:
    """A box an earlier daemon made, as its record describes it: no process, no channel, no run token."""
    box = Box(manager, record.id, record.settings, record.uid, record.job_uid)
    box.state, box.reason = record.state, record.reason
    box.created_at, box.expires_at = record.created_at, record.expires_at
    box.execs_total, box.last_event, box.backend_name = record.execs_total, record.last_event, record.backend
    box.earlier_run, box.removing = record.run, record.removing
    return box


def _lost_reason(record: BoxRecord, leftovers: int) -> str:
    reason = f"the daemon ended while the box was {record.state}; the box ended with it"
    if leftovers:
        reason += f" ({leftovers} of its processes were still there at restart and were killed)"
    reason += "; its host uids were given back"
    if record.run is not None and not record.run.closed:
        reason += (f"; its run {record.run.id} stays open: its token was in that daemon's memory only, so nothing "
                   "more is recorded into it")
    return reason


def _release_disk(manager: BoxManager, layers: BoxLayers, box_id: str) -> None:
    """Nothing of an earlier daemon's box runs now: unmount the disk a crash left mounted (its loop device goes
    with it); the image stays with the layers until ``tkbox rm``."""
    try:
        layers.release_disk()
    except (DiskError, OSError) as exc:
        manager.events.emit(box_id, "gap", {"kind": "disk", "reason": f"the box's disk could not be released: {exc}"})


def _finish_removal(manager: BoxManager, record: BoxRecord) -> None:
    end_leftovers(record.id, {record.uid, record.job_uid})
    try:
        BoxLayers(manager.config.paths.box_layers(record.id)).remove()  # disk and view released, then to the trash
    except (DiskError, OSError) as exc:
        manager.events.emit(record.id, "gap", {"kind": "disk", "reason": f"the box's layers could not be deleted: "
                                                                       f"{exc}"})
    shutil.rmtree(manager.config.paths.box_runtime(record.id), ignore_errors=True)
    shutil.rmtree(manager.config.paths.box_state(record.id) / "execs", ignore_errors=True)  # as Box.remove does
    manager.release_uids_of(record.id, (record.uid, record.job_uid))
    manager.registry.forget(record.id)
    manager.events.emit(record.id, "box.removed", {"state": "removed", "reason": "the removal begun before the "
                                                   "daemon ended was finished at restart"})


def _release_unrecorded_claims(manager: BoxManager, named_ids: set[str]) -> None:
    orphans: dict[str, list[int]] = {}
    for uid, owner in manager.uids.claimed().items():
        if owner not in named_ids:
            orphans.setdefault(owner, []).append(uid)
    for owner, uids in sorted(orphans.items()):
        end_leftovers(owner, set(uids))
        manager.release_uids_of(owner, uids)
        manager.events.emit("", "daemon.registry", {
            "box_id": owner, "uids": sorted(uids), "action": "released",
            "error": "uid claims of a box with no record (its creation was cut short when the daemon ended)"})


def _reclaim_stale_claims(manager: BoxManager) -> None:
    freed: dict[tuple[str, str], list[int]] = {}
    for claim in manager.uids.reclaim_stale():
        freed.setdefault((claim.holder.daemon, claim.box), []).append(claim.uid)
    for (daemon, box_id), uids in sorted(freed.items()):
        manager.events.emit("", "daemon.registry", {
            "box_id": box_id, "uids": sorted(uids), "action": "reclaimed",
            "error": f"uid claims of a box of another daemon ({daemon}) that is gone: nothing runs with those uids "
                     "and that daemon's registry no longer names the box"})


def end_leftovers(box_id: str, uids: set[int], *, grace: float | None = None) -> int:
    """Kill whatever of a box outlived its daemon — what is left in the box's own cgroups (named by its id, which
    no other box of any daemon has) — once its guards have had ``grace`` seconds to finish taking it down (each
    process is awaited through a pidfd, no polling); return how many had to be killed (0 when the guards did
    their work).

    Processes are picked by the box's cgroups, never by host uid (``uids`` stays for the report only): a process
    with one of the uids outside those groups is not proven to be the box's, and the uid allocator never hands out
    a uid that a live process holds."""
    groups = leftover_groups(box_id)
    found: set[int] = set()
    with contextlib.suppress(OSError):
        found |= groups.pids()
    pidfds = []
    for pid in found:
        with contextlib.suppress(OSError):  # gone already
            pidfds.append(os.pidfd_open(pid))
    survivors: list[int] = []
    try:
        survivors = _still_running_after(pidfds, GUARD_GRACE if grace is None else grace)
        for pidfd in survivors:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)  # through the pidfd: never a reused pid
    finally:
        for pidfd in pidfds:
            os.close(pidfd)
    with contextlib.suppress(OSError):
        groups.kill_all()  # and thaw: a frozen task dies only once thawed
        groups.remove()  # a group still emptying stays; a new box never reuses an id
    return len(survivors)


def _still_running_after(pidfds: list[int], seconds: float) -> list[int]:
    """The pidfds whose process has not ended within ``seconds`` (a pidfd turns readable when its process ends)."""
    waiting = set(pidfds)
    poller = select.poll()
    for pidfd in waiting:
        poller.register(pidfd, select.POLLIN)
    deadline = time.monotonic() + seconds
    while waiting and (left := deadline - time.monotonic()) > 0:
        for pidfd, _ in poller.poll(left * 1000):
            waiting.discard(pidfd)
            poller.unregister(pidfd)
    return sorted(waiting)


