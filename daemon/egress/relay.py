"""Moving a tunnel's bytes between a box client and its upstream, counted, bounded, both directions at once.

``relay`` copies each direction until its EOF (then half-closes the other side's write end), and returns the bytes
carried up (client → upstream) and down. A side whose writes are not taken slows its sender instead of growing a
buffer. ``idle`` bounds how long both directions may stay silent together; the caller bounds the whole
connection's life. It ends early when either connection is lost.

Three ways, one behaviour:

- Socket transports where Python can splice (Linux; every connection the proxy relays: the box's Unix connection
  and the upstream's TCP one): the transports are paused and the tunnel's bytes move on the event loop's readiness
  callbacks, one lane per direction (``tkbox_guest.lanes``, shared with the guest's forwarder): from TCP the kernel
  splices through a pipe, from the box's Unix socket one buffer is reused; no chunk becomes a Python object.
  Whatever the stream readers had already buffered goes first, and the writers are drained before the lanes start.
  A connection lost meanwhile is handed to its stream's protocol when the transports are given back.
- Socket transports without splice: the relay holds both transports for the tunnel's life (``_Tunnel``). Each
  chunk a transport reads goes straight to the other transport's ``write``; when a transport's write buffer passes
  its high-water mark, asyncio's flow control pauses reading on the other side until it drains below the low-water
  mark. No coroutine runs per chunk and no chunk is copied through a ``StreamReader``. The bytes a ``StreamReader`` had already read when the tunnel opened go first: reading
  them is the relay's one use of the reader's private state (CPython's ``StreamReader._buffer``), and a reader
  without it is relayed the other way. An EOF the reader had already seen is read again from the socket, which
  stays at EOF. The transports go back to their streams when the relay ends; a connection lost meanwhile is
  passed on to its stream's protocol, so ``wait_closed`` and the reader learn it.
- Anything else (a stream without a socket transport, as tests build): one coroutine per direction reads at most
  ``CHUNK`` bytes and drains each write before the next read.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass, field

from tkbox_guest import lanes

from ..tasks import spawn

CHUNK = 64 * 1024
BOX_SEND_BUFFER = 256 * 1024
"""The send buffer asked for on the box's Unix connection while a tunnel holds it: one whole read from upstream
(asyncio reads at most 256 KiB at once) then goes to the box in one write instead of a partial write, a buffered
remainder and a wake-up for the rest. The kernel doubles it and caps it at ``net.core.wmem_max`` (stock: 208 KiB,
so at most ~416 KiB); Linux's default for a Unix socket is 208 KiB. Measured: the proxy's CPU per GiB carried to
the box fell by about a third (docs/performance.md)."""

SPLICE = lanes.available()
"""Socket transports are relayed by the kernel (``tkbox_guest.lanes``) where Python can splice; the transport-holding
relay below is the way elsewhere."""

Side = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass
class Counts:
    up: int = 0
    down: int = 0
    last_activity: float = field(default=0.0)


async def relay(client: Side, upstream: Side, *, idle: float, counts: Counts | None = None) -> Counts:
    """Copy both ways until both ends have finished, either connection is lost, or nothing moved for ``idle``
    seconds. Each side is a reader and the writer of the same connection."""
    counts = counts or Counts()
    counts.last_activity = asyncio.get_running_loop().time()
    if _holdable(client) and _holdable(upstream):
        if SPLICE and all(lanes.relayable(side[1].transport) for side in (client, upstream)):
            await _spliced(client, upstream, counts, idle)
        else:
            await _Tunnel(client, upstream, counts).run(idle)
    else:
        await _pumps(client, upstream, counts, idle)
    return counts


async def _drain(writers: tuple[asyncio.StreamWriter, ...], idle: float) -> None:
    """Let whatever the streams still buffer for writing go out, so the tunnel starts with no writer paused under
    the streams' protocols (the tunnel's ways could not know it)."""
    for writer in writers:
        transport = writer.transport
        if transport.get_write_buffer_size():
            low, high = transport.get_write_buffer_limits()
            transport.set_write_buffer_limits(high=0)
            try:
                await asyncio.wait_for(writer.drain(), idle)
            finally:
                if not transport.is_closing():
                    transport.set_write_buffer_limits(high=high, low=low)


# ---- socket transports, where Python can splice: the kernel moves the bytes ---------------------------------------

class _Lost(asyncio.BaseProtocol):
    """Stands in for a stream's protocol while its transport is aborted, so the stream learns why it was lost."""

    def __init__(self, original: asyncio.BaseProtocol, error: OSError) -> None:
        self.original, self.error = original, error

    def connection_lost(self, exc: Exception | None) -> None:
        self.original.connection_lost(exc or self.error)


