"""Every approval of one daemon: opened within the limits, answered once, recorded first, kept a while.

An approval is opened for an action the signer answered ``ask``; it lives in this daemon's memory only (a restart
loses the pending ones: docs/approvals.md, "Restarts").  It gets exactly one answer:

- ``approve`` / ``reject`` by a person (``answer``), or ``approve`` by a remembered rule (``approve_by_rule``);
- ``expire`` at its deadline, by the host's own timer (``approval_wait`` after it opened);
- ``withdraw`` when its requester goes away or its box stops; ``lost`` when the daemon stops.

Each answer is recorded in the box's signed run through its host (``ApprovalHost.record``) BEFORE the approval
changes state, and under the approval's own lock: two answers racing cannot both win (the second sees the first's
state and changes nothing), and an answer the signer did not keep leaves the approval ``lost`` (the action is
refused) while its host counts the loss and stops the box.  Answered approvals stay listed for
``approval_kept_time``, at most ``approvals_kept`` of them (the newest).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from .. import limits
from ..signer_link import CALL_TIMEOUT_SECONDS
from ..tasks import spawn
from ..wire import ApprovalInfo, RememberedRule

HOST_ANSWERER = "tkbox daemon"  # who answers expire, withdraw and lost in the record
RECORD_DEADLINE = 2 * CALL_TIMEOUT_SECONDS + 5  # past the deadline: the expiry's record, and a refused one's gap
RATE_WINDOW = 60.0  # seconds over which approvals_per_minute counts
STATE_OF_ANSWER = {"approve": "approved", "reject": "rejected", "expire": "expired", "withdraw": "withdrawn",
                   "lost": "lost"}


class ApprovalProblem(Exception):
    """An approval operation that cannot be done; the message says why and what to do."""


class ApprovalNotFound(ApprovalProblem):
    pass


class ApprovalConflict(ApprovalProblem):
    """The approval was answered (``approval_answered``) or expired (``approval_expired``) already."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RecordRefused(ApprovalProblem):
    """The signer did not keep an answer's record: the action is refused and the box stopped."""


class LimitReached(ApprovalProblem):
    """A box has too many approvals pending, or opened too many this minute; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class ApprovalHost(Protocol):
    """What the registry needs of the box an approval belongs to (``box_approvals.BoxApprovals``)."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    async def record(self, info: ApprovalInfo, answer: str, by: str, reason: str) -> None:
        """Record the answer in the box's run and return once the signer kept it; RecordRefused otherwise."""

    async def lose(self, reason: str) -> None:
        """An answer's record was refused: count the loss in ``tkbox.gap`` and stop the box."""

    def remember(self, info: ApprovalInfo, by: str) -> None:
        """Add the remembered rules of an approval answered approve with remember (its record is kept)."""

    def emit(self, kind: str, data: dict[str, Any]) -> None: ...


def iso_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def utc_now() -> datetime:
    return datetime.now(UTC)


def refusal_reason(info: ApprovalInfo) -> str:
    """Why an action whose approval ended ``info.state`` (anything but approved) is refused."""
    if info.state == "rejected":
        return f"rejected by {info.answered_by}" + (f": {info.answer_reason}" if info.answer_reason else "")
    if info.state == "withdrawn":
        return f"withdrawn: {info.answer_reason}"
    return info.answer_reason or f"the approval is {info.state}"


@dataclass(eq=False)
class Approval:
    """One approval: its public face (``info``, replaced on each change), its box, deadline and lock."""

    info: ApprovalInfo
    host: ApprovalHost
    deadline: float  # on the registry's clock
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    timer: asyncio.Task[Any] | None = None
    settled_at: float = 0.0


