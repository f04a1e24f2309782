"""One exec on the host: its output (the credit window the guest must stay within, and the bytes waiting for a
reader), its stdin window and its exit.

The agent channel's read loop never waits, so it cannot be stalled by one slow reader: ``received`` checks a
STDOUT/STDERR frame against the exec's output window (an honest guest never sends more than it was granted, so
more is a protocol error) and queues it at once.  The exec's reader takes chunks with ``next_item`` and hands
their bytes back with ``release`` once its client has them, or once it dropped them because the client is gone;
released bytes are ``credit_due``, which ``GuestLink`` sends as OUTPUT_ACK after ``acknowledge``.  Every byte
received is in exactly one place until it is acknowledged:

    window.outstanding == queued + taken (not yet released) + credit_due  <=  window.size

A byte leaves the host's count when its ack is handed to the channel, before the guest can have it, so the host
never counts more outstanding than the guest does: an honest guest is never taken for one that overran its window.

Memory per exec is bounded by the window whatever the guest sends: the bytes sit in one buffer (at most
``OUTPUT_WINDOW``), and the order of stdout and stderr is kept as run lengths in a compact array (4 bytes per change
of stream, never one object per frame); frames carry at least one byte (the codec refuses empty ones).
"""

from __future__ import annotations

import asyncio
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from tkbox_guest import protocol as wire

if TYPE_CHECKING:
    from .guest_link import GuestFailure, GuestLink

STDOUT, STDERR = 1, 2  # the stream numbers shown to clients
_COMPACT_AFTER = 4096  # runs taken before the array of run lengths is compacted


class ExecOutput:
    """The output of one exec between the channel and its reader; ``end`` is its EXIT body or the link's failure."""

    def __init__(self, window: int = wire.OUTPUT_WINDOW) -> None:
        self.window = wire.OutputWindow(window)
        self._data = bytearray()
        self._runs = array("i")  # signed run lengths in arrival order: > 0 stdout, < 0 stderr
        self._head = 0  # the first run not yet taken
        self._taken = 0  # bytes the reader took and has not released
        self.credit_due = 0  # bytes released and not yet acknowledged to the guest
        self.dropping = False  # nobody will read: what arrives is credit at once
        self.end: dict[str, Any] | BaseException | None = None
        self._ready = asyncio.Event()

    @property
    def queued(self) -> int:
        """Bytes received and not yet taken by the reader."""
        return len(self._data)

    def received(self, stream: int, chunk: bytes) -> None:
        """Queue one output frame; raises ProtocolError when it is empty or more than the guest was granted."""
        if not chunk:
            raise wire.ProtocolError("an empty output frame")
        self.window.take(len(chunk))
        if self.dropping:
            self.credit_due += len(chunk)
            return
        self._data += chunk
        signed = len(chunk) if stream == STDOUT else -len(chunk)
        if len(self._runs) > self._head and (self._runs[-1] > 0) == (signed > 0):
            self._runs[-1] += signed  # the same stream again: one run (at most the window, far within an int)
        else:
            self._runs.append(signed)
        self._ready.set()

    def finish(self, end: dict[str, Any] | BaseException) -> None:
        """The last item, after every queued chunk: the EXIT body or the failure (the first one given stays)."""
        if self.end is None:
            self.end = end
            self._ready.set()

    def take_chunk(self, limit: int = wire.MAX_OUTPUT_CHUNK) -> tuple[int, bytes] | None:
        """The next queued bytes of one stream, at most ``limit``; None when nothing is queued.  Not yet released."""
        if self._head == len(self._runs):
            return None
        run = self._runs[self._head]
        size = min(abs(run), limit)
        with memoryview(self._data) as view, view[:size] as head:
            chunk = bytes(head)  # one copy; both views are released before the buffer shrinks
        del self._data[:size]  # bytearray deletes from its front in place, without moving the rest
        self._taken += size
        if size == abs(run):
            self._head += 1
            if self._head == len(self._runs):
                del self._runs[:]
                self._head = 0
            elif self._head >= _COMPACT_AFTER and self._head * 2 >= len(self._runs):
                del self._runs[:self._head]
                self._head = 0
        else:
            self._runs[self._head] = run - size if run > 0 else run + size
        return (STDOUT if run > 0 else STDERR), chunk

    async def next_item(self) -> tuple[int, bytes] | dict[str, Any] | BaseException:
        """Wait for the next chunk, or, once every chunk has been taken, the end."""
        while True:
            chunk = self.take_chunk()
            if chunk is not None:
                return chunk
            if self.end is not None:
                return self.end
            self._ready.clear()
            await self._ready.wait()

    def release(self, count: int) -> None:
        """The reader is done with ``count`` bytes it took (handed to its client, or dropped): they are credit."""
        if count < 0 or count > self._taken:
            raise ValueError(f"release of {count} output bytes, but {self._taken} are taken")
        self._taken -= count
        self.credit_due += count

    def drop(self) -> None:
        """Nobody will read this output: what is queued, and whatever comes later, is credit at once."""
        self.dropping = True
        self.credit_due += len(self._data)
        self._data.clear()
        del self._runs[:]
        self._head = 0

    def acknowledge(self) -> int:
        """Take the credit due, to send as one OUTPUT_ACK (at most the window, since it is part of what is
        outstanding); from now on those bytes no longer count against the window."""
        count, self.credit_due = self.credit_due, 0
        self.window.give_back(count)
        return count


