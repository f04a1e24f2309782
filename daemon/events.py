"""The daemon's event stream: one daemon-wide sequence, kept on disk, replayable from any point without blocking.

``emit`` assigns the next sequence number, writes the event's line once (compact JSON) and appends it to the
daemon's history (``event_history``), to the box's own ``events.jsonl`` (capped at ``events_file``), to a memory
ring sized for live fan-out only (``RING_EVENTS`` events and ``RING_BYTES`` bytes at most), and to every
subscriber's bounded queue.  A reader after sequence N (``batches``) gets every later event exactly once: from
the history files, read in a thread in bounded chunks, until the ring reaches back to where it is; then from the
ring and live.  A subscriber that falls more than ``SUBSCRIBER_QUEUE`` events behind is not cut off: it goes back
to the files and catches up from its own position.  The stored lines are sent as they are, never parsed again.
The sequence continues across daemon restarts (the history's last number is read when the daemon starts).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from .event_history import EventHistory, HistoryFile, HistoryReader, StoredEvent, read_page
from .limits import EVENT_LINE, EVENTS_FILE, EVENTS_HISTORY, MIB
from .wire import EVENT_KINDS, Event

T = TypeVar("T")
RING_EVENTS = 8192
"""Events the memory ring keeps for live fan-out (older ones are read from the history files)."""
RING_BYTES = 8 * MIB
"""Bytes of stored lines the memory ring keeps at most, whatever their number."""
SUBSCRIBER_QUEUE = 4096
"""Live events one subscriber may have waiting; past it the subscriber catches up from the files instead."""
REMOVED_NAMES_KEPT = 1024
"""Names of removed boxes the bus still resolves to their ids (``tkbox events NAME`` after ``tkbox rm NAME``)."""
HISTORY_THREADS = 2
_SHUT_DOWN = None
_OVERFLOW = object()


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_line(event: Event) -> bytes:
    """The event as the history stores it (no newline): compact JSON, keys in the wire's order; an event whose line
    would pass ``event_line`` keeps its fields but its data says only how large it was."""
    line = json.dumps(event.to_json(), separators=(",", ":"), ensure_ascii=False).encode()
    if len(line) <= EVENT_LINE.default:
        return line
    note = {"omitted": EVENT_LINE.refusal(f"this event's line was {len(line)} bytes")}
    trimmed = Event(event.seq, event.time, event.box_id, event.kind, note)
    return json.dumps(trimmed.to_json(), separators=(",", ":"), ensure_ascii=False).encode()


class EventBus:
    def __init__(self, state_dir: Path, *, clock: Callable[[], str] = now_text,
                 history_file_limit: int = EVENTS_HISTORY.default) -> None:
        self.state_dir = state_dir
        self.clock = clock
        self.history = EventHistory(state_dir, file_limit=history_file_limit)
        self.last_seq = 0
        self._ring: deque[StoredEvent] = deque()
        self._ring_bytes = 0
        self._subscribers: set[asyncio.Queue[Any]] = set()
        self._box_files: dict[str, tuple[int, int]] = {}  # box id -> (fd, bytes written)
        self._box_dirs: dict[str, Path] = {}
        self._removed_names: OrderedDict[str, str] = OrderedDict()  # name -> id of boxes removed lately
        self._threads: ThreadPoolExecutor | None = None
        self._streams_closed = False  # set by close_subscribers: a reader still catching up ends too

    @property
    def path(self) -> Path:
        """The current history file (``events.jsonl``)."""
        return self.history.path

    def open(self) -> None:
        """Index the history and continue its sequence.  Reads the files through once: run it off the event loop."""
        self.last_seq = self.history.open()

    # ---- writing ----------------------------------------------------------------------------------------

    def emit(self, box_id: str, kind: str, data: dict[str, Any] | None = None) -> Event:
        assert kind in EVENT_KINDS, kind
        self.last_seq += 1
        event = Event(self.last_seq, self.clock(), box_id, kind, data or {})
        line = event_line(event)
        self.history.append(event.seq, line + b"\n")
        if box_id in self._box_dirs:
            self._append_to_box(box_id, line + b"\n")
        stored = StoredEvent(event.seq, box_id, kind, line)
        self._keep(stored)
        for queue in list(self._subscribers):
            if queue.qsize() >= SUBSCRIBER_QUEUE:
                self._subscribers.discard(queue)
                queue.put_nowait(_OVERFLOW)  # it reads on from the files, from where it is
                continue
            queue.put_nowait(stored)
        return event

    def _keep(self, stored: StoredEvent) -> None:
        self._ring.append(stored)
        self._ring_bytes += len(stored.line)
        while len(self._ring) > RING_EVENTS or (self._ring_bytes > RING_BYTES and len(self._ring) > 1):
            self._ring_bytes -= len(self._ring.popleft().line)

    def _append_to_box(self, box_id: str, line: bytes) -> None:
        if box_id not in self._box_files:
            path = self._box_dirs[box_id] / "events.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._box_files[box_id] = (fd, os.fstat(fd).st_size)
        fd, written = self._box_files[box_id]
        if written + len(line) > EVENTS_FILE.default:
            return  # capped; the daemon-wide history still has it
        os.write(fd, line)
        self._box_files[box_id] = (fd, written + len(line))

    # ---- boxes ----------------------------------------------------------------------------------------

    def attach_box(self, box_id: str, box_dir: Path) -> None:
        """Also append this box's events to ``box_dir/events.jsonl`` (capped)."""
        self._box_dirs[box_id] = box_dir

    def detach_box(self, box_id: str) -> None:
        entry = self._box_files.pop(box_id, None)
        if entry:
            os.close(entry[0])
        self._box_dirs.pop(box_id, None)

    def remember_removed(self, box_id: str, name: str) -> None:
        """Resolve ``name`` to ``box_id`` after the box is gone from the daemon's lookups (bounded)."""
        self._removed_names.pop(name, None)
        self._removed_names[name] = box_id
        while len(self._removed_names) > REMOVED_NAMES_KEPT:
            self._removed_names.popitem(last=False)

    def removed_box_id(self, name: str) -> str | None:
        return self._removed_names.get(name)

    def box_lookups(self) -> dict[str, int]:
        """How many boxes each of the bus's per-box maps holds (a removed box is in none of them)."""
        return {"box_dirs": len(self._box_dirs), "box_files": len(self._box_files)}

    # ---- reading ----------------------------------------------------------------------------------------

    @property
    def first_kept(self) -> int:
        """The oldest sequence number still stored (0 when none is)."""
        return self.history.first_seq or (self._ring[0].seq if self._ring else 0)

    def _ring_reaches(self, after: int) -> bool:
        """Whether the ring holds every event after ``after`` (so no file needs reading)."""
        if after >= self.last_seq:
            return True
        return bool(self._ring) and self._ring[0].seq <= after + 1

    async def batches(self, after: int = 0, box_id: str | None = None, *,
                      follow: bool = True) -> AsyncIterator[list[StoredEvent]]:
        """Every event after ``after`` (of ``box_id`` alone, if given), oldest first, each exactly once, in batches;
        sequence numbers that cannot be served come as one ``events.missing`` event each run.  Without ``follow``
        it ends at the last event stored when it was called; with it, it goes on with live events until
        ``close_subscribers``."""
        last = after
        until = self.last_seq
        while not (follow and self._streams_closed):
            if not self._ring_reaches(last):
                async for batch, through in self._from_files(last, box_id):
                    last = through
                    if batch:
                        yield batch
                    if self._streams_closed and follow:
                        return
                continue  # meanwhile the ring may have moved on: look again
            if not follow:
                tail = [e for e in self._ring if last < e.seq <= until and (box_id is None or e.box_id == box_id)]
                if tail:
                    yield tail
                return
            queue: asyncio.Queue[Any] = asyncio.Queue()
            self._subscribers.add(queue)  # before the ring is read, so nothing falls between the two
            try:
                first = [e for e in self._ring if e.seq > last]
                if first:
                    last = first[-1].seq
                    if (shown := _of_box(first, box_id)):
                        yield shown
                while True:
                    item = await queue.get()
                    if item is _SHUT_DOWN:
                        return
                    if item is _OVERFLOW:
                        break  # back to the files, from ``last``
                    live = [item]
                    while not queue.empty() and len(live) < 1000:
                        item = queue.get_nowait()
                        if item is _SHUT_DOWN or item is _OVERFLOW:
                            queue.put_nowait(item)  # handled at the next get
                            break
                        live.append(item)
                    live = [e for e in live if e.seq > last]
                    if live:
                        last = live[-1].seq
                        if (shown := _of_box(live, box_id)):
                            yield shown
            finally:
                self._subscribers.discard(queue)

    async def _from_files(self, after: int, box_id: str | None) -> AsyncIterator[tuple[list[StoredEvent], int]]:
        """The events after ``after`` up to the last one stored now, read from the files in a thread."""
        reader = self.history.reader(after, self.last_seq, box_id, self.clock())
        try:
            while not reader.done:
                batch = await self._in_thread(reader.next_batch, reader)
                yield batch, reader.through
        finally:
            _close_when_idle(reader)

    async def page(self, before: int | None, limit: int, box_id: str | None = None) -> dict[str, Any]:
        """The last ``limit`` (>= 1) events with seq < ``before`` (None: the newest), oldest first, of ``box_id``
        alone if given: ``events`` (``StoredEvent``s), ``last_seq``, ``first_kept`` and ``more`` (older events may
        exist), the fields of a ``wire.EventPage``."""
        last_seq = self.last_seq
        end = last_seq + 1 if before is None else min(before, last_seq + 1)
        first_kept = self.first_kept
        whole = bool(self._ring) and self._ring[0].seq <= first_kept  # the ring holds every event kept
        ring_part = [e for e in self._ring if e.seq < end and (box_id is None or e.box_id == box_id)]
        if len(ring_part) >= limit or whole:
            events = ring_part[-limit:]
            more = len(ring_part) > limit or (not whole and bool(events))
        else:
            files = _Files(self.history.files())
            try:
                events, more = await self._in_thread(lambda: read_page(files.files, end, limit, box_id), files)
            finally:
                _close_when_idle(files)
        return {"events": events, "last_seq": last_seq, "first_kept": first_kept, "more": more}

    async def _in_thread(self, work: Callable[[], T], owner: HistoryReader | _Files) -> T:
        """``work()`` in the history's threads, noting on ``owner`` that a thread uses its files meanwhile."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(HISTORY_THREADS, thread_name_prefix="event-history")
        running: Future[T] = self._threads.submit(work)
        owner.busy = running
        return await asyncio.wrap_future(running)

    def close_subscribers(self) -> None:
        """End every following stream (the daemon stops): those waiting for live events at once, those still
        reading the files after their current batch."""
        self._streams_closed = True
        for queue in list(self._subscribers):
            queue.put_nowait(_SHUT_DOWN)
        self._subscribers.clear()

    def close(self) -> None:
        self.history.close()
        for fd, _ in self._box_files.values():
            os.close(fd)
        self._box_files.clear()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None


def _of_box(events: list[StoredEvent], box_id: str | None) -> list[StoredEvent]:
    return events if box_id is None else [e for e in events if e.box_id == box_id]


class _Files:
    """The history files a page read holds open."""

    def __init__(self, files: list[tuple[int, HistoryFile]]) -> None:
        self.files = files
        self.busy: Future[Any] | None = None

    def close(self) -> None:
        files, self.files = self.files, []
        for fd, _ in files:
            os.close(fd)


def _close_when_idle(owner: HistoryReader | _Files) -> None:
    """Close ``owner``'s files now, or once the thread still reading them is done (a cancelled caller leaves it
    running: closing under it could hand its descriptor numbers to other files)."""
    if owner.busy is not None and not owner.busy.done():
        owner.busy.add_done_callback(lambda _: owner.close())
    else:
        owner.close()
