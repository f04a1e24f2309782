"""The changes door on the host: a stopped box's saved patch into its checkout, every file decided first.

    saved patch (the host's own) ─▶ strict parse (daemon/patch) ─▶ git reads it the same way ─▶ per file: the
    checkout still holds its pre-image? sensitive? ─▶ [dry run: the policy's preview, nothing recorded] ─▶ the
    post-images, and git's result in a scratch copy, equal ─▶ a Write decision per included file (an ask waits
    for a person) ─▶ every file allowed? ─▶ write (atomically, never through a symlink) ─▶ completions and one
    trusted must-keep ``tkbox.apply`` observation: what was written, declined, refused

Nothing is written unless every included file is allowed and the checkout holds every pre-image. Files left out by
``only`` are declined, and the ``tkbox.apply`` record lists them. A decision that did not lead to a write is not
completed as if it had run: allowed ones are completed ``error`` with why, denied and unanswered ones stay
uncompleted (the record shows the decision and, in ``tkbox.apply``, that nothing was written).

The box's run must be open in this daemon. After a daemon restart it is not (closed at a clean stop, or orphaned
after a crash): then the apply registers a new run for the box whose ``tkbox.box`` record names the earlier one
(``continues_run``), and export writes that run.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import limits
from ..approvals.registry import LimitReached, refusal_reason
from ..patch import apply_read
from ..patch.apply_plan import MATCHES, FilePlan, PathNotText, path_text
from ..patch.checkout import write_checkout
from ..patch.checkout_fs import CheckoutError
from ..patch.checkout_plan import PlanError
from ..patch.operations import PatchRefused
from ..patch.sensitive import sensitive_reason
from ..tasks import spawn
from ..wire import ApprovalInfo
from ..wire_apply import ApplyFile, ApplyReport
from .box import BoxOperationError
from .recorder import Decision, RunRecorder

if TYPE_CHECKING:
    from .box import Box

APPLY_SOURCE = "tkbox.apply"
WRITE_TOOL = "Write"
DECIDE_AT_ONCE = 64  # Write decisions asked of the signer concurrently
OnHeld = Callable[[str, ApprovalInfo], Awaitable[None]]


@dataclass(frozen=True)
class ApplyOptions:
    dry_run: bool = False
    only: tuple[str, ...] | None = None
    allow_sensitive: bool = False


@dataclass
class ApplySession:
    """One apply of one box. Once ``writing`` is set the apply is no longer cancelled when its client leaves: a
    write, once begun, ends (and is recorded) whatever the client does."""

    options: ApplyOptions
    writing: bool = False


class ApplyRefused(Exception):
    """The apply stops before anything is decided or written; ``reason`` and ``hint`` go in the report."""

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


def begin_apply(box: Box, options: ApplyOptions) -> ApplySession:
    """Refuse what cannot be applied at all (an API error before the answer starts); else mark the box applying."""
    name = box.settings.name
    if box.state != "stopped":
        hint = f"stop it first: tkbox stop {name}" if box.state in ("running", "held") else \
            "only a stopped box's patch is applied"
        raise BoxOperationError(409, "box_not_stopped", f"box {name} is {box.state}; apply takes the patch a box "
                                                        f"saved when it stopped; {hint}")
    if box.applying:
        raise BoxOperationError(409, "apply_running", f"box {name} is being applied already; wait for it to end")
    if box.manager.signer is None and not options.dry_run:
        raise BoxOperationError(409, "unrecorded", "this daemon records nothing (--unrecorded): nothing is written "
                                                   "to a checkout without the signer's decision for each file")
    box.applying = True
    return ApplySession(options)


def end_apply(box: Box, session: ApplySession) -> None:
    box.applying = False


def _report(box: Box, status: str, files: list[ApplyFile], *, patch_sha256: str = "", reason: str = "",
            hint: str = "", run_id: str = "") -> ApplyReport:
    return ApplyReport(box_id=box.id, box_name=box.settings.name, status=status, files=tuple(files),
                       patch_sha256=patch_sha256, reason=reason, hint=hint, run_id=run_id)


def write_args(plan: FilePlan) -> dict[str, Any]:
    """What the signer decides for one file: its path (and a rename's or copy's source, which the policy reads
    too), the action, and the new content's digest, size and mode."""
    operation = plan.operation
    args: dict[str, Any] = {"file_path": path_text(plan.path), "action": plan.action}
    if operation.action in ("rename", "copy") and operation.old_path is not None:
        args["path"] = path_text(operation.old_path)
    if plan.new_size is not None:
        args["content_sha256"] = f"sha256:{plan.new_content_sha256}"
        args["size"] = plan.new_size
    if operation.new_mode is not None:
        args["mode"] = f"{operation.new_mode:o}"
    return args


