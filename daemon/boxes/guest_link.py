"""The host end of a box's agent channel: requests out, frames in, every frame checked as hostile input.

The guest is untrusted.  Frames are decoded by the shared sans-IO codec with host-side
direction checks; every JSON payload is parsed strictly and checked against the
schema of the op its id belongs to; an id the host did not issue, output for an exec
that has not started, a patch over its limit — any violation closes the channel and
reports why through ``on_failure``.  The daemon stays unharmed: nothing the guest
sends is buffered beyond one frame and the caller's bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tkbox_guest import protocol as wire

from ..limits import PATCH_SIZE
from ..tasks import spawn

READ_CHUNK = 256 * 1024
OUTPUT_QUEUE_FRAMES = 256
STDOUT, STDERR = 1, 2

class GuestFailure(RuntimeError):
    """The channel to the guest is gone or the guest broke the protocol; the message says which."""


@dataclass
class GuestExec:
    """One exec in the box: its output queue, its stdin window and its exit."""

    link: GuestLink
    id: int
    started: asyncio.Future[dict[str, Any]]
    outputs: asyncio.Queue[tuple[int, bytes] | dict[str, Any] | GuestFailure] = field(
        default_factory=lambda: asyncio.Queue(OUTPUT_QUEUE_FRAMES))
    window: wire.StdinWindow = field(default_factory=wire.StdinWindow)
    window_opened: asyncio.Event = field(default_factory=asyncio.Event)
    stdin_closed: bool = False
    exited: bool = False

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

    async def signal(self, signum: int) -> None:
        if not self.exited:
            await self.link.request("signal", target=self.id, signal=signum)

    async def resize(self, rows: int, cols: int) -> dict[str, Any] | None:
        """Set a pty exec's window size; returns the guest's reply (None once the exec has ended)."""
        if not 1 <= rows <= wire.MAX_WINSIZE or not 1 <= cols <= wire.MAX_WINSIZE:
            raise ValueError(f"rows and cols must be in 1..{wire.MAX_WINSIZE}")
        if self.exited:
            return None
        return await self.link.request("resize", target=self.id, rows=rows, cols=cols)


@dataclass
class _Pending:
    op: str
    reply: asyncio.Future[dict[str, Any]]
    data: bytearray = field(default_factory=bytearray)
    data_limit: int = 0
    exec: GuestExec | None = None


class GuestLink:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 on_failure: Callable[[str], None], max_data_bytes: int = PATCH_SIZE.default) -> None:
        self._reader = reader
        self._writer = writer
        self._on_failure = on_failure
        self._max_data_bytes = max_data_bytes
        self._decoder = wire.FrameDecoder(accept=wire.GUEST_TO_HOST)
        self._pending: dict[int, _Pending] = {}
        self._execs: dict[int, GuestExec] = {}
        self._next_id = 1
        self._write_lock = asyncio.Lock()
        self.failure: str | None = None
        self._task = spawn(self._read_loop(), name="guest-link")

    async def send(self, frame: bytes) -> None:
        if self.failure:
            raise GuestFailure(self.failure)
        async with self._write_lock:
            self._writer.write(frame)
            try:
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                self._fail(f"the agent channel broke while writing: {exc}")
                raise GuestFailure(self.failure or "channel closed") from None

    def _new_id(self) -> int:
        ident = self._next_id
        self._next_id = self._next_id + 1 if self._next_id < wire.MAX_U32 else 1
        return ident

    async def request(self, op: str, *, data_limit: int = 0, **fields: Any) -> dict[str, Any]:
        """Send one request and wait for its RESPONSE (with any DATA collected, at most ``data_limit`` bytes)."""
        ident = self._new_id()
        pending = _Pending(op, asyncio.get_running_loop().create_future(), data_limit=data_limit)
        self._pending[ident] = pending
        await self.send(wire.encode_json_frame(wire.REQUEST, {"id": ident, "op": op, **fields}))
        reply = await pending.reply
        if data_limit:
            reply = {**reply, "_data": bytes(pending.data)}
        return reply

    async def exec(self, argv: list[str], cwd: str, env: dict[str, str], timeout_ms: int, *,
                   pty: bool = False, rows: int | None = None, cols: int | None = None) -> GuestExec:
        """Start a process; returns once the guest said it started (or raises GuestFailure / the guest's error).

        ``pty=True`` runs it on a new pseudo-terminal of ``rows`` x ``cols`` (the guest's 24 x 80 when not given).
        """
        request: dict[str, Any] = {"argv": argv, "cwd": cwd, "env": env, "timeout_ms": timeout_ms}
        if pty:
            request["pty"] = True
            if rows is not None and cols is not None:
                if not 1 <= rows <= wire.MAX_WINSIZE or not 1 <= cols <= wire.MAX_WINSIZE:
                    raise ValueError(f"rows and cols must be in 1..{wire.MAX_WINSIZE}")
                request.update(rows=rows, cols=cols)
        ident = self._new_id()
        started: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        handle = GuestExec(self, ident, started)
        self._pending[ident] = _Pending("exec", started, exec=handle)
        self._execs[ident] = handle
        await self.send(wire.encode_json_frame(wire.REQUEST, {"id": ident, "op": "exec", **request}))
        return handle

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(READ_CHUNK)
                if not data:
                    self._decoder.eof()
                    raise GuestFailure("the guest closed the agent channel")
                for frame in self._decoder.feed(data):
                    await self._dispatch(frame)
        except wire.ProtocolError as exc:
            self._fail(f"the guest broke the protocol: {exc}")
        except GuestFailure as exc:
            self._fail(str(exc))
        except (ConnectionError, OSError) as exc:
            self._fail(f"the agent channel failed: {exc}")

    async def _dispatch(self, frame: wire.Frame) -> None:
        kind = frame.type
        if kind == wire.RESPONSE:
            body = wire.loads_strict(frame.payload)
            ident = body.get("id")
            pending = self._pending.get(ident) if type(ident) is int else None
            if pending is None or pending.reply.done():
                raise wire.ProtocolError(f"RESPONSE for id {ident!r}, which has no request waiting")
            wire.validate_response(body, pending.op)
            if pending.op != "exec" or body["ok"] is False:
                self._pending.pop(ident)
                if pending.exec is not None:
                    self._execs.pop(ident, None)
            pending.reply.set_result(body)
        elif kind in (wire.STDOUT, wire.STDERR):
            ident, chunk = wire.split_id(frame.payload)
            handle = self._started_exec(ident, "output")
            await handle.outputs.put((STDOUT if kind == wire.STDOUT else STDERR, chunk))
        elif kind == wire.EXIT:
            body = wire.validate_exit(wire.loads_strict(frame.payload))
            handle = self._started_exec(body["id"], "EXIT")
            handle.exited = True
            handle.window_opened.set()
            self._execs.pop(body["id"], None)
            self._pending.pop(body["id"], None)
            await handle.outputs.put(body)
        elif kind == wire.DATA:
            ident, chunk = wire.split_id(frame.payload)
            pending = self._pending.get(ident)
            if pending is None or pending.op not in ("diff", "files"):
                raise wire.ProtocolError(f"DATA for id {ident}, which is not a diff or files request")
            if len(pending.data) + len(chunk) > min(pending.data_limit, self._max_data_bytes):
                raise wire.ProtocolError(f"more DATA than the {pending.data_limit}-byte limit for {pending.op}")
            pending.data += chunk
        elif kind == wire.STDIN_ACK:
            ident, count = wire.decode_stdin_ack(frame.payload)
            handle = self._started_exec(ident, "STDIN_ACK")
            handle.window.give_back(count)
            handle.window_opened.set()
        else:
            raise wire.ProtocolError(f"frame type {kind} is not expected by the host")

    def _started_exec(self, ident: int, what: str) -> GuestExec:
        handle = self._execs.get(ident)
        if handle is None or not handle.started.done() or handle.exited:
            raise wire.ProtocolError(f"{what} for id {ident}, which is not a running exec")
        return handle

    def _fail(self, reason: str) -> None:
        if self.failure:
            return
        self.failure = reason
        error = GuestFailure(reason)
        for pending in self._pending.values():
            if not pending.reply.done():
                pending.reply.set_exception(error)
                pending.reply.exception()  # mark retrieved: the failure is reported through on_failure
        for handle in self._execs.values():
            handle.exited = True
            handle.window_opened.set()
            if handle.outputs.full():
                handle.outputs.get_nowait()  # the box is failing: make room for the reason
            handle.outputs.put_nowait(error)
        self._pending.clear()
        self._execs.clear()
        self._writer.close()
        self._on_failure(reason)

    async def close(self) -> None:
        self._fail("the host closed the agent channel")
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