@dataclass
class GuestExec:
    """One exec in the box: its output (with its credit window), its stdin window and its exit."""

    link: GuestLink
    id: int
    started: asyncio.Future[dict[str, Any]]
    output: ExecOutput = field(default_factory=ExecOutput)
    window: wire.StdinWindow = field(default_factory=wire.StdinWindow)
    window_opened: asyncio.Event = field(default_factory=asyncio.Event)
    stdin_closed: bool = False
    exited: bool = False

    async def next_output(self) -> tuple[int, bytes] | dict[str, Any] | GuestFailure:
        """The next ``(stream, chunk)``, then the EXIT body or the failure.  Each chunk's bytes must be given back
        with :meth:`release_output` once the client has them or they were dropped: until then the guest holds back
        that much of this exec's output."""
        return cast("tuple[int, bytes] | dict[str, Any] | GuestFailure", await self.output.next_item())

    def release_output(self, count: int) -> None:
        """``count`` bytes of taken output are done with: give them back to the guest as credit."""
        self.output.release(count)
        self.link.send_credit_soon(self)

    async def send_stdin(self, data: bytes) -> None:
        """Send stdin, waiting whenever the guest's window is full (a process that never reads blocks only itself)."""
        view = memoryview(data)
        while view:
            while self.window.available == 0:
                if self.exited:
                    return
                self.window_opened.clear()
                await self.window_opened.wait()
            if self.exited or self.stdin_closed:
                return
            take = min(len(view), self.window.available, wire.MAX_ID_DATA)
            self.window.take(take)
            await self.link.send(wire.encode_id_frame(wire.STDIN, self.id, bytes(view[:take])))
            view = view[take:]

    async def close_stdin(self) -> None:
        if not self.stdin_closed and not self.exited:
            self.stdin_closed = True
            await self.link.send(wire.encode_id_frame(wire.STDIN_EOF, self.id))

    async def signal(self, signum: int, *, timeout: float | None = None) -> None:
        if not self.exited:
            await self.link.request("signal", timeout=timeout, target=self.id, signal=signum)

    async def resize(self, rows: int, cols: int) -> dict[str, Any] | None:
        """Set a pty exec's window size; returns the guest's reply (None once the exec has ended)."""
        if not 1 <= rows <= wire.MAX_WINSIZE or not 1 <= cols <= wire.MAX_WINSIZE:
            raise ValueError(f"rows and cols must be in 1..{wire.MAX_WINSIZE}")
        if self.exited:
            return None
        return await self.link.request("resize", target=self.id, rows=rows, cols=cols)