def _file_entry(plan: FilePlan, *, included: bool) -> ApplyFile:
    operation, first = plan.operation, plan.operations[0]
    old_path = path_text(first.old_path) if first.old_path is not None and first.old_path != plan.path else ""
    sensitive = [reason for reason in (sensitive_reason(path_text(path)) for path in
                                       dict.fromkeys(p for op in plan.operations for p in op.paths)) if reason]
    return ApplyFile(path=path_text(plan.path), action=plan.action, old_path=old_path,
                     old_mode=f"{first.old_mode:o}" if first.old_mode is not None else "",
                     new_mode=f"{operation.new_mode:o}" if operation.new_mode is not None else "",
                     old_size=first.old_size, new_size=plan.new_size if plan.new_size is not None else
                     operation.new_size, binary=operation.binary is not None, sensitive="; ".join(sensitive),
                     included=included, checkout=plan.checkout)


def _select(files: list[ApplyFile], only: tuple[str, ...] | None) -> list[ApplyFile]:
    if only is None:
        return files
    known = {file.path for file in files} | {file.old_path for file in files if file.old_path}
    unknown = [path for path in only if path not in known]
    if unknown:
        shown = ", ".join(repr(path) for path in unknown[:5]) + (" …" if len(unknown) > 5 else "")
        raise ApplyRefused(f"--only names path(s) that are not in the patch: {shown}",
                           "list the patch's paths with: tkbox apply BOX --dry-run")
    chosen = set(only)
    return [replace(file, included=file.path in chosen or bool(file.old_path and file.old_path in chosen))
            for file in files]


async def apply_box_patch(box: Box, session: ApplySession, *, on_held: OnHeld) -> ApplyReport:
    """The whole apply of ``box`` (see the module's docstring); every outcome is a report."""
    saved = box.saved_patch()
    if saved is None:
        return _report(box, "refused", [], reason=f"box {box.settings.name} has no saved patch",
                       hint="a box saves its patch when it stops; one that failed before may have none")
    data = saved[0]
    digest = hashlib.sha256(data).hexdigest()
    try:
        reading = await asyncio.to_thread(apply_read.read_box_patch, data, box.layers.base,
                                          box.settings.workspace)
        files = _select([_file_entry(plan, included=True) for plan in reading.plans], session.options.only)
    except (PatchRefused, PathNotText, PlanError, CheckoutError, ApplyRefused, apply_read.ReadRefused) as exc:
        hint = getattr(exc, "hint", "") or "nothing was written; tkbox diff BOX shows the patch"
        return _report(box, "refused", [], patch_sha256=digest, reason=str(getattr(exc, "reason", exc)), hint=hint)
    if session.options.dry_run:
        files = await _preview(box, files)
        return _report(box, "dry_run", files, patch_sha256=digest)
    apply = _Apply(box, session, reading, files, digest, on_held)
    return await apply.run()


async def _preview(box: Box, files: list[ApplyFile]) -> list[ApplyFile]:
    """The policy's verdict for each file, from the signer's ``preview`` (nothing recorded)."""
    signer = box.manager.signer
    if signer is None:
        return files

    async def one(file: ApplyFile) -> ApplyFile:
        args: dict[str, Any] = {"file_path": file.path, "action": file.action}
        if file.old_path:
            args["path"] = file.old_path
        reply = await signer.call("preview", tool=WRITE_TOOL, args=args)
        return replace(file, verdict=reply["verdict"], rule_ids=tuple(reply["rule_ids"]), reason=reply["reason"],
                       hint=reply.get("hint", ""))

    out: list[ApplyFile] = []
    for start in range(0, len(files), DECIDE_AT_ONCE):
        out.extend(await asyncio.gather(*(one(file) for file in files[start:start + DECIDE_AT_ONCE])))
    return out


