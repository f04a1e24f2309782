"""Pieces of the daemon event stream handling that need no Textual: reconnect backoff, the event inbox, and the
box list and approvals list each (re)connection starts from.

The App's one ``daemon-events`` worker puts events in an ``EventInbox``; the App drains it in one go per
message, so a burst of thousands of events costs one message and one render, not thousands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tkbox_daemon.wire import ApprovalInfo, BoxInfo, Event

from ..client import DaemonError
from .client_protocol import ConsoleClient

# The worker yields to the UI after this many events in a row, so keys are handled during a burst.
YIELD_EVERY = 200


@dataclass
class Backoff:
    """Delays between reconnect attempts: ``initial``, doubling up to ``maximum``; ``reset`` after a success."""

    initial: float = 0.25
    maximum: float = 5.0
    current: float = field(init=False)

    def __post_init__(self) -> None:
        self.current = self.initial

    def next_delay(self) -> float:
        delay = self.current
        self.current = min(self.maximum, max(self.current * 2, self.initial))
        return delay

    def reset(self) -> None:
        self.current = self.initial


@dataclass
class EventInbox:
    """Events the worker received and the App has not taken yet, deduplicated by sequence number.

    ``after`` is the resume point: the highest seq received, which the worker passes to ``events(after=…)``.
    """

    after: int = 0
    pending: list[Event] = field(default_factory=list)
    signalled: bool = False
    duplicates_dropped: int = 0

    def put(self, event: Event) -> bool:
        """Keep ``event`` unless already seen; returns True when the App must be told (first since a drain)."""
        if event.seq <= self.after:
            self.duplicates_dropped += 1
            return False
        self.after = event.seq
        self.pending.append(event)
        if self.signalled:
            return False
        self.signalled = True
        return True

    def drain(self) -> list[Event]:
        taken, self.pending = self.pending, []
        self.signalled = False
        return taken


async def fetch_box_list(client: ConsoleClient) -> tuple[list[BoxInfo], int | None]:
    """The daemon's boxes, and its last sequence number asked for just before them: every event up to that number
    is already in the list (``ConsoleState.listed_through``), so replaying those events cannot bring back a box
    the daemon no longer knows.  The number is None when the daemon does not give one."""
    health = await client.health()
    last_seq = health.get("last_seq") if isinstance(health, dict) else None
    boxes = await client.boxes()
    return boxes, last_seq if type(last_seq) is int and last_seq >= 0 else None


async def fetch_approvals(client: ConsoleClient) -> list[ApprovalInfo] | None:
    """The daemon's approvals (every pending one and those answered lately), asked right after the box list, so the
    same last sequence number covers both; None from a daemon without the approvals API (its routes answer 404),
    whose boxes' own counts then stand.  Any other failure is the stream's: the worker reconnects."""
    try:
        return await client.approvals()
    except DaemonError as exc:
        if exc.status == 404 and exc.code != "not_found":
            return None
        raise
