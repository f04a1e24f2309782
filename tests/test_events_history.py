"""The daemon's event history: resume from any sequence number (across restarts and rotations), pages before any
sequence number, stored lines read strictly, and memory bounded (ring, subscriber queues, per-box maps)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon import event_history, events
from tkbox_daemon.event_history import MISSING_KIND, TRIMMED, UNREADABLE, parse_line
from tkbox_daemon.events import EventBus, event_line
from tkbox_daemon.limits import EVENT_LINE
from tkbox_daemon.wire import Event

BOXES = ("", "aaaaaaaaaaaa", "bbbbbbbbbbbb")


def _fill(bus: EventBus, count: int, start: int = 0) -> None:
    for index in range(start, start + count):
        bus.emit(BOXES[index % 3], "exec.started", {"n": index, "text": "é\u2028\"x\""})


async def _read(bus: EventBus, after: int, box: str | None = None) -> list[dict]:
    return [json.loads(e.line) async for batch in bus.batches(after, box, follow=False) for e in batch]


@pytest.fixture(scope="module")
def restarted_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,500 events written by one daemon, 1,300 more by the next (the sequence continues): several index blocks."""
    state = tmp_path_factory.mktemp("history")
    first = EventBus(state)
    first.open()
    _fill(first, 1500)
    first.close()
    second = EventBus(state)
    second.open()
    assert second.last_seq == 1500
    _fill(second, 1300, start=1500)
    second.close()
    return state


def _reopened(state: Path) -> EventBus:
    bus = EventBus(state)
    bus.open()
    return bus


@settings(max_examples=40)
@given(after=st.integers(0, 2850), box=st.sampled_from((None, *BOXES)))
def test_a_resume_after_any_sequence_number_gets_every_later_event_once(restarted_history, after, box):
    bus = _reopened(restarted_history)
    try:
        got = asyncio.run(_read(bus, after, box))
    finally:
        bus.close()
    expected = [seq for seq in range(after + 1, 2801) if box is None or BOXES[(seq - 1) % 3] == box]
    assert [event["seq"] for event in got] == expected
    assert all(Event.from_json(event).data["n"] == event["seq"] - 1 for event in got)  # the stored line, whole


@settings(max_examples=40)
@given(before=st.integers(1, 2900), limit=st.integers(1, 700), box=st.sampled_from((None, *BOXES)))
def test_a_page_holds_exactly_the_events_before_a_sequence_number(restarted_history, before, limit, box):
    bus = _reopened(restarted_history)
    try:
        page = asyncio.run(bus.page(before, limit, box))
    finally:
        bus.close()
    matching = [seq for seq in range(1, min(before, 2801)) if box is None or BOXES[(seq - 1) % 3] == box]
    assert [event.seq for event in page["events"]] == matching[-limit:]
    assert page["more"] == (len(matching) > limit)
    assert page["first_kept"] == 1 and page["last_seq"] == 2800


async def test_pages_back_to_the_start_cover_the_history_once(tmp_path):
    bus = EventBus(tmp_path)
    bus.open()
    total = events.RING_EVENTS + 3000
    _fill(bus, total)  # the newest pages come from the ring, the oldest from the files only
    for box in (None, BOXES[1]):
        seen: list[int] = []
        before = None
        while True:
            page = await bus.page(before, 700, box)
            seen[:0] = [event.seq for event in page["events"]]
            if not page["more"]:
                break
            before = page["events"][0].seq
        assert seen == [seq for seq in range(1, total + 1) if box is None or BOXES[(seq - 1) % 3] == box]
    bus.close()


async def test_a_resume_older_than_the_history_kept_is_told_what_is_gone(tmp_path):
    bus = EventBus(tmp_path, history_file_limit=40_000)  # about 300 events a file: the oldest files go
    bus.open()
    _fill(bus, 2000)
    bus.close()
    bus = EventBus(tmp_path, history_file_limit=40_000)
    bus.open()
    first_kept = bus.first_kept
    assert 1 < first_kept < 2000
    got = await _read(bus, 10)
    assert got[0]["kind"] == MISSING_KIND
    assert got[0]["data"] == {"first": 11, "last": first_kept - 1, "reason": TRIMMED}
    assert got[0]["seq"] == first_kept - 1  # a client resuming after it resumes after the gap
    assert [event["seq"] for event in got[1:]] == list(range(first_kept, 2001))
    page = await bus.page(first_kept + 5, 100)
    assert [event.seq for event in page["events"]] == list(range(first_kept, first_kept + 5))
    assert page["more"] is False and page["first_kept"] == first_kept
    bus.close()


async def test_damaged_lines_are_skipped_and_their_numbers_said_missing(tmp_path):
    bus = EventBus(tmp_path)
    bus.open()
    _fill(bus, 600)
    bus.close()
    lines = (tmp_path / "events.jsonl").read_bytes().split(b"\n")
    lines[299] = b'{"seq":300,"time":"x","box_id":"","kind":"exec.started","data":{"n":'  # cut
    lines[300] = b"[" * (EVENT_LINE.default + 10)  # over the line limit
    lines[301] = b'{"seq":2,"time":"t","box_id":"","kind":"exec.started","data":{}}'  # not increasing
    (tmp_path / "events.jsonl").write_bytes(b"\n".join(lines) + b"{\"seq\":601,\"torn")  # and a torn tail
    bus = EventBus(tmp_path)
    bus.open()
    assert bus.last_seq == 600  # the torn line is cut off; the next event gets a line of its own
    bus.emit("", "daemon.started", {})
    got = await _read(bus, 250)
    seqs = [event["seq"] for event in got]
    gap = next(event for event in got if event["kind"] == MISSING_KIND)
    assert gap["data"] == {"first": 300, "last": 302, "reason": UNREADABLE}
    assert seqs == list(range(251, 300)) + [302] + list(range(303, 602))
    bus.close()