class _Apply:
    """One real apply: decide, wait for people, write, record."""

    def __init__(self, box: Box, session: ApplySession, reading: apply_read.BoxPatchReading,
                 files: list[ApplyFile], digest: str, on_held: OnHeld) -> None:
        self.box = box
        self.session = session
        self.reading = reading
        self.plans = {path_text(plan.path): plan for plan in reading.plans}
        self.files = {file.path: file if file.included else
                      replace(file, outcome="declined", outcome_reason="left out by the operator") for file in files}
        self.digest = digest
        self.on_held = on_held
        self.decisions: dict[str, Decision] = {}
        self.recorder: RunRecorder | None = None

    def included(self) -> list[ApplyFile]:
        return [file for file in self.files.values() if file.included]

    def set(self, path: str, **changes: Any) -> None:
        self.files[path] = replace(self.files[path], **changes)

    def report(self, status: str, reason: str = "", hint: str = "") -> ApplyReport:
        return _report(self.box, status, list(self.files.values()), patch_sha256=self.digest, reason=reason,
                       hint=hint, run_id=self.recorder.run_id or "" if self.recorder else "")

    async def run(self) -> ApplyReport:
        try:
            return await self._run()
        except asyncio.CancelledError:
            await self._finish_refused("its client went away before anything was written")
            raise

    async def _run(self) -> ApplyReport:
        refusal = self._check_files()
        if refusal is not None:
            return await self._refuse(*refusal)
        if len(self.included()) > limits.APPLY_FILES.default:
            return await self._refuse(limits.APPLY_FILES.refusal(f"{len(self.included())} files included"), "")
        mismatch = await asyncio.to_thread(apply_read.check_scratch_result, self.reading,
                                           [self.plans[file.path] for file in self.included()])
        if mismatch:
            return await self._refuse(f"git's result in a scratch copy differs from tkbox's: {mismatch}",
                                      "nothing was written; report this patch as a bug")
        self.recorder = await self._open_run()
        await self._decide_all()
        await self._wait_for_people()
        refused = [file for file in self.included() if file.outcome == "refused"]
        if refused:
            return await self._finish_refused(f"{len(refused)} file(s) were not allowed: "
                                              + ", ".join(file.path for file in refused[:5]))
        self.session.writing = True
        return await asyncio.shield(spawn(self._write(), name=f"apply-write-{self.box.id}"))

    def _check_files(self) -> tuple[str, str] | None:
        """Before anything is recorded: every included file's pre-image still in the checkout, and its
        sensitivity allowed."""
        changed = [file for file in self.included() if file.checkout != MATCHES]
        for file in changed:
            self.set(file.path, outcome="refused", outcome_reason=f"checkout: {file.checkout}")
        if changed:
            return (f"the checkout changed since the box started: {', '.join(file.path for file in changed[:5])}",
                    "nothing was written; bring the checkout back, or leave these files out with --only")
        sensitive = [file for file in self.included() if file.sensitive]
        if sensitive and not self.session.options.allow_sensitive:
            for file in sensitive:
                self.set(file.path, outcome="refused",
                         outcome_reason=f"sensitive ({file.sensitive}): needs --allow-sensitive")
            return (f"{len(sensitive)} sensitive file(s) need --allow-sensitive: "
                    + ", ".join(file.path for file in sensitive[:5]),
                    "review them (tkbox diff BOX), then apply with --allow-sensitive, or leave them out with --only")
        return None

    async def _open_run(self) -> RunRecorder:
        box = self.box
        if box.recorder is not None and not box.recorder.closed:
            return box.recorder
        signer = box.manager.signer
        assert signer is not None  # begin_apply refuses an unrecorded daemon
        earlier = box.recorder.run_id if box.recorder is not None else box.earlier_run.id if box.earlier_run else ""
        recorder = RunRecorder(signer, box.id, stop_box=_no_box_to_stop, on_event=box.emit)
        await recorder.register({"box_id": box.id, **box.settings.public(), "continues_run": earlier or ""},
                                f"apply the saved patch of box {box.settings.name} (sha256:{self.digest})")
        box.recorder = recorder
        box.save_record()
        return recorder

    async def _decide_all(self) -> None:
        assert self.recorder is not None
        files = self.included()
        for start in range(0, len(files), DECIDE_AT_ONCE):
            chunk = files[start:start + DECIDE_AT_ONCE]
            decisions = await asyncio.gather(*(self.recorder.decide(WRITE_TOOL, write_args(self.plans[f.path]))
                                               for f in chunk))
            for file, decision in zip(chunk, decisions, strict=True):
                self.decisions[file.path] = decision
                self.set(file.path, verdict=decision.verdict, rule_ids=decision.rule_ids, reason=decision.reason,
                         hint=decision.hint or "", decision_id=decision.decision_id or "")
                if decision.decision == "deny":
                    self.set(file.path, outcome="refused", outcome_reason=f"denied by the policy: {decision.reason}")

    async def _wait_for_people(self) -> None:
        asks = [file for file in self.included() if self.decisions[file.path].decision == "ask"
                and not file.outcome]
        if not asks:
            return
        approvals = self.box.approvals
        held = []
        try:
            for file in asks:
                decision = self.decisions[file.path]
                asked = {"path": file.path, "action": file.action, **({"old_path": file.old_path}
                                                                        if file.old_path else {})}
                try:
                    approval = await approvals.request(decision, asked=asked, program=WRITE_TOOL,
                                                       context={"apply": self.digest}, kind="write")
                except LimitReached as exc:
                    self.set(file.path, outcome="refused", outcome_reason=str(exc))
                    continue
                self.set(file.path, approval_id=approval.info.id)
                held.append((file.path, approval))
                if approval.info.pending:
                    await self.on_held(file.path, approval.info)
            for path, approval in held:
                info = await approvals.wait(approval)
                if info.state != "approved":
                    self.set(path, outcome="refused", outcome_reason=refusal_reason(info))
        except asyncio.CancelledError:
            for _, approval in held:
                if approval.info.pending:
                    spawn(approvals.withdraw(approval, "the apply's client went away"),
                          name=f"approval-withdraw-{approval.info.id}")
            raise

    async def _write(self) -> ApplyReport:
        included = self.included()
        changes = [change for file in included for change in self.plans[file.path].changes]
        try:
            result = await asyncio.to_thread(write_checkout, self.box.settings.workspace, changes)
        except (PlanError, CheckoutError) as exc:
            return await self._finish_refused(f"the checkout cannot be written: {exc}")
        by_path = {item.path: item for item in result.files}
        problems = dict(result.problems)
        for file in included:
            plan = self.plans[file.path]
            outcomes = [by_path.get(change.path) for change in plan.changes]
            statuses = {item.status for item in outcomes if item is not None}
            if result.outcome == "refused":
                why = "; ".join(problems.get(change.path, "") for change in plan.changes if change.path in problems)
                self.set(file.path, outcome="refused" if why else "not_written",
                         outcome_reason=f"checkout: {why}" if why else "another file's check failed")
            elif statuses == {"written"}:
                self.set(file.path, outcome="written", outcome_reason="")
            else:
                worst = next(item for item in outcomes if item is not None and item.status != "written")
                self.set(file.path, outcome=worst.status, outcome_reason=worst.reason)
        await self._complete_all()
        status = {"written": "applied", "refused": "refused", "failed": "partial"}[result.outcome]
        reason = "" if result.ok else result.message().splitlines()[0]
        await self._record(status, reason)
        self.box.emit("patch.applied", {"status": status, "written": len(result.paths("written")),
                                        "files": len(self.files), "patch_sha256": self.digest})
        hint = "" if result.ok else "the files say what was written; nothing else was touched"
        return self.report(status, reason, hint)

    async def _complete_all(self) -> None:
        assert self.recorder is not None
        ends: list[tuple[str, bool, str]] = []
        for file in self.included():
            decision = self.decisions.get(file.path)
            if decision is None or decision.decision_id is None or decision.decision == "deny":
                continue
            if decision.decision == "ask" and not file.approval_id:
                continue
            if file.outcome == "written":
                ends.append((decision.decision_id, True, ""))
            elif file.outcome != "refused" or decision.decision == "allow":
                ends.append((decision.decision_id, False, f"not written: {file.outcome_reason or file.outcome}"))
        await self._complete(ends)

    async def _complete(self, ends: list[tuple[str, bool, str]]) -> None:
        """Record the ends of these decisions, ``DECIDE_AT_ONCE`` calls in flight (the signer shares fsyncs)."""
        assert self.recorder is not None
        for start in range(0, len(ends), DECIDE_AT_ONCE):
            await asyncio.gather(*(self.recorder.complete_write(decision_id, ok=ok, error=error)
                                   for decision_id, ok, error in ends[start:start + DECIDE_AT_ONCE]))

    async def _refuse(self, reason: str, hint: str) -> ApplyReport:
        await self._record("refused", reason)
        return self.report("refused", reason, hint or "nothing was written")

    async def _finish_refused(self, reason: str) -> ApplyReport:
        for file in self.included():
            if not file.outcome:
                self.set(file.path, outcome="not_written", outcome_reason=reason)
        if self.recorder is not None:
            await self._complete_allowed_unwritten(reason)
        await self._record("refused", reason)
        return self.report("refused", reason, "nothing was written")

    async def _complete_allowed_unwritten(self, reason: str) -> None:
        await self._complete([(decision.decision_id, False, f"not written: {reason}")
                              for file in self.included()
                              if (decision := self.decisions.get(file.path)) is not None
                              and decision.decision == "allow" and decision.decision_id is not None])

    async def _record(self, status: str, reason: str) -> None:
        """The apply's outcome as a trusted must-keep observation of the run (when there is one to record in)."""
        recorder = self.recorder or (self.box.recorder if self.box.recorder is not None and
                                     not self.box.recorder.closed else None)
        if recorder is None:
            return
        value = {"patch_sha256": f"sha256:{self.digest}", "status": status, "reason": reason[:1024],
                 "files": [{"path": file.path, "action": file.action, "outcome": file.outcome or "not_written",
                            **({"decision_id": file.decision_id} if file.decision_id else {})}
                           for file in self.files.values()]}
        recorder.observe_must_keep(APPLY_SOURCE, value, trust="trusted")


async def _no_box_to_stop(reason: str) -> None:
    """A continuation run belongs to a stopped box: a lost must-keep record has no process to stop (the loss is
    recorded as a gap and closes the run)."""