async def _spliced(client: Side, upstream: Side, counts: Counts, idle: float) -> None:
    loop = asyncio.get_running_loop()
    sides = (client, upstream)
    for _, writer in sides:
        writer.transport.pause_reading()  # nothing more goes into the stream's reader
    tunnel: lanes.Tunnel | None = None
    try:
        for (reader, _), (_, other_writer), upward in ((client, upstream, True), (upstream, client, False)):
            buffered = bytes(reader._buffer)  # the stream reader's state: see the module's docstring
            reader._buffer.clear()
            if buffered:
                other_writer.write(buffered)
                _count(counts, upward, len(buffered), loop.time())
        await _drain((client[1], upstream[1]), idle)

        def moved(upward: bool, count: int) -> None:
            _count(counts, upward, count, loop.time())

        _widen_box_buffer(client[1].transport)
        sockets = [side[1].transport.get_extra_info("socket") for side in sides]
        tunnel = lanes.Tunnel(sockets[0], sockets[1], moved)
        tunnel.start()
        while not tunnel.finished.done():
            remaining = counts.last_activity + idle - loop.time()
            if remaining <= 0:
                break
            await asyncio.wait({tunnel.finished}, timeout=remaining)
    except (ConnectionError, OSError, TimeoutError):
        pass
    finally:
        if tunnel is not None:
            tunnel.stop()
            _hand_back_spliced(tunnel, sides)


def _hand_back_spliced(tunnel: lanes.Tunnel, sides: tuple[Side, Side]) -> None:
    for which, ((reader, writer), lane) in enumerate(zip(sides, tunnel.lanes, strict=True)):
        error = tunnel.error_for(which)
        if error is not None:
            writer.transport.set_protocol(_Lost(writer.transport.get_protocol(), error))
            writer.transport.abort()
        elif lane.source_ended:
            reader.feed_eof()


def _widen_box_buffer(transport: asyncio.Transport) -> None:
    box_socket = transport.get_extra_info("socket")
    if box_socket.family == socket.AF_UNIX:
        with contextlib.suppress(OSError):
            box_socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BOX_SEND_BUFFER)


def _count(counts: Counts, upward: bool, count: int, now: float) -> None:
    counts.last_activity = now
    if upward:
        counts.up += count
    else:
        counts.down += count


# ---- socket transports: the relay holds them ---------------------------------------------------------------------

def _holdable(side: Side) -> bool:
    reader, writer = side
    transport = getattr(writer, "transport", None)
    return (isinstance(transport, asyncio.Transport) and transport.get_extra_info("socket") is not None
            and not transport.is_closing() and isinstance(getattr(reader, "_buffer", None), bytearray))


