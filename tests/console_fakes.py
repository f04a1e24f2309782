"""A scripted ``FakeDaemonClient`` for console tests: events from an ``asyncio.Queue``, every call recorded.

Put ``Event``s on ``fake.live`` to stream them; put ``DROP_STREAM`` to end the stream as a daemon restart does (the
console must reconnect and resume with ``after=<last seq>``); ``fake.history`` is what a reconnect replays.

Approvals as the daemon keeps them: ``fake.ask(approval)`` opens a pending one and streams its
``approval.pending``; ``answer_approval`` answers it as the daemon does (409 when it is no longer pending) and streams
``approval.answered``; ``fake.hold(program)`` makes an exec of that program wait for an approval, as an ``ask``
does, and go on (or be denied) when it is answered.  ``fake.emit`` numbers events after every one sent so far.

The changes door as the daemon runs it: ``fake.previews[box id]`` is the dry run's report (``make_preview``) and
``fake.patches[box id]`` the patch's bytes; ``apply`` decides from the preview as the daemon does — sensitive files
without ``allow_sensitive``, a denied file or a stale checkout refuse it all; each ``ask`` opens a ``write``
approval (streamed as ``approval.pending``, yielded as held) and the apply waits for its answer.
``fake.bundles[box id]`` is what ``export_bundle`` streams (in chunks, with progress) and ``fake.trust_document``
what ``trust`` gives.

The network door: ``fake.emit(box, "egress.allowed", url=…, address=…)`` and the other ``egress.*`` kinds stream the
proxy's events; ``fake.allowlists[box id]`` is the box's list, which ``change_allowlist`` changes (streaming
``egress.allowlist``), and ``fake.would_let_through[box id]`` the box's attempts that an allow of their host
answers it would have let through.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tkbox_daemon.wire import (
    ApprovalInfo,
    BoxInfo,
    Event,
    EventPage,
    ExecInfo,
    ExecOutput,
    OutputTail,
    RememberedRule,
    RunExport,
)
from tkbox_daemon.wire_apply import ApplyFile, ApplyReport
from tkbox_daemon.wire_egress import AllowlistChangeInfo, AllowlistInfo
from tkbox_daemon.wire_host import HostCheck, HostReport
from tkbox_tui.client import DaemonError, DaemonUnreachable
from tkbox_tui.console.widgets import BoxTable

DROP_STREAM = object()
FIXED_NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def fixed_clock() -> datetime:
    return FIXED_NOW


def make_box(box_id: str, name: str, state: str = "running", **extra: Any) -> BoxInfo:
    values: dict[str, Any] = dict(
        id=box_id, name=name, state=state, image="host", workspace=f"/home/op/{name}",
        created_at="2025-03-01T11:15:00Z", expires_at="2025-03-01T13:15:00Z", run_id=f"run-{box_id}",
        recorded=True, execs_running=0, execs_total=3, connections_open=1, approvals_pending=0,
        last_event="exec.finished", allow=["api.github.com"],
        secrets=[{"name": "GH_TOKEN", "hosts": ["api.github.com"], "header": "Authorization"}],
        limits={"memory": 2147483648, "cpus": 2, "lifetime": 7200}, backend="bwrap")
    values.update(extra)
    return BoxInfo(**values)


def make_event(seq: int, box_id: str = "b1", kind: str = "exec.finished", **data: Any) -> Event:
    return Event(seq, f"2025-03-01T11:{(seq // 60) % 60:02d}:{seq % 60:02d}Z", box_id, kind, data)


def make_exec(exec_id: int, command: str, state: str = "finished", stdout: bytes = b"", stderr: bytes = b"",
              **extra: Any) -> ExecOutput:
    """An exec as the daemon's history gives it: allowed by ``dev.read``, exit 0 reported by the guest, unless
    ``extra`` says otherwise; ``stdout``/``stderr`` are the kept tails (their sizes fill the record, unless
    ``stdout_tail``/``stderr_tail`` give other ``OutputTail``s)."""
    tails = {name: extra.pop(f"{name}_tail", None) for name in ("stdout", "stderr")}
    values: dict[str, Any] = dict(
        id=exec_id, command=command, state=state, verdict="allow", started_at=f"2025-03-01T11:5{exec_id % 10}:00.000Z",
        rule_ids=("dev.read",), reason="read-only tools", duration_ms=1250,
        exit_code=0 if state == "finished" else None, reported_by="guest" if state == "finished" else "",
        stdout=tails["stdout"] or OutputTail(len(stdout), len(stdout)),
        stderr=tails["stderr"] or OutputTail(len(stderr), len(stderr)))
    values.update(extra)
    return ExecOutput(ExecInfo(**values), stdout, stderr)


def make_approval(approval_id: str = "apr-00000000000000a1", box_id: str = "b1", box_name: str = "web-api",
                  command: str = "sudo true", state: str = "pending", **extra: Any) -> ApprovalInfo:
    """An exec approval as the daemon gives it: asked 15 s before ``FIXED_NOW``, expiring 105 s after it, under
    ``TK-A010``, unless ``extra`` says otherwise."""
    values: dict[str, Any] = dict(
        id=approval_id, box_id=box_id, box_name=box_name, kind="exec", state=state,
        asked={"command": command, "cwd": "/workspace", "tty": False}, program=command.split(" ")[0],
        decision_id=f"dec-{approval_id[-4:]}", rule_ids=("TK-A010",), reason="runs a command as root",
        created_at="2025-03-01T11:59:45Z", expires_at="2025-03-01T12:01:45Z",
        hint=f"answer it with: tkbox approve {approval_id}", context={"exec_id": 7})
    values.update(extra)
    return ApprovalInfo(**values)


def make_rule(remembered_id: str = "rem-0123456789ab", program: str = "sudo", **extra: Any) -> RememberedRule:
    """A remembered rule: ``program`` under ``TK-A010``, made by uid 1000 two minutes before ``FIXED_NOW``."""
    values: dict[str, Any] = dict(id=remembered_id, program=program, rule_id="TK-A010", approval_id="apr-00000000000000a1",
                                  by="uid 1000 (op)", created_at="2025-03-01T11:58:00Z")
    values.update(extra)
    return RememberedRule(**values)


ANSWERED_BY = "uid 1000 (op)"
ANSWERED_AT = "2025-03-01T11:59:58Z"


class FakeExecCall:
    """An exec whose daemon side is a script: ``outputs`` are sent after start; a signal ends it with 130."""

    def __init__(self, fake: FakeDaemonClient, ref: str) -> None:
        self.fake = fake
        self.ref = ref
        self.argv: list[str] = []
        self.signals: list[str] = []
        self._items: asyncio.Queue[Any] = asyncio.Queue()

    async def start(self, argv: list[str], **options: Any) -> None:
        self.argv = argv
        self.fake.calls.append(("exec", self.ref, tuple(argv)))
        if argv and argv[0] in self.fake.held_programs:
            box = next(box for box in self.fake.box_list if self.ref in (box.id, box.name))
            approval = make_approval(f"apr-{len(self.fake.approval_list) + 1:016x}", box.id, box.name,
                                     " ".join(argv), program=argv[0])
            self._items.put_nowait({"type": "decision", "verdict": "ask", "rule_ids": list(approval.rule_ids),
                                    "reason": approval.reason, "decision_id": approval.decision_id})
            self._items.put_nowait({"type": "held", "approval_id": approval.id, "expires_at": approval.expires_at})
            self.fake.held_calls[approval.id] = self
            self.fake.ask(approval)
            return
        for item in self.fake.exec_script(argv):
            self._items.put_nowait(item)

    def release(self, approval: ApprovalInfo) -> None:
        """The approval this exec waited for ended: it runs (as ``exec_script`` says), or it is denied (126)."""
        if approval.state == "approved":
            self._items.put_nowait({"type": "approved", "approval_id": approval.id, "by": approval.answered_by})
            for item in self.fake.exec_script(self.argv)[1:]:  # the decision was sent already
                self._items.put_nowait(item)
            return
        why = f"rejected by {approval.answered_by}: {approval.answer_reason}" if approval.state == "rejected" else \
            f"the approval {approval.state}"
        self._items.put_nowait({"type": "denied", "exit_code": 126, "reason": why, "approval_id": approval.id,
                                "state": approval.state})
        self._items.put_nowait(None)

    async def signal(self, name: str) -> None:
        self.signals.append(name)
        self.fake.calls.append(("signal", self.ref, name))
        self._items.put_nowait({"type": "exit", "exit_code": 130, "signal": 2, "timed_out": False})
        self._items.put_nowait(None)

    async def messages(self) -> AsyncIterator[dict[str, Any] | tuple[int, bytes]]:
        while (item := await self._items.get()) is not None:
            yield item

    async def close(self) -> None:
        self.fake.calls.append(("exec_closed", self.ref))


def default_exec_script(argv: list[str]) -> list[Any]:
    """allow, print the argv, exit 0; ``sleep`` waits for a signal instead of exiting."""
    items: list[Any] = [{"type": "decision", "verdict": "allow", "reason": "rule dev.read"},
                        {"type": "started", "stdin_window": 1 << 20},
                        (1, (" ".join(argv) + "\n").encode())]
    if argv[0] != "sleep":
        items += [{"type": "exit", "exit_code": 0, "signal": None, "timed_out": False}, None]
    return items


class FakeDaemonClient:
    """Implements ``ConsoleClient``; ``calls`` records every call with its arguments in order."""

    def __init__(self, boxes: list[BoxInfo] | None = None) -> None:
        self.box_list = list(boxes or [])
        self.live: asyncio.Queue[Any] = asyncio.Queue()
        self.history: list[Event] = []
        self.calls: list[tuple[Any, ...]] = []
        self.events_after: list[int] = []
        self.pages_asked: list[tuple[int | None, int]] = []
        """Each ``event_page`` asked for, as ``(before, limit)``."""
        self.host: HostReport | DaemonError = HostReport(
            (HostCheck("backend bwrap", "ok", "bubblewrap 0.8.0 at /usr/bin/bwrap"),
             HostCheck("disk quota", "degraded", "box_disk is not enforced", "none yet")),
            "bwrap", "host: boxes run with bwrap 0.8.0; 1 to look at: tkbox doctor", "Test OS, Linux 6.0")
        """What ``host_report`` answers (or raises)."""
        self.unreachable_times = 0
        self.exec_script = default_exec_script
        self.exec_calls: list[FakeExecCall] = []
        self.stream_opened = asyncio.Event()
        self.create_error: DaemonError | None = None
        self.exec_outputs: dict[str, list[ExecOutput]] = {}
        """What ``execs``/``exec_output`` answer, by box id (the daemon's exec history)."""
        self.approval_list: list[ApprovalInfo] = []
        """The approvals the daemon keeps, oldest first (``approvals``/``approval``/``answer_approval``)."""
        self.approvals_error: DaemonError | None = None
        """What ``approvals`` raises instead of answering (e.g. a daemon without the approvals API)."""
        self.answer_errors: dict[str, DaemonError] = {}
        """What ``answer_approval`` raises for an approval id, instead of answering it."""
        self.held_programs: set[str] = set()
        self.held_calls: dict[str, FakeExecCall] = {}
        """The exec waiting for each pending approval (``hold``)."""
        self.settled: dict[str, asyncio.Event] = {}
        """Set when an approval settles (an apply waits on it)."""
        self.previews: dict[str, ApplyReport] = {}
        """The dry run of each box's apply, by box id (``apply_preview``; ``apply`` decides from it)."""
        self.patches: dict[str, bytes] = {}
        """Each box's saved patch, by box id (``diff_patch``)."""
        self.apply_errors: dict[str, DaemonError] = {}
        """What ``apply_preview`` and ``apply`` raise for a box id, instead of answering."""
        self.bundles: dict[str, bytes] = {}
        """Each box's exported run, by box id (``export_bundle``)."""
        self.trust_document: dict[str, Any] = {}
        """What ``trust`` answers."""
        self.export_error: DaemonError | None = None
        """What ``export_bundle`` raises after sending half of the bundle, instead of finishing."""
        self.allowlists: dict[str, list[str]] = {}
        """Each box's egress allowlist entries, by box id (``allowlist``/``change_allowlist``)."""
        self.would_let_through: dict[str, list[dict[str, Any]]] = {}
        """What an ``allow`` of a box answers it would have let through (the daemon's replay), by box id."""
        self.allowlist_errors: dict[str, DaemonError] = {}
        """What ``change_allowlist`` raises for a box id, instead of answering."""
        self._seq = 0

    # -- approvals ------------------------------------------------------------------------------------------

    def next_seq(self) -> int:
        self._seq = max([self._seq, *(event.seq for event in self.history)]) + 1
        return self._seq

    def emit(self, box_id: str, kind: str, **data: Any) -> Event:
        """Stream an event numbered after every event sent so far."""
        event = make_event(self.next_seq(), box_id, kind, **data)
        self.live.put_nowait(event)
        return event

    def ask(self, approval: ApprovalInfo) -> ApprovalInfo:
        """A new pending approval, as the daemon opens one: kept, and its ``approval.pending`` streamed."""
        self.approval_list.append(approval)
        self.emit(approval.box_id, "approval.pending", approval=approval.to_json())
        return approval

    def settle(self, approval_id: str, state: str, kind: str = "approval.answered", **changes: Any) -> ApprovalInfo:
        """An approval ends (answered elsewhere, expired…): kept so, and its event streamed."""
        index = next(i for i, info in enumerate(self.approval_list) if info.id == approval_id)
        settled = replace(self.approval_list[index], state=state, **changes)
        self.approval_list[index] = settled
        self.emit(settled.box_id, kind, approval=settled.to_json())
        call = self.held_calls.pop(approval_id, None)
        if call is not None:
            call.release(settled)
        self.settled.setdefault(approval_id, asyncio.Event()).set()
        return settled

    def hold(self, program: str) -> None:
        """Execs of ``program`` are ``ask``s: each waits for an approval (``held``), then runs or is denied."""
        self.held_programs.add(program)

    async def approvals(self, box: str | None = None, pending_only: bool = False) -> list[ApprovalInfo]:
        self.calls.append(("approvals", box, pending_only))
        if self.approvals_error is not None:
            raise self.approvals_error
        return [info for info in self.approval_list
                if (box is None or box in (info.box_id, info.box_name)) and (info.pending or not pending_only)]

    async def approval(self, approval_id: str) -> ApprovalInfo:
        self.calls.append(("approval", approval_id))
        for info in self.approval_list:
            if info.id == approval_id:
                return info
        raise DaemonError("not_found", f"approval '{approval_id}' not found; list them with: tkbox approvals", 404)

    async def answer_approval(self, approval_id: str, answer: str, *, reason: str = "",
                              remember: bool = False) -> ApprovalInfo:
        self.calls.append(("answer_approval", approval_id, answer, reason, remember))
        if approval_id in self.answer_errors:
            raise self.answer_errors[approval_id]
        info = await self.approval(approval_id)
        if info.state == "expired":
            raise DaemonError("approval_expired", f"approval {approval_id} expired at {info.expires_at}; nothing "
                              "changed", 409)
        if not info.pending:
            raise DaemonError("approval_answered", f"approval {approval_id} was already {info.state} by "
                              f"{info.answered_by} at {info.answered_at}; nothing changed", 409)
        return self.settle(approval_id, "approved" if answer == "approve" else "rejected", answered_by=ANSWERED_BY,
                           answered_at=ANSWERED_AT, answer_reason=reason, remember=remember)

    async def forget_rule(self, box_ref: str, rule_id: str) -> RememberedRule:
        self.calls.append(("forget_rule", box_ref, rule_id))
        for index, box in enumerate(self.box_list):
            if box_ref in (box.id, box.name):
                rules = [RememberedRule.from_json(item) for item in box.remembered]
                removed = next((rule for rule in rules if rule.id == rule_id), None)
                if removed is None:
                    break
                self.box_list[index] = replace(box, remembered=[r.to_json() for r in rules if r.id != rule_id])
                self.emit(box.id, "approval.rule_removed", rule=removed.to_json())
                return removed
        raise DaemonError("not_found", f"remembered rule {rule_id} of box {box_ref} not found", 404)

    async def health(self) -> dict[str, Any]:
        """Like the daemon's: its last sequence number (the newest event of ``history``)."""
        return {"last_seq": max((event.seq for event in self.history), default=0)}

    async def host_report(self, *, refresh: bool = False) -> HostReport:
        """``host`` as set by the test (a default report otherwise); ``refresh`` is recorded."""
        self.calls.append(("host_report", refresh))
        if isinstance(self.host, DaemonError):
            raise self.host
        return self.host

    async def boxes(self) -> list[BoxInfo]:
        self.calls.append(("boxes",))
        if self.unreachable_times:
            self.unreachable_times -= 1
            raise DaemonUnreachable("no daemon answers (fake)")
        return list(self.box_list)

    async def box(self, ref: str) -> BoxInfo:
        self.calls.append(("box", ref))
        for box in self.box_list:
            if ref in (box.id, box.name):
                return box
        raise DaemonError("not_found", f"no box {ref}")

    async def create_box(self, settings: dict[str, Any]) -> BoxInfo:
        self.calls.append(("create_box", settings))
        if self.create_error is not None:
            raise self.create_error
        box = make_box(f"b{len(self.box_list) + 1}", settings.get("name", "generated"), "creating")
        self.box_list.append(box)
        return box

    async def _set_state(self, call: str, ref: str, state: str) -> BoxInfo:
        self.calls.append((call, ref))
        for index, box in enumerate(self.box_list):
            if ref in (box.id, box.name):
                self.box_list[index] = replace(box, state=state)
                return self.box_list[index]
        raise DaemonError("not_found", f"no box {ref}")

    async def stop_box(self, ref: str) -> BoxInfo:
        return await self._set_state("stop_box", ref, "stopped")

    async def remove_box(self, ref: str) -> BoxInfo:
        box = await self._set_state("remove_box", ref, "removed")
        self.box_list = [b for b in self.box_list if b.id != box.id]
        return box

    async def event_page(self, before: int | None = None, limit: int = 500, box: str | None = None) -> EventPage:
        """The last ``limit`` events of ``history`` before ``before`` (``pages_asked`` records each ask)."""
        self.pages_asked.append((before, limit))
        kept = [e for e in self.history if (before is None or e.seq < before) and (box is None or e.box_id == box)]
        last_seq = max((e.seq for e in self.history), default=0)
        first_kept = self.history[0].seq if self.history else 0
        return EventPage(kept[-limit:], last_seq, first_kept, len(kept) > limit)

    async def events(self, after: int = 0, box: str | None = None) -> AsyncIterator[Event]:
        self.events_after.append(after)
        self.stream_opened.set()
        for event in self.history:
            if event.seq > after:
                yield event
        while True:
            item = await self.live.get()
            if item is DROP_STREAM:
                return
            if isinstance(item, Exception):
                raise item
            self.history.append(item)
            yield item

    async def execs(self, ref: str) -> list[ExecInfo]:
        """The box's execs as ``exec_outputs[box id]`` holds them (oldest first)."""
        self.calls.append(("execs", ref))
        return [output.exec for output in self.exec_outputs.get(self._box_id(ref), [])]

    async def exec_output(self, ref: str, exec_id: int) -> ExecOutput:
        self.calls.append(("exec_output", ref, exec_id))
        for output in self.exec_outputs.get(self._box_id(ref), []):
            if output.exec.id == exec_id:
                return output
        raise DaemonError("not_found", f"exec {exec_id} of box {ref} not found", 404)

    def _box_id(self, ref: str) -> str:
        return next((box.id for box in self.box_list if ref in (box.id, box.name)), ref)

    # -- the changes door -------------------------------------------------------------------------------------

    async def diff_patch(self, ref: str) -> bytes:
        self.calls.append(("diff_patch", ref))
        patch = self.patches.get(self._box_id(ref))
        if patch is None:
            raise DaemonError("no_patch", f"box {ref} has no saved patch", 404)
        return patch

    async def apply_preview(self, ref: str, *, only: list[str] | None = None) -> ApplyReport:
        self.calls.append(("apply_preview", ref))
        return self._preview(ref)

    def _preview(self, ref: str) -> ApplyReport:
        box_id = self._box_id(ref)
        if box_id in self.apply_errors:
            raise self.apply_errors[box_id]
        if box_id not in self.previews:
            raise DaemonError("no_patch", f"box {ref} has no saved patch (it was stopped before one was saved)", 404)
        return self.previews[box_id]

    async def apply(self, ref: str, *, dry_run: bool = False, only: list[str] | None = None,
                    allow_sensitive: bool = False) -> AsyncIterator[ApplyReport | tuple[str, ApprovalInfo]]:
        """As the daemon: refuse it all for a sensitive file without ``allow_sensitive``, a denied file or a stale
        checkout; else ask a person for each ``ask`` (held until answered); then write, or refuse on a reject."""
        self.calls.append(("apply", ref, dry_run, None if only is None else tuple(only), allow_sensitive))
        preview = self._preview(ref)
        if dry_run:
            yield preview
            return
        chosen = {file.path for file in preview.files} if only is None else set(only)
        included = [file for file in preview.files if file.path in chosen]
        refused: dict[str, str] = {}
        for file in included:
            if file.sensitive and not allow_sensitive:
                refused[file.path] = f"sensitive ({file.sensitive}): needs allow_sensitive"
            elif file.verdict == "deny":
                refused[file.path] = f"denied by the policy: {file.reason}"
            elif file.checkout != "matches":
                refused[file.path] = f"the checkout changed: {file.checkout}"
        approvals: dict[str, ApprovalInfo] = {}
        if not refused:
            box = next(box for box in self.box_list if box.id == preview.box_id)
            for file in included:
                if file.verdict == "ask":
                    approval = make_approval(f"apr-{len(self.approval_list) + 1:016x}", box.id, box.name,
                                             kind="write", asked={"path": file.path, "action": file.action},
                                             program="Write", rule_ids=file.rule_ids, reason=file.reason, context={})
                    approvals[file.path] = self.ask(approval)
                    yield file.path, approval
            for path, approval in approvals.items():
                await self.settled.setdefault(approval.id, asyncio.Event()).wait()
                answered = await self.approval(approval.id)
                approvals[path] = answered
                if answered.state != "approved":
                    refused[path] = f"{answered.state} by {answered.answered_by}"
        files = []
        for file in preview.files:
            approval_id = approvals[file.path].id if file.path in approvals else ""
            if file.path not in chosen:
                outcome, why = "declined", "left out by the operator"
            elif file.path in refused:
                outcome, why = "refused", refused[file.path]
            else:
                outcome, why = ("not_written", "the apply was refused") if refused else ("written", "")
            files.append(replace(file, included=file.path in chosen, outcome=outcome, outcome_reason=why,
                                 approval_id=approval_id, decision_id=f"dec-{len(files):032x}"))
        status = "refused" if refused else "applied"
        reason = f"{len(refused)} file(s) refused: nothing written" if refused else ""
        yield replace(preview, status=status, files=tuple(files), reason=reason, run_id=f"run-{preview.box_id}")

    async def export_bundle(self, ref: str, sink: Callable[[bytes], None],
                            progress: Callable[[int, int], None] | None = None) -> RunExport:
        """The box's bundle to ``sink`` in 4 KiB chunks, ``progress`` after each (``export_error`` breaks off)."""
        self.calls.append(("export_bundle", ref))
        box_id = self._box_id(ref)
        data = self.bundles.get(box_id)
        if data is None:
            raise DaemonError("not_exportable", f"box {ref} has no run to export", 409, hint="stop it first")
        for start in range(0, len(data), 4096):
            if self.export_error is not None and start >= len(data) // 2:
                raise self.export_error
            sink(data[start:start + 4096])
            if progress is not None:
                progress(min(start + 4096, len(data)), len(data))
        return RunExport(f"run-{box_id}", "sha256:" + hashlib.sha256(data).hexdigest(), len(data),
                         "2025-03-01T12:00:00Z")

    async def trust(self) -> dict[str, Any]:
        self.calls.append(("trust",))
        return self.trust_document

    # -- the network door -------------------------------------------------------------------------------------

    async def allowlist(self, ref: str) -> AllowlistInfo:
        self.calls.append(("allowlist", ref))
        box = await self.box(ref)
        return AllowlistInfo(box.id, box.name, box.state, tuple(self.allowlists.get(box.id, [])))

    async def change_allowlist(self, ref: str, action: str, items: list[str], *,
                               dry_run: bool = False) -> AllowlistChangeInfo:
        """As the daemon, for plain hosts: ``allow`` adds an entry (lifting its block), ``block`` removes the
        entries of the host (any port); a real change (not ``dry_run``) streams ``egress.allowlist``."""
        self.calls.append(("change_allowlist", ref, action, tuple(items), dry_run))
        box = await self.box(ref)
        if box.id in self.allowlist_errors:
            raise self.allowlist_errors[box.id]
        before = list(self.allowlists.get(box.id, []))
        after, notes = list(before), []
        for item in items:
            if action == "allow":
                after = [entry for entry in after if entry != "!" + item]
                if item in after:
                    notes.append(f"{item} was already allowed")
                else:
                    after.append(item)
            else:
                kept = [entry for entry in after if entry.rpartition(":")[0] != item and entry != item]
                if len(kept) == len(after):
                    notes.append(f"{item} was not allowed; nothing changed")
                after = kept
        added = tuple(entry for entry in after if entry not in before)
        removed = tuple(entry for entry in before if entry not in after)
        applied = bool(added or removed) and not dry_run
        if applied:
            self.allowlists[box.id] = after
            self.emit(box.id, "egress.allowlist", action=action, by=ANSWERED_BY, added=list(added),
                      removed=list(removed), presets=[], notes=notes, count=len(after), entries=after)
        hosts = {item.rpartition(":")[0] if item.rpartition(":")[2].isdigit() else item for item in items}
        through = tuple(attempt for attempt in self.would_let_through.get(box.id, [])
                        if action == "allow" and attempt.get("host") in hosts)
        return AllowlistChangeInfo(action, ANSWERED_BY, added, removed, applied,
                                   AllowlistInfo(box.id, box.name, box.state, tuple(after)), (), tuple(notes), through)

    def exec(self, ref: str) -> FakeExecCall:
        call = FakeExecCall(self, ref)
        self.exec_calls.append(call)
        return call

    async def close(self) -> None:
        self.calls.append(("close",))


def make_file(path: str, action: str = "modify", **extra: Any) -> ApplyFile:
    """One file of a patch preview: a 1.0 KiB file grown to 1.2 KiB, allowed by ``TK-W001``, unless ``extra`` says
    otherwise."""
    values: dict[str, Any] = dict(path=path, action=action, old_size=None if action == "add" else 1024,
                                  new_size=None if action == "delete" else 1229, verdict="allow",
                                  rule_ids=("TK-W001",), reason="writes inside the checkout")
    values.update(extra)
    return ApplyFile(**values)


def make_preview(box: BoxInfo, files: list[ApplyFile]) -> ApplyReport:
    """The dry run of ``box``'s apply over ``files``."""
    return ApplyReport(box.id, box.name, "dry_run", tuple(files), patch_sha256="ab" * 32)


def quiet_settings(config_dir: Any = None, **overrides: Any) -> Any:
    """Settings for tests: no watchers, no blink, immediate reconnects, no ticking clock."""
    from pathlib import Path

    from tkbox_tui.console.settings import ConsoleSettings

    values: dict[str, Any] = dict(watch_themes=False, cursor_blink=False, reconnect_initial=0.0,
                                  reconnect_maximum=0.0, tick_interval=0, render_interval=0.02,
                                  box_refresh_interval=0.05)
    if config_dir is not None:
        values["config_dir"] = Path(config_dir)
    values.update(overrides)
    return ConsoleSettings(**values)


def two_boxes() -> list[BoxInfo]:
    return [make_box("b1", "web-api"), make_box("b2", "batch-jobs", "stopped", execs_total=0, connections_open=0,
                                                 last_event="box.stopped")]


WAIT_UNTIL_LIMIT = 60.0
"""Seconds ``wait_until`` keeps trying: a safety net against a hang, never a timing assertion (a loaded machine
delays the console's render timer far past any number of idle rounds)."""


def record_notifications(app: Any) -> list[Any]:
    """Every notification ``app`` shows, kept (Textual drops a shown one after its timeout, which a loaded machine
    can reach before the test looks): each with ``title``, ``message`` and ``severity``."""
    from types import SimpleNamespace

    notes: list[Any] = []
    shown = app.notify

    def notify(message: str, *, title: str = "", severity: str = "information", **options: Any) -> None:
        notes.append(SimpleNamespace(title=title, message=message, severity=severity))
        shown(message, title=title, severity=severity, **options)

    app.notify = notify
    return notes


async def wait_until(pilot: Any, condition: Any, rounds: int = 200) -> None:
    """Let the app run until ``condition()`` holds: ``rounds`` idle rounds (``pilot.pause``) first, then rounds
    that also give the console's timers time to fire, until ``WAIT_UNTIL_LIMIT`` seconds have passed."""
    for _ in range(rounds):
        if condition():
            return
        await pilot.pause()
    deadline = time.monotonic() + WAIT_UNTIL_LIMIT
    while time.monotonic() < deadline:
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not reached")


async def until_table_drawn(app: Any, pilot: Any) -> None:
    """Until the console is connected, follows events and has drawn its box table from the first box list (the
    render timer draws it, which on a loaded machine may fire after the connection is up)."""
    await wait_until(pilot, lambda: app.state.connected and app.client.stream_opened.is_set()
                     and set(app.main_screen.query_one(BoxTable).box_ids) == set(app.state.boxes))
