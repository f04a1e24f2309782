"""One box on the host: its settings, run, processes, channels, execs, patch and containment.

State changes go through ``set_state``, which emits the matching event; the transitions are:
creating → running ⇄ held → stopping → stopped → removed, and failed from anywhere but removed.
A stopped box keeps its run open (a later apply records into it); export, removal,
quarantine, failure and daemon shutdown close it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import shutil
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import limits
from ..approvals.box_approvals import BoxApprovals
from ..box.backend import BoxBackend, BoxProcess
from ..box.disk import DiskError
from ..doors.commands import ExecRefused, start_refusal
from ..egress.allowlist import Allowlist
from ..egress.box_context import BoxEgress
from ..patch import PatchError
from ..tasks import spawn
from ..wire import BoxInfo
from .box_start import register_run, start_box, start_taken_box
from .egress_listener import EgressHandler, EgressListener, refuse_door_not_enabled
from .exec_history import ExecHistory
from .exec_session import ExecSession, ExecStart
from .guest_link import GuestExec, GuestFailure, GuestLink, GuestTimeout
from .layers import BoxLayers
from .limit_watch import LimitWatch
from .live_allowlist import LiveAllowlist
from .patches import BoxPatches
from .recorder import Decision, RunRecorder
from .registry import BoxRecord, RunNote
from .run_export import load_run_export
from .settings import BoxSettings

if TYPE_CHECKING:
    from .manager import BoxManager
    from .pool import WarmBox

GUEST_END_WAIT = 2.0  # seconds to wait for PID 1's exit status once its channel has ended
EARLY_POLL_PERIOD = 60.0


class BoxOperationError(RuntimeError):
    """An operation is not possible in the box's state; ``status`` and ``code`` shape the API answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _exit_words(code: int) -> str:
    return f"signal {code - 128}" if code > 128 else f"exit status {code}"


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Box:
    def __init__(self, manager: BoxManager, box_id: str, settings: BoxSettings, uid: int, job_uid: int, *,
                 layers: BoxLayers | None = None) -> None:
        self.manager = manager
        self.id = box_id
        self.settings = settings
        self.uid = uid  # the guest's host uid
        self.job_uid = job_uid  # the host uid every exec runs under
        self._not_held = asyncio.Event()
        self.state = "creating"
        self.reason = ""
        created = datetime.now(UTC)
        self.created_at = _iso(created)
        self.expires_at = _iso(created + timedelta(seconds=settings.limit("lifetime")))
        self._started_monotonic = time.monotonic()
        self.state_dir = manager.config.paths.box_state(box_id)
        self.layers_dir = manager.config.paths.box_layers(box_id)
        self.runtime_dir = manager.config.paths.box_runtime(box_id)
        self.layers = layers or BoxLayers(self.layers_dir)  # where its layers and its disk live (layers.py)
        self.limit_watch = LimitWatch(self)
        self.patches = BoxPatches(self.layers, self.state_dir, settings)
        self.run_export = load_run_export(self.state_dir)  # its run's last export (run_export.py), kept on disk
        self._exec_history: ExecHistory | None = None
        self.recorder: RunRecorder | None = None
        self.process: BoxProcess | None = None
        self.link: GuestLink | None = None
        self.egress: EgressListener | None = None  # its egress.sock, from creation until a stop or failure begins
        self.egress_handler: EgressHandler = refuse_door_not_enabled  # serves each egress connection (the proxy's)
        self.execs: set[ExecSession] = set()
        self.execs_total = 0
        self.approvals = BoxApprovals(self, manager.approvals)  # its asks waiting for a person, remembered rules
        self.allowlist = LiveAllowlist(self)  # its egress allowlist now, changed and recorded while it runs
        self.last_event = ""
        self.backend_name = manager.backend.name
        self.earlier_run: RunNote | None = None  # the run of a box an earlier daemon made (its token is gone)
        self.removing = False  # a removal began (the registry says so, and a restart finishes it)
        self.applying = False  # an apply of its patch is under way (boxes/apply.py): one at a time
        self.workspace_summary: dict[str, Any] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._poll_now = asyncio.Event()
        self._stop_lock = asyncio.Lock()

    @property
    def state(self) -> str:
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        self._state = value
        if value == "held":
            self._not_held.clear()
        else:
            self._not_held.set()

    @property
    def exec_history(self) -> ExecHistory:
        """The box's decided commands and their kept output, read from its state dir on first use (after a
        daemon restart too)."""
        if self._exec_history is None:
            self._exec_history = ExecHistory(self.state_dir / "execs")
        return self._exec_history

    @property
    def egress_allowlist(self) -> Allowlist:
        """The allowlist as it is now: an immutable value, read once for each new egress connection."""
        return self.allowlist.current

    async def wait_until_not_held(self) -> None:
        """Return once the box is not held (a held box's processes are frozen: their clocks do not count)."""
        await self._not_held.wait()

    # ---- reporting ---------------------------------------------------------------------
    def emit(self, kind: str, data: dict[str, Any] | None = None) -> None:
        self.last_event = kind
        self.manager.events.emit(self.id, kind, data or {})

    def info(self) -> BoxInfo:
        return BoxInfo(
            id=self.id, name=self.settings.name, state=self.state, image=self.settings.image,
            workspace=str(self.settings.workspace), created_at=self.created_at, expires_at=self.expires_at,
            run_id=self.recorder.run_id if self.recorder else self.earlier_run.id if self.earlier_run else None,
            recorded=self.recorder is not None or self.earlier_run is not None, run_state=self.run_state(),
            execs_running=len(self.execs), execs_total=self.execs_total, last_event=self.last_event,
            allow=self.egress_allowlist.texts(), secrets=self.settings.public()["secrets"],
            limits=self.settings.public()["limits"], backend=self.backend_name, reason=self.reason,
            pid=self.process.pid if self.process is not None and self.state in ("running", "held") else None,
            approvals_pending=self.approvals.pending_count(),
            remembered=[rule.to_json() for rule in self.approvals.remembered.rules()],
            exported=self.run_export.to_json() if self.run_export is not None else None,
            allow_presets=list(self.settings.allow_presets),
            resolve={name: list(addresses) for name, addresses in self.settings.resolve.items()},
            inspect=self.settings.inspect,
        )

    def set_state(self, state: str, reason: str = "") -> None:
        self.state = state
        self.reason = reason
        kind = {"running": "box.started", "held": "box.held", "stopped": "box.stopped", "failed": "box.failed",
                "lost": "box.lost", "removed": "box.removed"}.get(state)
        if kind:
            data: dict[str, Any] = {"state": state, "reason": reason} if reason else {"state": state}
            if state in ("stopped", "failed") and (oom_kills := self.note_oom_kills()):
                data["oom_kills"] = oom_kills  # the kernel's count, from the box's memory cgroup
            if state in ("stopped", "failed") and self.link is not None:
                # requests the host gave up on, and answers that came after it had: counted, never believed
                data.update({key: value for key, value in (("guest_timeouts", self.link.timeouts),
                                                          ("guest_late_replies", self.link.late_replies)) if value})
            self.emit(kind, data)
        self.save_record()

    def run_state(self) -> str:
        """``open``, ``closed`` or ``orphaned`` (an earlier daemon's run, left open: its token is gone); "" when
        unrecorded."""
        if self.recorder is not None:
            return "closed" if self.recorder.closed else "open"
        if self.earlier_run is not None:
            return "closed" if self.earlier_run.closed else "orphaned"
        return ""

    def record(self) -> BoxRecord:
        """The box as the daemon's registry keeps it (``registry.py``)."""
        run = self.earlier_run
        if self.recorder is not None and self.recorder.run_id:
            run = RunNote(self.recorder.run_id, self.recorder.closed)
        return BoxRecord(id=self.id, state=self.state, settings=self.settings, created_at=self.created_at,
                         expires_at=self.expires_at, uid=self.uid, job_uid=self.job_uid, backend=self.backend_name,
                         reason=self.reason, removing=self.removing, run=run, execs_total=self.execs_total,
                         last_event=self.last_event)

    def save_record(self) -> None:
        """Rewrite the box's registry record; a disk that refuses is a gap, never a failed state change."""
        try:
            self.manager.registry.save(self.record())
        except (OSError, ValueError) as exc:
            self.emit("gap", {"kind": "registry", "reason": f"the box's registry record could not be written: {exc}"})

    # ---- creation ----------------------------------------------------------------------
    async def create(self, backend: BoxBackend, warm: WarmBox | None = None) -> None:
        """Register the run, build the workspace and /etc, start the box (or take ``warm``, a box started ahead:
        ``pool.py``) and wait for its guest.

        The run's registration (the signer, its fsyncs) and the box's start (layers, launcher, the guest's own
        start) need nothing of each other, so they run at the same time; both must be done, and neither failed,
        before the box is ``running`` or its egress door decides anything. A failure of either is raised only once
        both have ended (nothing is cancelled half-way: a registered run is then closed, a started box killed,
        by the caller's ``fail``); the registration's error comes first."""
        if warm is None:
            self.state_dir.mkdir(parents=True, mode=0o700)
            self.layers.make_root()
            self.runtime_dir.mkdir(mode=0o700)
        self.manager.events.attach_box(self.id, self.state_dir)
        self.emit("box.created", {"name": self.settings.name, "workspace": str(self.settings.workspace),
                                  "image": self.settings.image, "started_ahead": warm is not None})
        starting = start_box(self, backend) if warm is None else start_taken_box(self, backend, warm)
        for outcome in await asyncio.gather(register_run(self), starting, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome
        self.egress_handler = BoxEgress(self, host_addresses=self.manager.host_addresses,
                                        extra_blocked=map(ipaddress.ip_network, self.manager.config.egress_block)
                                        ).handle
        self.set_state("running")
        self.allowlist.announce_start()
        self._tasks = [
            spawn(self._watch_process(), name=f"box-watch-{self.id}"),
            spawn(self._lifetime(), name=f"box-lifetime-{self.id}"),
        ]
        if self.recorder is not None:
            self._tasks.append(spawn(self._poll_containment(), name=f"box-containment-{self.id}"))
        if self.layers.has_disk():
            self._tasks.append(spawn(self.limit_watch.watch_disk(), name=f"box-disk-{self.id}"))

    # ---- the command door --------------------------------------------------------------
    def exec_session(self, start: ExecStart) -> ExecSession:
        if self.state == "lost":
            raise BoxOperationError(409, "box_lost", f"box {self.settings.name} is lost ({self.reason}); nothing "
                                                     f"runs in it again: remove it with tkbox rm {self.settings.name}")
        if self.state != "running":
            raise BoxOperationError(409, "box_not_running",
                                    f"box {self.settings.name} is {self.state}; only a running box runs commands")
        return ExecSession(self, start)

    async def decide_exec(self, args: dict[str, Any]) -> Decision:
        if self.recorder is None:
            self.emit("daemon.unrecorded", {"warning": "unrecorded: this command is neither decided nor recorded",
                                            "command": args["command"]})
            return Decision("allow", "allow", None, ("TK-UNRECORDED",), "the daemon runs unrecorded (--unrecorded)")
        decision = await self.recorder.decide("Bash", args)
        if decision.incident:
            self._poll_now.set()
        return decision

    async def start_guest_exec(self, session: ExecSession, timeout_seconds: int, *,
                               start_deadline: float) -> GuestExec:
        """Start the decided command in the guest. Raises ExecRefused (``start_refused_by`` says whose word the
        refusal is), GuestTimeout when the guest does not answer within ``start_deadline`` seconds, or
        GuestFailure; the session records the completion either way."""
        if self.state != "running" or self.link is None:
            raise ExecRefused("state", f"box {self.settings.name} is {self.state}; nothing more runs in it")
        if len(self.execs) >= self.settings.limit("execs"):
            raise ExecRefused("limit", limits.EXECS_PER_BOX.refusal(f"{len(self.execs)} commands running"))
        request, start = session.request, session.start_request
        handle = await self.link.exec(list(request.argv), request.cwd, dict(request.env), timeout_seconds * 1000,
                                      pty=start.tty, rows=start.rows, cols=start.cols, timeout=start_deadline)
        reply = await handle.started
        if reply.get("ok") is False:
            error = reply["error"]
            raise start_refusal(request.argv[0], error["code"], error["message"])
        self.execs.add(session)
        self.execs_total += 1
        return handle

    def complete_exec_soon(self, session: ExecSession, **fields: Any) -> None:
        self.limit_watch.disk.check()  # a command's end is where a full disk shows: read before its end is told
        if self.recorder is not None and session.decision_id:
            self.recorder.complete_soon(session.decision_id, **fields)

    def exec_done(self, session: ExecSession) -> None:
        self.execs.discard(session)
        self.note_oom_kills()

    def note_oom_kills(self) -> int:
        """The box's out-of-memory kills so far (new ones recorded: ``limit_watch.py``)."""
        return self.limit_watch.oom_kills()

    async def _release_disk(self) -> None:
        """Once nothing of the box runs and its patch is saved: a last reading, then unmount its disk (the loop
        device goes with it; the image stays with the layers until the box is removed)."""
        self.limit_watch.disk.check()
        try:
            await asyncio.to_thread(self.layers.release_disk)
        except (DiskError, OSError) as exc:
            self.emit("gap", {"kind": "disk", "reason": f"the box's disk could not be released: {exc}"})

    # ---- patch ----------------------------------------------------------------------------
    async def live_patch(self) -> tuple[bytes, list[dict[str, Any]]]:
        """The patch of a running box as its layers are now (``patches.BoxPatches``)."""
        if self.state not in ("running", "held", "stopping"):
            raise BoxOperationError(409, "box_not_running", "the box is not running; its saved patch is shown")
        try:
            return await self.patches.live()
        except PatchError as exc:
            raise BoxOperationError(409, "patch_unavailable", f"the patch could not be made: {exc}") from None

    def saved_patch(self) -> tuple[bytes, list[dict[str, Any]]] | None:
        return self.patches.saved()

    async def _save_patch(self) -> None:
        """Once no process of the box runs any more, so nothing changes under the walk."""
        try:
            summary = await self.patches.save()
        except (PatchError, OSError) as exc:
            self.emit("gap", {"kind": "patch", "reason": f"the patch could not be made: {exc}"})
            return
        self.emit("patch.saved", {"files": len(summary.files), "size": summary.size, "sha256": summary.sha256})

    # ---- stopping ----------------------------------------------------------------------
    async def stop(self, reason: str, *, save_patch: bool = True, final_state: str = "stopped") -> None:
        """Stop every process, save the patch (made by the host once nothing runs), end the box. Bounded: the
        guest gets ``STOP_GRACE`` to end its commands, then the whole box is killed; a guest that did not answer
        makes the box ``failed``, with the unanswered request named. A stopped box's run stays open."""
        async with self._stop_lock:
            if self.state in ("stopped", "failed", "lost", "removed"):
                return
            await self._close_egress()
            was_live = self.state in ("running", "held")
            if self.state == "held" and self.process is not None:
                await self.process.resume()
            self.state = "stopping"
            await self.approvals.withdraw_all(f"box {self.settings.name} stopped: {reason}")
            unanswered = await self._ask_guest_to_shut_down() if was_live else None
            await self._end_process()
            if save_patch and was_live:
                await self._save_patch()
            await self._release_disk()
            for task in self._tasks:
                if task is not asyncio.current_task():
                    task.cancel()
            if unanswered:
                final_state, reason = "failed", f"{reason}; {unanswered}"
            self.set_state(final_state, reason)
        if unanswered:
            await self.close_run(self.reason)

    async def _close_egress(self) -> None:
        """First when a stop or failure begins: no connection leaves the box from then on."""
        if self.egress is not None:
            await self.egress.close()

    async def _ask_guest_to_shut_down(self) -> str | None:
        """None when the guest answered (or its channel was already gone); else why the box is failed."""
        if self.link is None or self.link.failure is not None:
            return None
        grace = limits.STOP_GRACE.default
        try:
            await self.link.request("shutdown", timeout=grace)
        except GuestTimeout as exc:
            return f"{exc}; the host killed the box"
        except GuestFailure:
            return None
        return None

    async def _end_process(self) -> None:
        if self.link is not None:
            await self.link.close()
        if self.process is not None:
            self.process.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.process.wait(), 30)

    async def fail(self, reason: str) -> None:
        """The box cannot go on: kill it at once, keep its patch (the host makes it from the layers, so a failing
        guest cannot spoil it) and close its run."""
        async with self._stop_lock:
            if self.state in ("stopped", "failed", "lost", "removed"):
                return
            await self._close_egress()
            was_live = self.state in ("running", "held", "stopping")
            self.state = "stopping"
            await self.approvals.withdraw_all(f"box {self.settings.name} failed: {reason}")
            await self._end_process()
            if was_live and self.layers_dir.exists():
                await self._save_patch()
            await self._release_disk()
            for task in self._tasks:
                if task is not asyncio.current_task():
                    task.cancel()
            self.set_state("failed", reason)
        await self.close_run(reason)

    async def close_run(self, reason: str) -> None:
        if self.recorder is not None and not self.recorder.closed:
            try:
                await self.recorder.close(reason)
            except Exception as exc:  # the close itself could not be recorded: say so
                self.emit("gap", {"kind": "close_run", "reason": str(exc)})
            else:
                self.save_record()

    async def remove(self) -> None:
        try:
            await self.stop("removed", save_patch=self.state in ("running", "held"))
        finally:  # a stop that failed still closes the run
            await self.close_run("box removed")
        self.manager.events.detach_box(self.id)
        try:
            await asyncio.to_thread(self.layers.remove)  # the disk released first, then every layer deleted
        except (DiskError, OSError) as exc:
            self.emit("gap", {"kind": "disk", "reason": f"the box's layers could not be deleted: {exc}"})
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
        self.exec_history.discard()  # its execs' records and output go with it
        self.set_state("removed")

    async def stop_for_loss(self, reason: str) -> None:
        spawn(self.stop(reason), name=f"box-stop-{self.id}")

    def guest_failed(self, reason: str) -> None:
        if self.state in ("stopping", "stopped", "failed", "removed"):
            return
        if self.link is not None and self.link.broke_protocol:
            self.emit("guest.protocol_error", {"reason": reason})
            spawn(self.fail(f"guest agent: {reason}"), name=f"box-fail-{self.id}")
        else:  # the guest's channel ended: say how its process ended, when the host can see it
            spawn(self._guest_ended(reason), name=f"box-fail-{self.id}")

    async def _guest_ended(self, reason: str) -> None:
        """The guest closed its channel or it broke: what the host itself sees of PID 1 (its exit status and the
        box's out-of-memory kills, within a short bound) goes into the reason, so an out-of-memory kill is not
        mistaken for a protocol error."""
        code = None
        if self.process is not None:
            with contextlib.suppress(TimeoutError):
                code = await asyncio.wait_for(self.process.wait(), GUEST_END_WAIT)
        seen = self._host_view_of_the_end(code)
        self.emit("guest.ended", {"reason": reason, **({"seen": seen} if seen else {})})
        await self.fail(f"guest agent: {reason}" + (f" ({seen})" if seen else ""))

    def _host_view_of_the_end(self, code: int | None) -> str:
        """How PID 1 ended, and the box's out-of-memory kills, as the host sees them (not as the guest says)."""
        seen = [f"its process ended with {_exit_words(code)}"] if code is not None else []
        oom_kills = self.process.oom_kills() if self.process is not None else None
        if oom_kills:
            seen.append(f"the box's memory limit made the kernel kill {oom_kills} process(es)")
        return "; ".join(seen)

    # ---- background watchers -----------------------------------------------------------
    async def _watch_process(self) -> None:
        assert self.process is not None
        code = await self.process.wait()
        if self.state in ("running", "held"):
            await self.fail(f"the box's init process (the guest agent) ended: {self._host_view_of_the_end(code)}")

    async def _lifetime(self) -> None:
        await asyncio.sleep(self.settings.limit("lifetime"))
        if self.state in ("running", "held"):
            await self.stop(limits.BOX_LIFETIME.refusal("the box's lifetime is over"))

    async def _poll_containment(self) -> None:
        assert self.recorder is not None
        while self.state in ("running", "held"):
            early = time.monotonic() - self._started_monotonic < EARLY_POLL_PERIOD
            period = limits.CONTAINMENT_POLL_EARLY.default if early else limits.CONTAINMENT_POLL_LATER.default
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poll_now.wait(), period)
            self._poll_now.clear()
            try:
                state = (await self.recorder.containment())["state"]
            except Exception as exc:
                self.emit("signer.unavailable", {"door": "containment", "reason": str(exc)})
                continue
            await self.apply_containment(state)

    async def apply_containment(self, state: str) -> None:
        if state == "held" and self.state == "running" and self.process is not None:
            await self.process.pause()
            self.emit("containment.changed", {"state": "held"})
            self.set_state("held", "held by the signer's containment state")
        elif state == "active" and self.state == "held" and self.process is not None:
            await self.process.resume()
            self.emit("containment.changed", {"state": "active"})
            self.state = "running"
            self.emit("box.released", {})
        elif state == "quarantined" and self.state in ("running", "held"):
            self.emit("containment.changed", {"state": "quarantined"})
            await self.fail("quarantined by the signer's containment state")