async def test_live_events_follow_the_stored_ones_without_gaps_or_repeats(tmp_path):
    bus = EventBus(tmp_path)
    bus.open()
    _fill(bus, events.RING_EVENTS + 500)  # the first ones are on disk only
    got: list[int] = []
    reading = bus.batches(3)
    async for batch in reading:
        got += [event.seq for event in batch]
        if got[-1] == bus.last_seq:
            break
    _fill(bus, 10)
    async for batch in reading:
        got += [event.seq for event in batch]
        if got[-1] == bus.last_seq:
            break
    await reading.aclose()
    assert got == list(range(4, bus.last_seq + 1))
    bus.close()


async def test_a_subscriber_that_falls_behind_catches_up_from_the_files(tmp_path, monkeypatch):
    monkeypatch.setattr(events, "SUBSCRIBER_QUEUE", 50)
    monkeypatch.setattr(events, "RING_EVENTS", 100)
    bus = EventBus(tmp_path)
    bus.open()
    _fill(bus, 10)
    reading = bus.batches(0)
    got = [event.seq for event in await anext(reading)]
    _fill(bus, 1000, start=10)  # it reads nothing meanwhile
    assert all(queue.qsize() <= 51 for queue in bus._subscribers)  # bounded: past it, the subscriber is dropped
    while got[-1] < 1010:
        got += [event.seq for event in await anext(reading)]
    await reading.aclose()
    assert got == list(range(1, 1011))
    bus.close()


def test_the_ring_holds_a_bounded_number_of_events_and_bytes(tmp_path, monkeypatch):
    bus = EventBus(tmp_path)
    bus.open()
    _fill(bus, events.RING_EVENTS * 2)
    assert len(bus._ring) == events.RING_EVENTS and bus._ring[-1].seq == bus.last_seq
    monkeypatch.setattr(events, "RING_BYTES", 100_000)
    for _ in range(50):
        bus.emit("", "exec.started", {"blob": "x" * 10_000})
    assert bus._ring_bytes <= 100_000 and bus._ring_bytes == sum(len(e.line) for e in bus._ring)
    bus.close()


def test_an_event_past_the_line_limit_is_kept_with_a_note_of_its_size(tmp_path):
    bus = EventBus(tmp_path)
    bus.open()
    bus.emit("", "exec.started", {"blob": "x" * EVENT_LINE.default})
    bus.close()
    stored = json.loads((tmp_path / "events.jsonl").read_bytes())
    assert stored["kind"] == "exec.started" and "event_line" in stored["data"]["omitted"]


def test_a_detached_box_leaves_no_file_handle_behind(tmp_path):
    bus = EventBus(tmp_path)
    bus.open()
    for index in range(20):
        box_id = f"{index:012x}"
        (tmp_path / box_id).mkdir()
        bus.attach_box(box_id, tmp_path / box_id)
        bus.emit(box_id, "box.created", {"name": f"b{index}"})
        bus.detach_box(box_id)
        bus.remember_removed(box_id, f"b{index}")
    assert bus.box_lookups() == {"box_dirs": 0, "box_files": 0}
    assert bus.removed_box_id("b3") == f"{3:012x}"
    bus.close()


@settings(max_examples=200)
@given(seq=st.integers(1, 10**15), box=st.sampled_from(BOXES), kind=st.sampled_from(sorted(events.EVENT_KINDS)),
       data=st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=20), st.integers(), st.none()),
                            max_size=4))
def test_a_stored_line_gives_back_its_event_heading(seq, box, kind, data):
    line = event_line(Event(seq, "2026-01-01T00:00:00.000000Z", box, kind, data))
    stored = parse_line(line)
    assert stored is not None and (stored.seq, stored.box_id, stored.kind, stored.line) == (seq, box, kind, line)
    assert b"\n" not in line


@settings(max_examples=300)
@given(line=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_a_line_not_of_the_daemons_shape_is_refused(line):
    stored = parse_line(line)
    if stored is not None:  # only a line that opens as the daemon writes one and ends its data object
        assert line.startswith(b'{"seq":%d,"time":"' % stored.seq) and line.endswith(b"}}")
        assert len(line) <= EVENT_LINE.default


def test_the_index_stays_sparse(tmp_path):
    bus = EventBus(tmp_path)
    bus.open()
    _fill(bus, 5000)
    assert len(bus.history.current.seqs) == -(-5000 // event_history.INDEX_EVERY)
    bus.close()
    assert len(event_history.index_file(tmp_path / "events.jsonl").seqs) == -(-5000 // event_history.INDEX_EVERY)


async def test_a_stream_still_reading_the_files_ends_when_the_daemon_closes_its_streams(tmp_path):
    bus = EventBus(tmp_path)
    bus.open()
    _fill(bus, events.RING_EVENTS + 5000)  # from seq 0 the files must be read first
    reading = bus.batches(0)
    first = await anext(reading)
    assert first[0].seq == 1
    bus.close_subscribers()
    rest = [event.seq async for batch in reading for event in batch]
    assert rest == []  # it ended after the batch it had read
    stored = [event.seq async for batch in bus.batches(0, follow=False) for event in batch]
    assert stored == list(range(1, bus.last_seq + 1))  # a read of what is stored still ends whole
    bus.close()