class _End(asyncio.Protocol):
    """One connection's transport while the tunnel holds it: what it reads goes to the other end's transport, and
    its write buffer's flow control pauses and resumes reading on the other end."""

    def __init__(self, tunnel: _Tunnel, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 upward: bool) -> None:
        self.tunnel, self.reader, self.upward = tunnel, reader, upward
        self.transport: asyncio.Transport = writer.transport
        self.original = self.transport.get_protocol()
        self.peer: _End = self
        self.eof = False  # nothing more comes from this end
        self.held_back = False  # the other end's write buffer is full: this end is not read

    # what the transport tells its protocol
    def data_received(self, data: bytes) -> None:
        self.tunnel.carry(self, data)

    def eof_received(self) -> bool:
        self.tunnel.ended(self)
        return True  # keep the connection: the other direction may still be sending (half-close)

    def pause_writing(self) -> None:
        self.peer.held_back = True
        self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        self.peer.held_back = False
        if not self.peer.eof:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.tunnel.lost()
        self.original.connection_lost(exc)  # the stream's writer and reader learn it as if they had held it


class _Tunnel:
    """Both ends of one tunnel, from the moment the relay takes their transports until it hands them back."""

    def __init__(self, client: Side, upstream: Side, counts: Counts) -> None:
        self.loop = asyncio.get_running_loop()
        self.counts = counts
        self.client = _End(self, client[0], client[1], upward=True)
        self.upstream = _End(self, upstream[0], upstream[1], upward=False)
        self.client.peer, self.upstream.peer = self.upstream, self.client
        self.writers = (client[1], upstream[1])
        self.finished = self.loop.create_future()

    async def run(self, idle: float) -> None:
        try:
            await _drain(self.writers, idle)
            self._take_over()
            while not self.finished.done():
                remaining = self.counts.last_activity + idle - self.loop.time()
                if remaining <= 0:
                    break
                await asyncio.wait({self.finished}, timeout=remaining)
        except (ConnectionError, OSError, TimeoutError):
            pass
        finally:
            self._hand_back()

    def _take_over(self) -> None:
        ends = (self.client, self.upstream)
        _widen_box_buffer(self.client.transport)
        for end in ends:
            end.transport.pause_reading()  # nothing more goes into the stream's reader
            end.transport.set_protocol(end)
        for end in ends:
            buffered = bytes(end.reader._buffer)  # the stream reader's state: see the module's docstring
            end.reader._buffer.clear()
            if buffered:
                self.carry(end, buffered)
        for end in ends:
            if not (end.held_back or self.finished.done()):
                end.transport.resume_reading()  # an EOF the stream had read comes again: a socket stays at EOF

    def carry(self, source: _End, data: bytes) -> None:
        sink = source.peer.transport
        if sink.is_closing():
            self.lost()
            return
        sink.write(data)
        self.counts.last_activity = self.loop.time()
        if source.upward:
            self.counts.up += len(data)
        else:
            self.counts.down += len(data)

    def ended(self, source: _End) -> None:
        if source.eof:
            return
        source.eof = True
        sink = source.peer.transport
        with contextlib.suppress(OSError, RuntimeError):
            if not sink.is_closing() and sink.can_write_eof():
                sink.write_eof()
        if source.peer.eof:
            self._finish()

    def lost(self) -> None:
        for end in (self.client, self.upstream):
            end.transport.pause_reading()
        self._finish()

    def _finish(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)

    def _hand_back(self) -> None:
        for end in (self.client, self.upstream):
            if end.transport.get_protocol() is end:
                end.transport.pause_reading()
                end.transport.set_protocol(end.original)
                if end.eof:
                    end.reader.feed_eof()


# ---- anything else: a coroutine per direction ---------------------------------------------------------------------

async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counts: Counts, upward: bool) -> None:
    loop = asyncio.get_running_loop()
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
            counts.last_activity = loop.time()
            if upward:
                counts.up += len(data)
            else:
                counts.down += len(data)
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _pumps(client: Side, upstream: Side, counts: Counts, idle: float) -> None:
    up = spawn(_pump(client[0], upstream[1], counts, True), name="egress-up")
    down = spawn(_pump(upstream[0], client[1], counts, False), name="egress-down")
    try:
        while not (up.done() and down.done()):
            remaining = counts.last_activity + idle - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            await asyncio.wait({task for task in (up, down) if not task.done()}, timeout=remaining)
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