class ApprovalRegistry:
    """``wait_seconds`` is ``approval_wait``; ``clock`` (monotonic seconds) and ``now`` (UTC) are injectable."""

    def __init__(self, *, wait_seconds: float = limits.APPROVAL_WAIT.default,
                 clock: Callable[[], float] = time.monotonic, now: Callable[[], datetime] = utc_now) -> None:
        self.wait_seconds = wait_seconds
        self.clock = clock
        self.now = now
        self._approvals: dict[str, Approval] = {}  # by id, oldest first
        self._opened: dict[str, deque[float]] = {}  # box id -> when its last approvals opened

    # ---- reading ----------------------------------------------------------------------------
    def get(self, approval_id: str) -> ApprovalInfo:
        self._prune()
        approval = self._approvals.get(approval_id)
        if approval is None:
            raise ApprovalNotFound(f"approval {approval_id[:40]!r} not found; list them with: tkbox approvals")
        return approval.info

    def list(self, *, box_id: str | None = None, state: str | None = None) -> list[ApprovalInfo]:
        """Every pending approval and the answered ones still kept, oldest first."""
        self._prune()
        return [a.info for a in self._approvals.values()
                if (box_id is None or a.info.box_id == box_id) and (state is None or a.info.state == state)]

    def pending_count(self, box_id: str) -> int:
        return sum(1 for a in self._approvals.values() if a.info.box_id == box_id and a.info.pending)

    def forget_box(self, box_id: str) -> None:
        """Drop what is kept per box for a removed box (its rate window); its answered approvals stay listed until
        ``approvals_kept`` or ``approval_kept_time`` lets them go."""
        self._opened.pop(box_id, None)

    def boxes_tracked(self) -> int:
        """How many boxes have a rate window kept."""
        return len(self._opened)

    # ---- opening ----------------------------------------------------------------------------
    def open(self, host: ApprovalHost, **asked: Any) -> Approval:
        """A pending approval (event ``approval.pending``), expiring ``wait_seconds`` from now. ``asked``: the
        ``ApprovalInfo`` fields of the action (kind, asked, program, decision_id, rule_ids, reason, hint, context).
        Raises LimitReached, and opens nothing, past either per-box limit."""
        pending = self.pending_count(host.id)
        if pending >= limits.PENDING_APPROVALS_PER_BOX.default:
            raise LimitReached(limits.PENDING_APPROVALS_PER_BOX.refusal(
                f"{pending} approvals of box {host.name} wait for an answer, so this action is refused at once"),
                "answer the waiting ones (tkbox approvals), then run it again")
        opened = self._opened.setdefault(host.id, deque())
        while opened and opened[0] <= self.clock() - RATE_WINDOW:
            opened.popleft()
        if len(opened) >= limits.APPROVALS_PER_MINUTE.default:
            raise LimitReached(limits.APPROVALS_PER_MINUTE.refusal(
                f"box {host.name} opened {len(opened)} approvals in the last minute, so this action is refused at "
                "once"), "run it again in a minute")
        opened.append(self.clock())
        approval = self._new(host, asked)
        self._approvals[approval.info.id] = approval
        approval.timer = spawn(self._expire_later(approval), name=f"approval-expiry-{approval.info.id}")
        host.emit("approval.pending", {"approval": approval.info.to_json()})
        return approval

    async def approve_by_rule(self, host: ApprovalHost, rules: list[RememberedRule], **asked: Any) -> Approval:
        """An approval answered at once by remembered ``rules`` (no ``approval.pending``; listed once its record
        is kept, or once it is lost): approved, or ``lost`` when the signer did not keep the record."""
        approval = self._new(host, asked)  # nobody else knows it until it is settled (and listed)
        first = rules[0]
        by = f"remembered rule {', '.join(rule.id for rule in rules)} (approved by {first.by})"
        async with approval.lock:
            try:
                await self._record_and_settle(approval, "approve", by=by, reason="", answered_by=f"rule {first.id}",
                                              remembered_by=first.id)
            except RecordRefused:
                pass  # the approval is lost and says why; the host stopped the box
        return approval

    def _new(self, host: ApprovalHost, asked: dict[str, Any]) -> Approval:
        created = self.now()
        expires = created + timedelta(seconds=self.wait_seconds)
        info = ApprovalInfo(id=f"apr-{secrets.token_hex(8)}", box_id=host.id, box_name=host.name, state="pending",
                            created_at=iso_time(created), expires_at=iso_time(expires), **asked)
        return Approval(info, host, deadline=self.clock() + self.wait_seconds)

    # ---- answering ----------------------------------------------------------------------------
    async def answer(self, approval_id: str, answer: str, *, by: str, reason: str = "",
                     remember: bool = False) -> ApprovalInfo:
        """A person's answer (``approve`` or ``reject``): recorded, then the approval changes. Raises
        ApprovalNotFound, ApprovalConflict (answered or expired: nothing changes, nothing is recorded) or
        RecordRefused (the signer did not keep it: the approval is lost, the box stopped)."""
        self.get(approval_id)
        approval = self._approvals[approval_id]
        async with approval.lock:
            if approval.info.pending and self.clock() >= approval.deadline:
                await self._expire_locked(approval)  # its timer is late: the deadline is the host's, not the timer's
            if not approval.info.pending:
                raise self._conflict(approval.info)
            await self._record_and_settle(approval, answer, by=by, reason=reason, answered_by=by,
                                          remember=remember and answer == "approve")
        return approval.info

    @staticmethod
    def _conflict(info: ApprovalInfo) -> ApprovalConflict:
        if info.state == "expired":
            return ApprovalConflict("approval_expired", f"approval {info.id} expired at {info.answered_at}; nothing "
                                                        "changed")
        if info.state in ("approved", "rejected"):
            return ApprovalConflict("approval_answered", f"approval {info.id} was already {info.state} by "
                                                         f"{info.answered_by} at {info.answered_at}; nothing changed")
        return ApprovalConflict("approval_answered", f"approval {info.id} was already {info.state} at "
                                                     f"{info.answered_at} ({info.answer_reason}); nothing changed")

    async def wait(self, approval: Approval) -> ApprovalInfo:
        """The approval once it is answered; by the host's own deadline (its expiry plus the time to record it)
        at the latest, after which it is ``lost``."""
        remaining = max(0.0, approval.deadline - self.clock())
        try:
            await asyncio.wait_for(approval.settled.wait(), remaining + RECORD_DEADLINE)
        except TimeoutError:
            self._settle(approval, "lost", answer_reason=f"no answer could be recorded by the host's deadline "
                         f"({self.wait_seconds:g} s, and {RECORD_DEADLINE:g} s to record it)")
        return approval.info

    async def withdraw(self, approval: Approval, reason: str) -> None:
        """The action no longer waits (its requester went, its box stops): answered ``withdraw``, recorded."""
        await self._answer_by_host(approval, "withdraw", reason)

    async def withdraw_box(self, box_id: str, reason: str) -> None:
        for approval in [a for a in self._approvals.values() if a.info.box_id == box_id and a.info.pending]:
            await self.withdraw(approval, reason)

    async def lose_all(self, reason: str) -> None:
        """The daemon stops: every pending approval is answered ``lost``, recorded while the runs are open."""
        pending = [a for a in self._approvals.values() if a.info.pending]
        await asyncio.gather(*(self._answer_by_host(a, "lost", reason) for a in pending))

    async def expire_due(self) -> None:
        """Expire every pending approval whose deadline has passed (the timers do this; so can a caller)."""
        for approval in [a for a in self._approvals.values() if a.info.pending and a.deadline <= self.clock()]:
            async with approval.lock:
                await self._expire_locked(approval)

    async def _expire_later(self, approval: Approval) -> None:
        await asyncio.sleep(max(0.0, approval.deadline - self.clock()))
        async with approval.lock:
            await self._expire_locked(approval)

    async def _expire_locked(self, approval: Approval) -> None:
        if not approval.info.pending:
            return
        reason = (f"no one answered approval {approval.info.id} within {self.wait_seconds:g} s, so the action was "
                  "refused; run it again and answer the new approval before it expires: tkbox approve ID "
                  "(tkbox approvals lists them)")
        try:
            await self._record_and_settle(approval, "expire", by=HOST_ANSWERER, reason=reason)
        except RecordRefused:
            pass  # lost, and the box stopped: the action is refused either way

    async def _answer_by_host(self, approval: Approval, answer: str, reason: str) -> None:
        async with approval.lock:
            if not approval.info.pending:
                return
            try:
                await self._record_and_settle(approval, answer, by=HOST_ANSWERER, reason=reason)
            except RecordRefused:
                pass

    async def _record_and_settle(self, approval: Approval, answer: str, *, by: str, reason: str,
                                 answered_by: str = "", remember: bool = False, remembered_by: str = "") -> None:
        """Record first; only a kept record changes the approval.  Called with the approval's lock held."""
        try:
            await approval.host.record(approval.info, answer, by, reason)
        except RecordRefused as refused:
            why = (f"the signer did not keep the record of this answer ({answer}: {refused}); the action was refused "
                   f"and box {approval.host.name} stopped")
            self._settle(approval, "lost", answered_by=answered_by, answer_reason=why)
            await approval.host.lose(f"approval {approval.info.id}: the record of its answer ({answer}) was "
                                     f"refused: {refused}")
            raise
        if remember:
            approval.host.remember(approval.info, by)
        self._settle(approval, STATE_OF_ANSWER[answer], answered_by=answered_by, answer_reason=reason,
                     remember=remember, remembered_by=remembered_by)

    def _settle(self, approval: Approval, state: str, *, answered_by: str = "", answer_reason: str = "",
                remember: bool = False, remembered_by: str = "") -> None:
        if not approval.info.pending:
            return
        approval.info = replace(approval.info, state=state, answered_at=iso_time(self.now()), answered_by=answered_by,
                                answer_reason=answer_reason, remember=remember, remembered_by=remembered_by)
        approval.settled_at = self.clock()
        approval.settled.set()
        self._approvals.setdefault(approval.info.id, approval)  # an approval answered at once is listed from now
        if approval.timer is not None and approval.timer is not asyncio.current_task():
            approval.timer.cancel()
        kind = "approval.expired" if state == "expired" else "approval.answered"
        approval.host.emit(kind, {"approval": approval.info.to_json()})
        self._prune()

    def _prune(self) -> None:
        """Forget answered approvals past ``approval_kept_time``, then all but the ``approvals_kept`` last answered."""
        too_old = self.clock() - limits.APPROVAL_KEPT_TIME.default
        answered = sorted((a for a in self._approvals.values() if not a.info.pending), key=lambda a: a.settled_at)
        excess = len(answered) - limits.APPROVALS_KEPT.default
        for index, approval in enumerate(answered):
            if index < excess or approval.settled_at < too_old:
                del self._approvals[approval.info.id]
