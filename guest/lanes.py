"""A tunnel's bytes moved without asyncio's transports: the event loop's readiness callbacks drive one lane per
direction, and bytes from a TCP socket are moved by the kernel (``splice(2)`` into a pipe, then into the box's
socket), never copied into Python.

A lane takes what its source has into a bounded holding place, then at once gives it to its sink. A sink that does
not take everything leaves the rest held: the lane stops reading its source and waits until the sink is writable,
so a side that does not read slows its sender and the relay never holds more than one place per direction. The
source's EOF half-closes the sink once nothing is held. A reset or a broken pipe on either socket ends the whole
tunnel; the error is kept (by side) so the relay can hand it to the stream's protocol, and the stream's owner learns
of the loss as it would have on its own.

The holding place depends on the source: from TCP, a pipe of ``PIPE_SIZE`` (splice hands it the socket's pages);
from a Unix socket, one reused buffer (Linux's splice out of a Unix socket costs more CPU than a copy). Measured on
this project's machine, CPU per GiB in the relaying process: TCP -> Unix 0.16 s by splice, 0.78 s by copy; Unix ->
TCP 0.85 s by splice, 0.56 s by copy (docs/performance.md, "Egress proxy").
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
from collections.abc import Callable
from typing import Any

PIPE_SIZE = 1 << 20
"""Bytes a lane's pipe may hold: one splice call moves at most this much. Linux's default pipe is 64 KiB; root may
ask for up to ``fs.pipe-max-size`` (1 MiB stock). A smaller pipe only means more calls."""

SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
BYTES_PER_WAKE = 1 << 20
"""What a lane moves per readiness event at most, in several fills when the sink takes each whole: fewer trips
through the event loop, yet other connections (and the rest of the loop's work) wait for at most this much."""
COPY_BUFFER = 256 * 1024
"""A copy lane's buffer: as much as asyncio's transports read at once."""


def available() -> bool:
    """Whether this Python can splice (Linux, Python >= 3.10): without it the relay keeps asyncio's transports."""
    return hasattr(os, "splice")


class _Lane:
    """One direction of the tunnel: ``source`` socket -> a bounded holding place -> ``sink`` socket. Subclasses
    say what the holding place is: a pipe the kernel splices through, or a buffer Python copies through."""

    def __init__(self, loop: asyncio.AbstractEventLoop, source: socket.socket, sink: socket.socket,
                 on_moved: Callable[[int], None], on_ended: Callable[[], None],
                 on_lost: Callable[[socket.socket, OSError], None], chunk: int = 0) -> None:
        self.loop, self.source, self.sink = loop, source, sink
        self.chunk = chunk
        self.on_moved, self.on_ended, self.on_lost = on_moved, on_ended, on_lost
        self.held = 0  # bytes taken from the source, not yet given to the sink
        self.source_ended = False
        self.done = False
        self.reading = False
        self.waiting_for_sink = False

    def fill(self) -> int:
        """Take what the source has (at most the room left); 0 at its EOF. Raises BlockingIOError if nothing."""
        raise NotImplementedError

    def give(self) -> int:
        """Give held bytes to the sink; the count given. Raises BlockingIOError if it takes none."""
        raise NotImplementedError

    def release(self) -> None:
        """Free the holding place."""

    def start(self) -> None:
        self._read_more()

    def _read_more(self) -> None:
        if not self.reading and not self.source_ended and not self.done:
            self.loop.add_reader(self.source.fileno(), self._source_readable)
            self.reading = True

    def _stop_reading(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.source.fileno())
            self.reading = False

    def _source_readable(self) -> None:
        """Fill and give again while the sink takes all and the source has more, up to ``BYTES_PER_WAKE``: each
        return to the event loop costs a poll and a callback (measured: ~9% less CPU per GiB from a Unix socket)."""
        moved = 0
        while True:
            try:
                taken = self.fill()
            except BlockingIOError:
                return
            except OSError as error:
                self.on_lost(self.source, error)
                return
            if taken == 0:
                self.source_ended = True
                self._stop_reading()
            else:
                self.held += taken
                moved += taken
            self._to_sink()
            if self.held or not self.reading or moved >= BYTES_PER_WAKE:
                return  # the sink is full, the source ended or the lane stopped, or other work goes first

    def _to_sink(self) -> None:
        while self.held:
            try:
                given = self.give()
            except BlockingIOError:
                break
            except OSError as error:
                self.on_lost(self.sink, error)
                return
            self.held -= given
            self.on_moved(given)
        if self.held:
            self._stop_reading()  # the sink is full: its sender waits for it
            if not self.waiting_for_sink:
                self.loop.add_writer(self.sink.fileno(), self._to_sink)
                self.waiting_for_sink = True
            return
        if self.waiting_for_sink:
            self.loop.remove_writer(self.sink.fileno())
            self.waiting_for_sink = False
        if self.source_ended:
            self._finish()
        else:
            self._read_more()

    def _finish(self) -> None:
        if self.done:
            return
        self.done = True
        with contextlib.suppress(OSError):
            self.sink.shutdown(socket.SHUT_WR)
        self.on_ended()

    def stop(self) -> None:
        """Stop watching both sockets and free the holding place; bytes still held are dropped (the tunnel is
        over)."""
        self._stop_reading()
        if self.waiting_for_sink:
            self.loop.remove_writer(self.sink.fileno())
            self.waiting_for_sink = False
        self.done = True
        self.release()


class _SpliceLane(_Lane):
    """Through a pipe: the kernel moves the bytes (TCP sources: it hands the pipe the socket's pages)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.pipe_read, self.pipe_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.pipe_write, F_SETPIPE_SZ, PIPE_SIZE)
        self.capacity = fcntl.fcntl(self.pipe_write, F_GETPIPE_SZ)
        if self.chunk:
            self.capacity = min(self.capacity, self.chunk)

    def fill(self) -> int:
        return os.splice(self.source.fileno(), self.pipe_write, self.capacity - self.held, flags=SPLICE_FLAGS)

    def give(self) -> int:
        return os.splice(self.pipe_read, self.sink.fileno(), self.held, flags=SPLICE_FLAGS)

    def release(self) -> None:
        for fd in (self.pipe_read, self.pipe_write):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pipe_read = self.pipe_write = -1


class _CopyLane(_Lane):
    """Through one reused buffer: for Unix sockets as sources, whose splice costs more CPU than a copy
    (measured: 0.85 against 0.56 CPU s/GiB from a Unix socket into TCP; 0.16 against 0.78 from TCP into Unix)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.buffer = bytearray(self.chunk or COPY_BUFFER)
        self.view = memoryview(self.buffer)
        self.start_at = 0

    def fill(self) -> int:
        self.start_at = 0
        return self.source.recv_into(self.buffer)

    def give(self) -> int:
        given = self.sink.send(self.view[self.start_at:self.start_at + self.held])
        self.start_at += given
        return given

    def release(self) -> None:
        self.view.release()


class Tunnel:
    """Both directions of one tunnel between two connected stream sockets, until both have ended, one is lost, or
    ``stop``. ``moved(upward, count)`` is called for each count of bytes handed to a sink; ``chunk`` (when not 0)
    caps what a lane holds at once. Sockets of asyncio transports: the caller pauses the transports first and
    gives them back after ``finished``."""

    def __init__(self, client: Any, upstream: Any, moved: Callable[[bool, int], None] | None = None, *,
                 chunk: int = 0) -> None:
        self.loop = asyncio.get_running_loop()
        self.finished: asyncio.Future[None] = self.loop.create_future()
        self.errors: dict[int, OSError] = {}  # by the side it was met on: 0 the client's socket, 1 the upstream's
        self.lanes: list[_Lane] = []
        # The lanes watch duplicates of the transports' sockets: the event loop lets no one else watch a
        # transport's own descriptor (the transports are paused meanwhile).
        self.sockets = [client.dup(), upstream.dup()]
        client, upstream = self.sockets
        try:
            for source, sink, upward in ((client, upstream, True), (upstream, client, False)):
                lane = _CopyLane if source.family == socket.AF_UNIX else _SpliceLane
                self.lanes.append(lane(self.loop, source, sink, self._counter(moved, upward), self._ended,
                                       self._lost, chunk))
        except OSError:
            self.stop()
            raise

    @staticmethod
    def _counter(moved: Callable[[bool, int], None] | None, upward: bool) -> Callable[[int], None]:
        return (lambda count: None) if moved is None else (lambda count: moved(upward, count))

    def start(self) -> None:
        for lane in self.lanes:
            lane.start()

    def _ended(self) -> None:
        if all(lane.done for lane in self.lanes):
            self._finish()

    def _lost(self, sock: socket.socket, error: OSError) -> None:
        self.errors.setdefault(self.sockets.index(sock), error)
        self._finish()

    def _finish(self) -> None:
        for lane in self.lanes:
            lane.stop()
        for sock in self.sockets:
            sock.close()
        if not self.finished.done():
            self.finished.set_result(None)

    def stop(self) -> None:
        self._finish()

    def error_for(self, which: int) -> OSError | None:
        """The error met on the client's socket (0) or the upstream's (1), if any."""
        return self.errors.get(which)


def relayable(transport: Any) -> bool:
    """A socket transport of a stream socket (TCP or Unix): what the lanes can splice."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    return available() and sock is not None and sock.type == socket.SOCK_STREAM and sock.family in (
        socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)
