"""App-wide console Messages: facts from the daemon (past tense) and results of client calls made in workers."""

from __future__ import annotations

from dataclasses import dataclass, field

import rich.repr
from textual.message import Message

from tkbox_daemon.wire import BoxInfo


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


@dataclass
class BoxesLoaded(Message):
    """A full list of boxes arrived from the daemon (at start and after every reconnect)."""

    boxes: list[BoxInfo]


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


@dataclass
class ExecOutputReceived(Message):
    """Text for the exec panel: process output, or a line saying what the daemon decided."""

    text: str
    stream: str = "stdout"


@dataclass
class ExecEnded(Message):
    """The exec in the panel is over (exit, denial or a failed call)."""

    summary: str
    exit_code: int | None = None
    extra: dict[str, object] = field(default_factory=dict)


@dataclass
class ThemesReloaded(Message):
    """User theme files changed on disk and were loaded again."""

    names: list[str]
    broken: list[str]
