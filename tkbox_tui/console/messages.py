"""App-wide console Messages: facts from the daemon (past tense) and results of client calls made in workers."""

from __future__ import annotations

from dataclasses import dataclass, field

import rich.repr
from textual.message import Message

from tkbox_daemon.wire import ApprovalInfo, BoxInfo, EventPage
from tkbox_daemon.wire_apply import ApplyReport


@rich.repr.auto
@dataclass
class EventsPending(Message):
    """The event worker put new events in the inbox; the App drains it.  Floods collapse to one message."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EventsPending)


@dataclass
class ConnectionChanged(Message):
    """The event stream connected to, or lost, the daemon."""

    connected: bool
    reason: str = ""
    hint: str = ""
    """What to do about it (``DaemonError.extra["hint"]``: with no daemon, how to start one)."""


@dataclass
class OlderEventsLoaded(Message):
    """A page of events older than the oldest the log holds arrived (the operator paged back)."""

    page: EventPage


@dataclass
class BoxesLoaded(Message):
    """A full list of boxes arrived from the daemon (at start and after every reconnect); ``listed_through`` is the
    daemon's last sequence number from just before it was asked for (``ConsoleState.listed_through``)."""

    boxes: list[BoxInfo]
    listed_through: int | None = None


@dataclass
class BoxRefreshed(Message):
    """One box's current description arrived from the daemon (after events touched it, or an action)."""

    box: BoxInfo


@dataclass
class BoxActionFinished(Message):
    """A create, stop or remove call returned: ``error`` is empty on success."""

    action: str
    box_ref: str
    box: BoxInfo | None = None
    error: str = ""
    error_field: str = ""
    error_code: str = ""


@dataclass
class ExecOutputReceived(Message):
    """Text for the exec panel: process output, or a line saying what the daemon decided."""

    text: str
    stream: str = "stdout"
    box_id: str = ""
    """The box whose exec it is: the panel shows only its own box's text."""


@dataclass
class ExecEnded(Message):
    """The exec in the panel is over (exit, denial or a failed call)."""

    summary: str
    exit_code: int | None = None
    extra: dict[str, object] = field(default_factory=dict)
    box_id: str = ""


@dataclass
class ThemesReloaded(Message):
    """User theme files changed on disk and were loaded again."""

    names: list[str]
    broken: list[str]


@dataclass
class ApprovalsLoaded(Message):
    """The daemon's list of approvals arrived (at start and after every reconnect, right after ``BoxesLoaded``);
    ``approvals`` is None when the daemon has no approvals API (an older daemon)."""

    approvals: list[ApprovalInfo] | None
    listed_through: int | None = None


@dataclass
class ApprovalAnswered(Message):
    """The daemon took an answer this console sent; ``approval`` is the answered approval as the daemon returned it.
    ``quiet``: one of an "approve all", which says how it went in one notification."""

    approval: ApprovalInfo
    quiet: bool = False


@dataclass
class ApprovalAnswerFailed(Message):
    """The daemon refused an answer this console sent (already answered, expired, record refused, …)."""

    approval_id: str
    answer: str
    code: str
    message: str
    quiet: bool = False


@dataclass
class ApprovalRefreshed(Message):
    """One approval as the daemon describes it now (read after an answer was refused as already answered)."""

    approval: ApprovalInfo


@dataclass
class ApprovalsBulkAnswered(Message):
    """An "approve all" is done: how many the daemon took, and why each of the others was refused."""

    approved: int
    refused: list[str]



@dataclass
class PatchApplyHeld(Message):
    """A file of an apply this console started waits for a person (its approval's prompt opens from the event
    stream's ``approval.pending``, as every approval's does)."""

    box_id: str
    path: str
    approval_id: str


@dataclass
class PatchApplied(Message):
    """An apply this console started ended with the daemon's report (applied, refused or partial)."""

    box_id: str
    report: ApplyReport


@dataclass
class PatchApplyFailed(Message):
    """An apply this console started got no report: the daemon refused the request, or the connection was lost
    (nothing held is written then)."""

    box_id: str
    message: str
    hint: str = ""
