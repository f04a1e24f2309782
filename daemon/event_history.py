"""The daemon's event history on disk: append-only files indexed by sequence number, read in bounded chunks.

``events.jsonl`` holds one event per line, as the daemon wrote it (``{"seq":…,"time":…,"box_id":…,"kind":…,
"data":…}``, keys in that order, compact JSON).  Past ``events_history`` bytes it becomes ``events.1.jsonl`` (the
one before is deleted) and a new ``events.jsonl`` starts: the newest one to two files of events are kept.

Each file has a sparse index in memory: the byte offset and sequence number of every ``INDEX_EVERY``-th line,
built once when the daemon starts (``EventHistory.open``, meant for a thread) and extended as events are appended.
Finding sequence N reads at most ``INDEX_EVERY`` lines.  Reading never parses an event: a line's sequence number,
box id and kind come from a strict match of its opening (``LINE_HEAD``), and the line is handed on as it is stored.
The reader checks what the files give: lines over ``event_line`` or not of the daemon's shape are skipped, and any
sequence numbers missing from what it serves (older than the history kept, or lost to a damaged line) are said
by an ``events.missing`` event in their place, never passed over in silence.

``HistoryReader`` (forward, from a sequence number) and ``read_page`` (backward, the events before one) run in
worker threads: they read only through file descriptors and index copies taken on the event loop when they were
made (``EventHistory.reader``), so the loop's appends and rotations never race them.
"""

from __future__ import annotations

import json
import os
import re
from array import array
from bisect import bisect_right
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from .limits import EVENT_LINE, EVENTS_HISTORY

CURRENT_NAME = "events.jsonl"
PREVIOUS_NAME = "events.1.jsonl"
INDEX_EVERY = 256
"""Lines between two index entries: a seek reads at most this many lines (about 80 KiB of ordinary events)."""
READ_CHUNK = 256 * 1024
"""Bytes one read of a history file takes."""
BATCH_EVENTS = 2000
"""Events one forward read hands back at most (a batch is written to the client at once)."""
MISSING_KIND = "events.missing"
LINE_HEAD = re.compile(
    rb'\{"seq":([1-9][0-9]{0,15}),"time":"[^"\\]{0,64}","box_id":"([^"\\]{0,64})","kind":"([a-z][a-z_.]{0,63})",'
    rb'"data":\{')


class StoredEvent(NamedTuple):
    """One event as stored: its sequence number, box id and kind (read from the line's opening), and the line itself
    (UTF-8 JSON, no newline), sent on as it is."""

    seq: int
    box_id: str
    kind: str
    line: bytes


def parse_line(line: bytes) -> StoredEvent | None:
    """The stored event a history line holds, or None for a line the daemon did not write whole (too long, torn,
    not of its shape)."""
    if len(line) > EVENT_LINE.default or not line.endswith(b"}}"):
        return None
    match = LINE_HEAD.match(line)
    if match is None:
        return None
    return StoredEvent(int(match[1]), match[2].decode("ascii", "replace"), match[3].decode("ascii"), line)


def missing_event(first: int, last: int, reason: str, time: str) -> StoredEvent:
    """An ``events.missing`` event standing for the sequence numbers ``first``..``last`` that cannot be served; it
    carries the last of them, so a client resuming after it resumes after the gap."""
    line = json.dumps({"seq": last, "time": time, "box_id": "", "kind": MISSING_KIND,
                       "data": {"first": first, "last": last, "reason": reason}}, separators=(",", ":")).encode()
    return StoredEvent(last, "", MISSING_KIND, line)


TRIMMED = "older than the event history the daemon keeps (events_history in docs/limits.md)"
UNREADABLE = "the daemon's history file has no whole line for them (a crash, or the file was changed)"


@dataclass
class HistoryFile:
    """One history file and its sparse index (``seqs[i]`` is the sequence number of the line at ``offsets[i]``)."""

    path: Path
    size: int = 0
    """Bytes of whole lines in the file (what a reader may read)."""
    first_seq: int = 0
    last_seq: int = 0
    seqs: array = field(default_factory=lambda: array("q"))
    offsets: array = field(default_factory=lambda: array("q"))
    lines_since_entry: int = INDEX_EVERY

    def note(self, seq: int, offset: int, length: int) -> None:
        """Index a line of ``length`` bytes (newline included) written at ``offset``."""
        if not self.first_seq:
            self.first_seq = seq
        if self.lines_since_entry >= INDEX_EVERY:
            self.seqs.append(seq)
            self.offsets.append(offset)
            self.lines_since_entry = 0
        self.lines_since_entry += 1
        self.last_seq = max(self.last_seq, seq)
        self.size = offset + length

    def start_for(self, seq: int) -> int:
        """The offset of an indexed line at or before the first line with sequence number >= ``seq``."""
        index = bisect_right(self.seqs, seq - 1) - 1
        return self.offsets[index] if index >= 0 else 0

    def copy(self) -> HistoryFile:
        return HistoryFile(self.path, self.size, self.first_seq, self.last_seq, array("q", self.seqs),
                           array("q", self.offsets), self.lines_since_entry)


