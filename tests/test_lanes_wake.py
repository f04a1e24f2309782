"""A lane moves more than one fill per readiness event while its sink takes each whole, up to
``lanes.BYTES_PER_WAKE``, and stops at once when the sink is full (``guest/lanes.py``)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tkbox_guest import lanes

SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
ROOM = 8 << 20


def _pair_with_room() -> tuple[socket.socket, socket.socket]:
    """A Unix stream pair whose writer may queue ``ROOM`` bytes (root may force the buffer size)."""
    writer, reader = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        writer.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, ROOM)
    except PermissionError:
        writer.close()
        reader.close()
        pytest.skip("forcing a socket buffer size needs CAP_NET_ADMIN")
    for sock in (writer, reader):
        sock.setblocking(False)
    return writer, reader


def _drain(sock: socket.socket) -> int:
    total = 0
    while True:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return total
        if not data:
            return total
        total += len(data)


@pytest.mark.parametrize("queued", [3 * lanes.COPY_BUFFER, 2 * lanes.BYTES_PER_WAKE])
async def test_one_readiness_event_moves_what_the_source_has_up_to_the_bound(queued):
    producer, source = _pair_with_room()
    sink, consumer = _pair_with_room()
    producer.sendall(b"x" * queued)
    moved: list[int] = []
    lane = lanes._CopyLane(asyncio.get_running_loop(), source, sink, moved.append, lambda: None,
                           lambda sock, error: None)
    lane.reading = True  # as after start(): the loop watches the source
    lane._source_readable()
    expected = min(queued, lanes.BYTES_PER_WAKE)
    assert sum(moved) == expected == _drain(consumer)
    lane.stop()
    for sock in (producer, source, sink, consumer):
        sock.close()


async def test_a_full_sink_stops_the_lane_after_the_fill_it_could_not_give():
    producer, source = _pair_with_room()
    sink, consumer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # a small, stock-sized buffer
    for sock in (sink, consumer):
        sock.setblocking(False)
    producer.sendall(b"x" * (4 << 20))
    moved: list[int] = []
    lane = lanes._CopyLane(asyncio.get_running_loop(), source, sink, moved.append, lambda: None,
                           lambda sock, error: None)
    lane.reading = True
    lane._source_readable()
    assert lane.held > 0 and not lane.reading and lane.waiting_for_sink  # it waits for the sink, reads no more
    assert sum(moved) + lane.held <= lanes.BYTES_PER_WAKE + lanes.COPY_BUFFER
    lane.stop()
    for sock in (producer, source, sink, consumer):
        sock.close()
