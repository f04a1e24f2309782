"""The daemon's event stream: one daemon-wide sequence, kept on disk, replayable from any point.

``emit`` assigns the next sequence number, appends the event to the daemon-wide
``events.jsonl`` and to the box's own ``events.jsonl`` (capped), keeps it in a memory
ring, and hands it to every subscriber.  A subscriber that resumes after sequence N
gets every later event exactly once: first from the ring (or the file, if N is older
than the ring), then live.  The sequence continues across daemon restarts.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .limits import EVENTS_FILE
from .wire import EVENT_KINDS, Event

RING_SIZE = 65536
SUBSCRIBER_QUEUE = 65536
TAIL_READ = 1 << 20


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class SubscriberTooSlow(Exception):
    """The subscriber fell too far behind; it should reconnect and resume from its last sequence."""


class EventBus:
    def __init__(self, state_dir: Path, *, clock: Callable[[], str] = now_text) -> None:
        self.state_dir = state_dir
        self.clock = clock
        self.path = state_dir / "events.jsonl"
        self.last_seq = 0
        self._ring: deque[Event] = deque(maxlen=RING_SIZE)
        self._subscribers: set[asyncio.Queue[Event | None]] = set()
        self._fd: int | None = None
        self._box_files: dict[str, tuple[int, int]] = {}  # box id -> (fd, bytes written)
        self._box_dirs: dict[str, Path] = {}

    def open(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.last_seq = self._read_last_seq()

    def _read_last_seq(self) -> int:
        size = self.path.stat().st_size
        if not size:
            return 0
        with open(self.path, "rb") as handle:
            handle.seek(max(0, size - TAIL_READ))
            lines = handle.read().splitlines()
        for line in reversed(lines):
            try:
                return int(json.loads(line)["seq"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line from a crash; the one before it holds the sequence
        return 0

    def attach_box(self, box_id: str, box_dir: Path) -> None:
        """Also append this box's events to ``box_dir/events.jsonl`` (capped)."""
        self._box_dirs[box_id] = box_dir

    def emit(self, box_id: str, kind: str, data: dict[str, Any] | None = None) -> Event:
        assert kind in EVENT_KINDS, kind
        self.last_seq += 1
        event = Event(self.last_seq, self.clock(), box_id, kind, data or {})
        line = json.dumps(event.to_json(), separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        if self._fd is not None:
            os.write(self._fd, line)
        if box_id in self._box_dirs:
            self._append_to_box(box_id, line)
        self._ring.append(event)
        for queue in list(self._subscribers):
            if queue.qsize() >= SUBSCRIBER_QUEUE:
                self._subscribers.discard(queue)
                queue.put_nowait(None)  # tells it to reconnect; the queue itself is unbounded
                continue
            queue.put_nowait(event)
        return event

    def _append_to_box(self, box_id: str, line: bytes) -> None:
        if box_id not in self._box_files:
            path = self._box_dirs[box_id] / "events.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._box_files[box_id] = (fd, os.fstat(fd).st_size)
        fd, written = self._box_files[box_id]
        if written + len(line) > EVENTS_FILE.default:
            return  # capped; the daemon-wide events.jsonl still has it
        os.write(fd, line)
        self._box_files[box_id] = (fd, written + len(line))

    def detach_box(self, box_id: str) -> None:
        entry = self._box_files.pop(box_id, None)
        if entry:
            os.close(entry[0])
        self._box_dirs.pop(box_id, None)

    def history_after(self, after_seq: int) -> list[Event]:
        """Every stored event with seq > after_seq, oldest first."""
        if self._ring and self._ring[0].seq <= after_seq + 1:
            return [event for event in self._ring if event.seq > after_seq]
        events = []
        with open(self.path, "rb") as handle:
            for line in handle:
                try:
                    event = Event.from_json(json.loads(line))
                except (ValueError, json.JSONDecodeError):
                    continue
                if event.seq > after_seq:
                    events.append(event)
        return events

    async def subscribe(self, after_seq: int = 0) -> AsyncIterator[Event]:
        """Events after ``after_seq``: the stored ones, then live ones, each exactly once."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._subscribers.add(queue)  # before reading history, so nothing falls between the two
        try:
            last = after_seq
            for event in self.history_after(after_seq):
                last = event.seq
                yield event
            while True:
                event = await queue.get()
                if event is None:
                    raise SubscriberTooSlow(f"fell behind after seq {last}; resume from there")
                if event.seq <= last:
                    continue
                last = event.seq
                yield event
        finally:
            self._subscribers.discard(queue)

    def close_subscribers(self) -> None:
        for queue in list(self._subscribers):
            queue.put_nowait(None)
        self._subscribers.clear()

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        for fd, _ in self._box_files.values():
            os.close(fd)
        self._box_files.clear()