def index_file(path: Path, *, repair: bool = False) -> HistoryFile:
    """Index ``path`` by reading it once; only the lines that become index entries (and the last ones, for the last
    sequence number) are matched.  With ``repair``, a torn last line (no newline: the daemon died while writing it)
    is cut off so the next append starts a line of its own."""
    indexed = HistoryFile(path)
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return indexed
    last_lines: deque[bytes] = deque(maxlen=INDEX_EVERY)
    with handle:
        offset = 0
        since_entry = INDEX_EVERY
        for line in handle:
            if not line.endswith(b"\n"):
                break  # torn: not part of the history
            if since_entry >= INDEX_EVERY and (event := parse_line(line[:-1])) is not None:
                if not indexed.first_seq:
                    indexed.first_seq = event.seq
                indexed.seqs.append(event.seq)
                indexed.offsets.append(offset)
                since_entry = 0
            since_entry += 1
            last_lines.append(line)
            offset += len(line)
    indexed.size = offset
    indexed.lines_since_entry = since_entry
    indexed.last_seq = next((event.seq for line in reversed(last_lines) if (event := parse_line(line[:-1]))), 0)
    if repair and path.stat().st_size != offset:
        os.truncate(path, offset)
    return indexed


class EventHistory:
    """The history files of one state directory: appended on the event loop, read by ``HistoryReader`` in threads."""

    def __init__(self, state_dir: Path, *, file_limit: int = EVENTS_HISTORY.default) -> None:
        self.state_dir = state_dir
        self.file_limit = file_limit
        self.current = HistoryFile(state_dir / CURRENT_NAME)
        self.previous: HistoryFile | None = None
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.current.path

    def open(self) -> int:
        """Index the files (reads them through once: call it off the event loop) and open the current one for appending.
        Returns the last sequence number stored (0 for none)."""
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        previous = index_file(self.state_dir / PREVIOUS_NAME)
        self.previous = previous if previous.last_seq else None
        self.current = index_file(self.state_dir / CURRENT_NAME, repair=True)
        self._fd = os.open(self.current.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self.last_seq

    @property
    def last_seq(self) -> int:
        return self.current.last_seq or (self.previous.last_seq if self.previous else 0)

    @property
    def first_seq(self) -> int:
        """The oldest sequence number kept (0 when nothing is)."""
        for kept in (self.previous, self.current):
            if kept is not None and kept.first_seq:
                return kept.first_seq
        return 0

    def append(self, seq: int, line: bytes) -> None:
        """Store one event's line (newline included); past ``file_limit`` the current file becomes the previous."""
        if self._fd is None:
            return
        os.write(self._fd, line)
        self.current.note(seq, self.current.size, len(line))
        if self.current.size >= self.file_limit:
            self._rotate()

    def _rotate(self) -> None:
        assert self._fd is not None
        os.close(self._fd)
        os.replace(self.current.path, self.state_dir / PREVIOUS_NAME)  # open readers keep the files they read
        self.current.path = self.state_dir / PREVIOUS_NAME
        self.previous = self.current
        self.current = HistoryFile(self.state_dir / CURRENT_NAME)
        self._fd = os.open(self.current.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                           0o600)

    def files(self) -> list[tuple[int, HistoryFile]]:
        """Each kept file, oldest first, opened for reading, with a copy of its index as it is now (on the loop:
        what a reader in a thread may read).  The caller closes the descriptors."""
        opened = []
        for kept in (self.previous, self.current):
            if kept is None or not kept.size:
                continue
            try:
                fd = os.open(kept.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            opened.append((fd, kept.copy()))
        return opened

    def reader(self, after: int, until: int, box_id: str | None, time: str) -> HistoryReader:
        return HistoryReader(self.files(), after, until, box_id, time)

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


class HistoryReader:
    """The stored events after ``after`` up to ``until``, oldest first, each exactly once; every sequence number
    in between is either served or stood for by an ``events.missing`` event.  ``box_id`` keeps one box's events
    (the ``events.missing`` ones always pass).  ``next_batch`` blocks on the disk: call it in a thread."""

    def __init__(self, files: list[tuple[int, HistoryFile]], after: int, until: int, box_id: str | None,
                 time: str) -> None:
        self._files = files
        self.busy: Future[list[StoredEvent]] | None = None
        """The thread's read of ``next_batch`` in progress, if any (``close`` waits for it to end)."""
        self._file = max((i for i, (_, kept) in enumerate(files) if kept.first_seq and kept.first_seq <= after + 1),
                         default=0)  # the file holding after + 1 (or the oldest)
        self._offset = files[self._file][1].start_for(after + 1) if files else 0
        self._carry = b""
        self._skipping = False
        self.first_kept = files[0][1].first_seq if files else 0
        self.through = after
        """The last sequence number served or stood for (the resume point)."""
        self.until = until
        self.box_id = box_id
        self.time = time

    @property
    def done(self) -> bool:
        return self.through >= self.until

    def next_batch(self) -> list[StoredEvent]:
        """Up to ``BATCH_EVENTS`` events (fewer at the end; an empty list only once ``done``)."""
        batch: list[StoredEvent] = []
        while not self.done and len(batch) < BATCH_EVENTS:
            chunk = self._read_chunk()
            if chunk is None:  # every file read: whatever is still missing up to ``until`` cannot be served
                self._serve_gap(self.until + 1, UNREADABLE, batch)
                break
            for line in chunk:
                event = parse_line(line)
                if event is not None and event.seq > self.through:
                    self._serve(event, batch)
                    if self.done:
                        break
        return batch

    def _serve(self, event: StoredEvent, batch: list[StoredEvent]) -> None:
        if event.seq > self.until:
            self._serve_gap(self.until + 1, UNREADABLE, batch)
            return
        self._serve_gap(event.seq, TRIMMED if event.seq == self.first_kept else UNREADABLE, batch)
        self.through = event.seq
        if self.box_id is None or event.box_id == self.box_id:
            batch.append(event)

    def _serve_gap(self, next_seq: int, reason: str, batch: list[StoredEvent]) -> None:
        if next_seq > self.through + 1:
            batch.append(missing_event(self.through + 1, next_seq - 1, reason, self.time))
            self.through = next_seq - 1

    def _read_chunk(self) -> list[bytes] | None:
        """The whole lines of the next chunk (lines over ``event_line`` dropped), or None past the last file."""
        while self._file < len(self._files):
            fd, kept = self._files[self._file]
            if self._offset >= kept.size:
                self._file += 1
                self._offset, self._carry, self._skipping = 0, b"", False
                if self._file < len(self._files):
                    after_seq = self.through + 1
                    self._offset = self._files[self._file][1].start_for(after_seq)
                continue
            data = os.pread(fd, min(READ_CHUNK, kept.size - self._offset), self._offset)
            if not data:
                self._offset = kept.size
                continue
            self._offset += len(data)
            lines = (self._carry + data).split(b"\n")
            self._carry = lines.pop()
            if self._skipping:
                if lines:
                    lines.pop(0)  # the rest of a line over the limit
                    self._skipping = False
            if len(self._carry) > EVENT_LINE.default:
                self._carry, self._skipping = b"", True
            return lines
        return None

    def close(self) -> None:
        files, self._files = self._files, []
        for fd, _ in files:
            os.close(fd)


def read_page(files: list[tuple[int, HistoryFile]], before: int, limit: int,
              box_id: str | None) -> tuple[list[StoredEvent], bool]:
    """The last ``limit`` stored events with seq < ``before`` (of ``box_id`` alone, if given), oldest first, and
    whether older ones may exist.  Reads backwards one index block at a time; blocks on the disk: call it in a
    thread."""
    page: list[StoredEvent] = []
    first_kept = files[0][1].first_seq if files else 0
    for fd, kept in reversed(files):
        if not kept.first_seq or kept.first_seq >= before:
            continue
        block = bisect_right(kept.seqs, before - 1) - 1
        end = kept.offsets[block + 1] if block + 1 < len(kept.offsets) else kept.size
        while block >= 0:
            start = kept.offsets[block]
            found = [event for event in _events_between(fd, start, end)
                     if event.seq < before and (box_id is None or event.box_id == box_id)]
            wanted = limit - len(page)
            page[:0] = found[len(found) - wanted:] if len(found) > wanted else found
            if len(page) >= limit:
                return page, page[0].seq > first_kept
            end, block = start, block - 1
    return page, False


def _events_between(fd: int, start: int, end: int) -> list[StoredEvent]:
    """The stored events of the whole lines in ``[start, end)`` (an index block), in file order, seqs increasing."""
    events: list[StoredEvent] = []
    carry = b""
    offset = start
    skipping = False
    last = 0
    while offset < end:
        data = os.pread(fd, min(READ_CHUNK, end - offset), offset)
        if not data:
            break
        offset += len(data)
        lines = (carry + data).split(b"\n")
        carry = lines.pop()
        if skipping and lines:
            lines.pop(0)
            skipping = False
        if len(carry) > EVENT_LINE.default:
            carry, skipping = b"", True
        for line in lines:
            event = parse_line(line)
            if event is not None and event.seq > last:
                events.append(event)
                last = event.seq
    return events
