"""``ApprovalsState``: the approvals the console knows, as a pure reducer over the daemon's approval events and its
``GET /v1/approvals`` list (no Textual, no I/O).

Pending approvals stay until the daemon says how they ended (``approval.answered`` / ``approval.expired``, or an
answer this console sent).  Answered, expired, withdrawn and lost ones stay visible, marked, for ``KEEP_SETTLED``
seconds after they settled, then drop.  An approval never goes back to pending: a replayed ``approval.pending``
after its answer changes nothing.  Like the box list, the approvals list is asked for with the daemon's last
sequence number just before it (``listed_through``): events up to that number are already in the list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tkbox_daemon.wire import ApprovalInfo, Event

from .present import parse_time

KEEP_SETTLED = 300.0
"""Seconds an answered, expired, withdrawn or lost approval stays in the inbox after it settled."""
APPROVAL_KINDS = frozenset({"approval.pending", "approval.answered", "approval.expired"})
"""Events whose ``data["approval"]`` is an ``ApprovalInfo``."""
RULE_KINDS = frozenset({"approval.rule_added", "approval.rule_removed"})
"""Events that change a box's remembered rules (``BoxInfo.remembered``)."""


def approval_of(event: Event) -> ApprovalInfo | None:
    """The approval an approval event carries, or None (another kind, or a payload that is not an approval)."""
    if event.kind not in APPROVAL_KINDS:
        return None
    try:
        return ApprovalInfo.from_json(event.data.get("approval"))
    except ValueError:
        return None


@dataclass
class ApprovalsState:
    """Approvals by id, in the order they were asked for (``created_at``, then id)."""

    keep_settled: float = KEEP_SETTLED
    approvals: dict[str, ApprovalInfo] = field(default_factory=dict)
    settled_at: dict[str, datetime] = field(default_factory=dict)
    """When each settled approval settled (its answer's time, else when this console learnt of it)."""
    listed_through: int = 0
    synced: bool = False
    """Whether the daemon's list was read (an older daemon without the approvals API gives none): only then are
    the per-box counts this state's rather than the daemon's ``BoxInfo.approvals_pending``."""
    malformed: int = 0
    """Approval events whose payload was not an approval (not shown; counted)."""

    # -- changes ----------------------------------------------------------------------------------------

    def apply(self, event: Event, now: datetime) -> ApprovalInfo | None:
        """Take one approval event; returns the approval when it changed what the console knows."""
        if event.kind not in APPROVAL_KINDS or event.seq <= self.listed_through:
            return None
        info = approval_of(event)
        if info is None:
            self.malformed += 1
            return None
        return info if self.take(info, now) else None

    def take(self, info: ApprovalInfo, now: datetime) -> bool:
        """Take what the daemon says of one approval (an event, or an answer's reply); False when nothing changed
        (the same, or a pending state for one already settled)."""
        known = self.approvals.get(info.id)
        if known == info or (known is not None and not known.pending and info.pending):
            return False
        out_of_order = known is None and self.approvals and _order(info) < _order(next(reversed(self.approvals.values())))
        self.approvals[info.id] = info
        if not info.pending:
            self.settled_at.setdefault(info.id, _settled_time(info) or now)
        if out_of_order:
            self._sort()
        return True

    def set_all(self, approvals: list[ApprovalInfo], listed_through: int | None, now: datetime) -> None:
        """The daemon's list replaces ours: approvals it no longer keeps are gone (a restarted daemon lost them)."""
        self.approvals = {info.id: info for info in approvals}
        self._sort()
        self.settled_at = {info.id: self.settled_at.get(info.id) or _settled_time(info) or now
                           for info in approvals if not info.pending}
        if listed_through is not None:
            self.listed_through = listed_through
        self.synced = True

    def prune(self, now: datetime) -> bool:
        """Drop approvals settled more than ``keep_settled`` seconds before ``now``; returns whether any went."""
        limit = now - timedelta(seconds=self.keep_settled)
        gone = [approval_id for approval_id, settled in self.settled_at.items() if settled < limit]
        for approval_id in gone:
            del self.settled_at[approval_id]
            self.approvals.pop(approval_id, None)
        return bool(gone)

    def _sort(self) -> None:
        self.approvals = dict(sorted(self.approvals.items(), key=lambda item: _order(item[1])))

    # -- views ------------------------------------------------------------------------------------------

    @property
    def ordered(self) -> list[ApprovalInfo]:
        """Every approval kept, oldest first (settled ones stay where they were, marked)."""
        return list(self.approvals.values())

    @property
    def pending(self) -> list[ApprovalInfo]:
        """The pending approvals, oldest first."""
        return [info for info in self.approvals.values() if info.pending]

    def pending_count(self, box_id: str | None = None) -> int:
        return sum(1 for info in self.approvals.values() if info.pending and box_id in (None, info.box_id))

    def get(self, approval_id: str) -> ApprovalInfo | None:
        return self.approvals.get(approval_id)


def _order(info: ApprovalInfo) -> tuple[str, str]:
    return (info.created_at, info.id)


def _settled_time(info: ApprovalInfo) -> datetime | None:
    """When a settled approval settled, by the daemon's word: its answer's time, else (expired) its expiry."""
    settled = parse_time(info.answered_at) or (parse_time(info.expires_at) if info.state == "expired" else None)
    return settled.replace(tzinfo=UTC) if settled is not None and settled.tzinfo is None else settled
