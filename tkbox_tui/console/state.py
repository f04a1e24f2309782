"""``ConsoleState``: what the console shows, as a pure reducer over daemon events (no Textual, no I/O).

Boxes are kept by id; events live in a bounded ring (the daemon keeps the full history); a filter (box, kind
prefix and a regular expression over every field of the event, optionally inverted) chooses which events the log
shows; following can be paused, and events arriving meanwhile are counted ("+N new").
Applying an event twice is harmless: events at or below the last sequence number seen are ignored.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tkbox_daemon.wire import BoxInfo, Event

from .event_lines import LogEntry
from .filter_pattern import FilterError, FilterPattern, compile_pattern
from .present import event_line, event_search_text

DEFAULT_EVENT_RING = 5_000

# Which box state each lifecycle event means (other kinds leave the state alone).
STATE_BY_KIND = {
    "box.created": "creating",
    "box.started": "running",
    "box.stopped": "stopped",
    "box.failed": "failed",
    "box.held": "held",
    "box.released": "running",
    "box.lost": "lost",
    "box.removed": "removed",
}
OLDER_ROOM = 4
"""The log holds at most this many times ``event_ring`` events once the operator pages back (``take_older``)."""
NAMES_KEPT = 10_000  # box names remembered by id, removed boxes included (their events keep showing the name)


def _trim(text: str) -> str:
    """``text`` without surrounding whitespace, but keeping a trailing whitespace character escaped by ``\\``."""
    body = text.strip()
    backslashes = len(body) - len(body.rstrip("\\"))
    if backslashes % 2 and len(body) < len(text.lstrip()):
        return text.lstrip()[: len(body) + 1]
    return body


@dataclass(frozen=True)
class EventFilter:
    """Which events the log shows.

    An event matches when every part that is set matches: ``box`` (its id or name), ``kind`` (a prefix of its kind)
    and ``text``, a case-insensitive regular expression searched in every field of the event, spelled as its log
    line spells them but not cut (``present.event_search_text``).  ``inverted``
    shows the events that do not match instead.  Build one with ``parse``; the constructor checks ``text`` too.
    """

    box: str = ""
    kind: str = ""
    text: str = ""
    inverted: bool = False
    regex: FilterPattern | None = field(init=False, default=None, repr=False, compare=False)
    """``text`` compiled (None without text)."""

    def __post_init__(self) -> None:
        if self.text:
            object.__setattr__(self, "regex", compile_pattern(self.text))

    @classmethod
    def parse(cls, query: str) -> EventFilter:
        """``[!] [box:NAME] [kind:PREFIX] [regex]`` — any part may be left out; a leading ``!`` inverts it all.

        Words starting with ``box:`` or ``kind:`` may stand anywhere; the rest, spacing kept, is the regex (a
        trailing space escaped as ``\\ `` stays part of it).
        Raises ``FilterError`` for a bad or too long regex, and for a ``!`` with nothing to invert.
        """
        text = query.lstrip()
        inverted = text.startswith("!")
        if inverted:
            text = text[1:].lstrip()
        box = kind = ""
        kept: list[str] = []
        pieces = re.split(r"(\s+)", text)  # word, whitespace, word, …, word
        for index in range(0, len(pieces), 2):
            word, after = pieces[index], "".join(pieces[index + 1:index + 2])
            if word.startswith("box:"):
                box = word[4:]
            elif word.startswith("kind:"):
                kind = word[5:]
            else:
                kept.append(word + after)
        pattern = _trim("".join(kept))
        if inverted and not (box or kind or pattern):
            raise FilterError("'!' inverts a filter and needs one after it, e.g. !kind:exec or !denied")
        return cls(box, kind, pattern, inverted)

    @property
    def active(self) -> bool:
        return bool(self.box or self.kind or self.text or self.inverted)

    @property
    def highlight(self) -> FilterPattern | None:
        """What the log highlights in the lines it shows: the regex, unless inverted (shown lines lack it)."""
        return None if self.inverted else self.regex

    def matches(self, event: Event, box_name: str | None, line: str | None = None) -> bool:
        """Whether ``event`` (of the box named ``box_name``, if known) matches, before any inversion; ``line`` is
        its search text (``event_search_text``) when the caller has formatted it already."""
        if self.box and self.box not in (event.box_id, box_name):
            return False
        if self.kind and not event.kind.startswith(self.kind):
            return False
        if self.regex is None:
            return True
        return self.regex.search(event_search_text(event, box_name) if line is None else line) is not None

    def shows(self, event: Event, box_name: str | None, line: str | None = None) -> bool:
        """Whether the log shows ``event`` under this filter (``matches``, flipped when inverted)."""
        return self.matches(event, box_name, line) != self.inverted

    def describe(self) -> str:
        """The filter as text that ``parse`` reads back (``!box:web kind:exec curl.*evil``); empty when none.

        A pattern that starts with a literal ``!`` and comes first is written ``\\!``, so it is not read as ``!``.
        """
        parts = [f"box:{self.box}"] * bool(self.box) + [f"kind:{self.kind}"] * bool(self.kind)
        text = "\\" + self.text if self.text.startswith("!") and not (parts or self.inverted) else self.text
        return "!" * self.inverted + " ".join(parts + ([text] if text else []))


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
    disconnect_hint: str = ""
    selected_box_id: str | None = None
    scope_to_selected: bool = False
    box_names: dict[str, str] = field(default_factory=dict)
    """Every box name seen, by id, kept after the box is gone (its events still show its name, not its id)."""
    listed_through: int = 0
    """The daemon's last sequence number when the box list in force was asked for: that list already holds what
    every event up to it did, so such an event (a reconnect replays them) never adds or changes a row."""
    older_available: bool = False
    """The daemon keeps events older than the oldest the console holds (``log.older`` asks for a page of them)."""
    first_kept: int = 0
    """The oldest sequence number the daemon still keeps, as its last page said (0: not known)."""

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

    def take_older(self, page: Iterable[Event]) -> list[Event]:
        """Put a page of events older than every one held in front of them (the operator paged back); returns those
        taken, oldest first.  The log grows by them up to ``OLDER_ROOM`` times ``ring_size``; past that the newest of
        the page that fit are taken.  Older events change no box (the box list is newer); their names are kept."""
        oldest = self.events[0].seq if self.events else self.last_seq + 1
        older = [event for event in page if event.seq < oldest]
        room = max(0, self.ring_size * OLDER_ROOM - len(self.events))
        taken = older[len(older) - room:] if len(older) > room else older
        if not taken:
            return []
        self.events = deque([*taken, *self.events], maxlen=max(self.ring_size, len(self.events) + len(taken)))
        self.events_seen += len(taken)
        for event in taken:
            if event.kind == "box.created" and isinstance(event.data.get("name"), str) \
                    and event.box_id not in self.box_names:
                self._remember_name(event.box_id, event.data["name"])
        return taken

    @property
    def room_for_older(self) -> bool:
        """Whether the log may take another page of older events."""
        return len(self.events) < self.ring_size * OLDER_ROOM

    def _apply_to_box(self, event: Event) -> None:
        if not event.box_id:
            return
        if event.kind == "box.created" and isinstance(event.data.get("name"), str):
            self._remember_name(event.box_id, event.data["name"])
        if event.seq <= self.listed_through:
            return  # the box list is newer: a box the daemon no longer knows must not come back as a ghost row
        box = self.boxes.get(event.box_id)
        if box is None:
            if event.kind != "box.created":
                return
            box = BoxInfo(id=event.box_id, name=str(event.data.get("name", event.box_id)), state="creating",
                          image=str(event.data.get("image", "")), workspace=str(event.data.get("workspace", "")),
                          created_at=event.time, expires_at="", run_id=None, recorded=False)
        changes: dict[str, object] = {}
        if box.last_event != event.kind:
            changes["last_event"] = event.kind
        if event.kind in STATE_BY_KIND and box.state != STATE_BY_KIND[event.kind]:
            changes["state"] = STATE_BY_KIND[event.kind]
        if changes or event.box_id not in self.boxes:  # a copy only for a change: most events change nothing here
            self.boxes[event.box_id] = replace(box, **changes)

    # -- boxes ------------------------------------------------------------------------------------------

    def set_boxes(self, boxes: list[BoxInfo], listed_through: int | None = None) -> None:
        """A full list from the daemon replaces ours (boxes it no longer knows are gone); ``listed_through`` is the
        daemon's last sequence number from just before the list was asked for (see ``listed_through``)."""
        self.boxes = {box.id: box for box in boxes}
        for box in boxes:
            self._remember_name(box.id, box.name)
        if listed_through is not None:
            self.listed_through = listed_through
        if self.selected_box_id not in self.boxes:
            self.selected_box_id = next(iter(self.boxes), None)

    def update_box(self, box: BoxInfo) -> None:
        self.boxes[box.id] = box
        self._remember_name(box.id, box.name)

    def forget_box(self, box_id: str) -> None:
        """Drop a box's row (removed, or unknown to the daemon); its name stays for its events."""
        self.boxes.pop(box_id, None)
        if self.selected_box_id == box_id:
            self.selected_box_id = next(iter(self.boxes), None)

    def _remember_name(self, box_id: str, name: str) -> None:
        self.box_names.pop(box_id, None)
        self.box_names[box_id] = name
        if len(self.box_names) > NAMES_KEPT:
            del self.box_names[next(iter(self.box_names))]

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
        if self._outside_scope(event):
            return False
        return not self.event_filter.active or self.event_filter.shows(event, self._box_name(event))

    def shown_entries(self, events: Iterable[Event]) -> list[LogEntry]:
        """Those of ``events`` that the log shows, each with its box's name as known now (``EventLines`` formats
        a line from it once drawn).  Only a regular expression makes this format anything: the text it searches
        (``event_search_text``: every field in full; the line drawn is cut)."""
        if not self.event_filter.active and not self.scope_to_selected:
            return [(event, self._box_name(event)) for event in events]  # everything: nothing to decide
        entries = []
        rule = self.event_filter
        for event in events:
            if self._outside_scope(event):
                continue
            name = self._box_name(event)
            if not rule.active or rule.shows(event, name):
                entries.append((event, name))
        return entries

    def shown_lines(self, events: Iterable[Event]) -> list[str]:
        """The log lines of those of ``events`` that the log shows."""
        return [event_line(event, name) for event, name in self.shown_entries(events)]

    def _outside_scope(self, event: Event) -> bool:
        return bool(self.scope_to_selected and self.selected_box_id and event.box_id != self.selected_box_id)

    def _box_name(self, event: Event) -> str | None:
        box = self.boxes.get(event.box_id)
        return box.name if box else self.box_names.get(event.box_id)

    def pause(self) -> None:
        if self.following:
            self.following = False
            self.new_while_paused = 0

    def follow(self) -> None:
        self.following = True
        self.new_while_paused = 0

    def set_connected(self, connected: bool, reason: str = "", hint: str = "") -> None:
        self.connected = connected
        self.disconnect_reason = "" if connected else reason
        self.disconnect_hint = "" if connected else hint
