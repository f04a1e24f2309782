"""``ConsoleState``: what the console shows, as a pure reducer over daemon events (no Textual, no I/O).

Boxes are kept by id; events live in a bounded ring (the daemon keeps the full history); a filter chooses
which events the log shows; following can be paused, and events arriving meanwhile are counted ("+N new").
Applying an event twice is harmless: events at or below the last sequence number seen are ignored.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from tkbox_daemon.wire import BoxInfo, Event

DEFAULT_EVENT_RING = 5_000

# Which box state each lifecycle event means (other kinds leave the state alone).
STATE_BY_KIND = {
    "box.created": "creating",
    "box.started": "running",
    "box.stopped": "stopped",
    "box.failed": "failed",
    "box.held": "held",
    "box.released": "running",
    "box.removed": "removed",
}


@dataclass(frozen=True)
class EventFilter:
    """Which events the log shows: all of ``box``/``kind``/``text`` that are set must match."""

    box: str = ""
    kind: str = ""
    text: str = ""

    @classmethod
    def parse(cls, query: str) -> EventFilter:
        """``box:NAME kind:PREFIX free text`` — any part may be left out."""
        box = kind = ""
        words: list[str] = []
        for word in query.split():
            if word.startswith("box:"):
                box = word[4:]
            elif word.startswith("kind:"):
                kind = word[5:]
            else:
                words.append(word)
        return cls(box, kind, " ".join(words).lower())

    @property
    def active(self) -> bool:
        return bool(self.box or self.kind or self.text)

    def describe(self) -> str:
        parts = [f"box:{self.box}"] * bool(self.box) + [f"kind:{self.kind}"] * bool(self.kind)
        return " ".join(parts + ([self.text] if self.text else []))


@dataclass
class ConsoleState:
    """The console's model; ``apply`` is the only way events change it."""

    ring_size: int = DEFAULT_EVENT_RING
    boxes: dict[str, BoxInfo] = field(default_factory=dict)
    events: deque[Event] = field(init=False)
    last_seq: int = 0
    events_seen: int = 0
    event_filter: EventFilter = field(default_factory=EventFilter)
    following: bool = True
    new_while_paused: int = 0
    connected: bool = False
    disconnect_reason: str = ""
    selected_box_id: str | None = None
    scope_to_selected: bool = False

    def __post_init__(self) -> None:
        self.events = deque(maxlen=self.ring_size)

    # -- events -----------------------------------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        """Take one event; returns False (and changes nothing) for one already seen."""
        if event.seq <= self.last_seq:
            return False
        self.last_seq = event.seq
        self.events_seen += 1
        self.events.append(event)
        self._apply_to_box(event)
        if not self.following and self.shows(event):
            self.new_while_paused += 1
        return True

    def _apply_to_box(self, event: Event) -> None:
        if not event.box_id:
            return
        box = self.boxes.get(event.box_id)
        if box is None:
            if event.kind != "box.created":
                return
            box = BoxInfo(id=event.box_id, name=str(event.data.get("name", event.box_id)), state="creating",
                          image=str(event.data.get("image", "")), workspace=str(event.data.get("workspace", "")),
                          created_at=event.time, expires_at="", run_id=None, recorded=False)
        changes: dict[str, object] = {"last_event": event.kind}
        if event.kind in STATE_BY_KIND:
            changes["state"] = STATE_BY_KIND[event.kind]
        self.boxes[event.box_id] = replace(box, **changes)

    # -- boxes ------------------------------------------------------------------------------------------

    def set_boxes(self, boxes: list[BoxInfo]) -> None:
        """A full list from the daemon replaces ours (boxes it no longer knows are gone)."""
        self.boxes = {box.id: box for box in boxes}
        if self.selected_box_id not in self.boxes:
            self.selected_box_id = next(iter(self.boxes), None)

    def update_box(self, box: BoxInfo) -> None:
        self.boxes[box.id] = box

    def find_box(self, ref: str) -> BoxInfo | None:
        """A box by id or name."""
        if ref in self.boxes:
            return self.boxes[ref]
        return next((box for box in self.boxes.values() if box.name == ref), None)

    @property
    def selected_box(self) -> BoxInfo | None:
        return self.boxes.get(self.selected_box_id) if self.selected_box_id else None

    # -- the log's view ---------------------------------------------------------------------------------

    def shows(self, event: Event) -> bool:
        """Whether the log shows ``event`` under the filter and the box scope."""
        if self.scope_to_selected and self.selected_box_id and event.box_id != self.selected_box_id:
            return False
        rule = self.event_filter
        if rule.box:
            box = self.boxes.get(event.box_id)
            if rule.box not in (event.box_id, box.name if box else None):
                return False
        if rule.kind and not event.kind.startswith(rule.kind):
            return False
        if rule.text:
            box = self.boxes.get(event.box_id)
            haystack = f"{event.kind} {box.name if box else event.box_id} {event.data}".lower()
            if rule.text not in haystack:
                return False
        return True

    def visible_events(self) -> list[Event]:
        return [event for event in self.events if self.shows(event)]

    def pause(self) -> None:
        if self.following:
            self.following = False
            self.new_while_paused = 0

    def follow(self) -> None:
        self.following = True
        self.new_while_paused = 0

    def set_connected(self, connected: bool, reason: str = "") -> None:
        self.connected = connected
        self.disconnect_reason = "" if connected else reason
