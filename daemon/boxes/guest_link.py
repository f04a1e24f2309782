"""The host end of a box's agent channel: requests out, frames in, every frame checked as hostile input.

The guest is untrusted.  Frames are decoded by the shared sans-IO codec with host-side
direction checks; every JSON payload is parsed strictly and checked against the
schema of the op its id belongs to; an id the host did not issue, output for an exec
that has not started, output beyond the exec's window, a patch over its limit — any
violation closes the channel and reports why through ``on_failure``.  The daemon stays
unharmed: nothing the guest sends is buffered beyond one frame, each exec's output
window and the caller's bounds.

The read loop never waits on anyone: output goes to the exec's ``ExecOutput`` at once
and the reader gives credit back as its client takes it, so a slow client slows only
its own exec.  Every request has a deadline (``limits.GUEST_REQUEST_DEADLINES``); a
request whose caller timed out or was cancelled is *abandoned*: its id is remembered
(a bounded set, never reused meanwhile) and the guest's late frames for it are dropped
and counted in ``late_replies``, not taken for a forgery.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tkbox_guest import protocol as wire

from ..limits import GUEST_REQUEST_DEADLINES, PATCH_SIZE
from ..tasks import spawn
from .guest_exec import STDERR, STDOUT, GuestExec

READ_CHUNK = 256 * 1024
CREDIT_WRITE_BACKLOG = 64 * 1024  # bytes waiting in the channel's buffer beyond which acks wait for it to drain
# Released output is acknowledged once a quarter of the window has gathered: four acks per window, not one per chunk.
# It cannot stall the guest: the guest waits only with the whole window outstanding, and once the reader has taken
# and released all of it (its client read it, or is gone), all of it is credit due, which is more than this.
CREDIT_BATCH = wire.OUTPUT_WINDOW // 4
ABANDONED_MEMORY = 4096  # ids of abandoned requests whose late frames are dropped, not refused

__all__ = ["GuestExec", "GuestFailure", "GuestLink", "GuestTimeout", "STDERR", "STDOUT"]


class GuestFailure(RuntimeError):
    """The guest cannot serve this: the channel is gone, the guest broke the protocol, or (``GuestTimeout``) it
    did not answer in time; the message says which."""


class GuestTimeout(GuestFailure, TimeoutError):
    """The guest did not answer a request within its deadline; the request is abandoned, the channel stays open.

    A ``GuestFailure``, so every caller that copes with an unusable guest copes with a silent one, and a
    ``TimeoutError``, so callers that already bounded a guest call with ``asyncio.wait_for`` keep working; whoever
    must tell them apart catches ``GuestTimeout`` first.
    """

    def __init__(self, op: str, ident: int, limit: float) -> None:
        shown = f"{limit:g}"
        super().__init__(f"the guest did not answer {op} (request {ident}) within {shown} s")
        self.op = op
        self.ident = ident
        self.limit = limit


@dataclass
class _Pending:
    op: str
    reply: asyncio.Future[dict[str, Any]]
    data: bytearray = field(default_factory=bytearray)
    data_limit: int = 0
    exec: GuestExec | None = None
    answered: bool = False  # its RESPONSE has come


class GuestLink:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 on_failure: Callable[[str], None], max_data_bytes: int = PATCH_SIZE.default,
                 abandoned_memory: int = ABANDONED_MEMORY) -> None:
        self._reader = reader
        self._writer = writer
        self._on_failure = on_failure
        self._max_data_bytes = max_data_bytes
        self._decoder = wire.FrameDecoder(accept=wire.GUEST_TO_HOST)
        self._pending: dict[int, _Pending] = {}
        self._execs: dict[int, GuestExec] = {}
        self._abandoned: OrderedDict[int, _Pending] = OrderedDict()  # oldest first
        self._abandoned_memory = abandoned_memory
        self._credit_due: dict[int, GuestExec] = {}  # execs whose credit waits for the channel to drain, in order
        self._credit_wake = asyncio.Event()
        self._next_id = 1
        self._write_lock = asyncio.Lock()
        self.failure: str | None = None
        self.broke_protocol = False  # the failure was a protocol violation (else the channel closed or broke)
        self.late_replies = 0  # frames the guest sent for abandoned requests, dropped
        self.timeouts = 0  # requests that ran past their deadline
        self._task = spawn(self._read_loop(), name="guest-link")
        self._credit_task = spawn(self._send_credit(), name="guest-link-credit")

    # ---- sending -------------------------------------------------------------------------

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
        while True:
            ident = self._next_id
            self._next_id = self._next_id + 1 if self._next_id < wire.MAX_U32 else 1
            if ident not in self._pending and ident not in self._abandoned and ident not in self._credit_due:
                return ident

    async def request(self, op: str, *, data_limit: int = 0, timeout: float | None = None,
                      **fields: Any) -> dict[str, Any]:
        """Send one request and wait for its RESPONSE (with any DATA collected, at most ``data_limit`` bytes).

        Waits at most ``timeout`` seconds (default: the op's deadline in ``limits.GUEST_REQUEST_DEADLINES``), then
        raises :class:`GuestTimeout`; a timed-out or cancelled request is abandoned.
        """
        if self.failure:
            raise GuestFailure(self.failure)
        limit = GUEST_REQUEST_DEADLINES[op].default if timeout is None else timeout
        ident = self._new_id()
        pending = _Pending(op, asyncio.get_running_loop().create_future(), data_limit=data_limit)
        self._pending[ident] = pending
        frame = wire.encode_json_frame(wire.REQUEST, {"id": ident, "op": op, **fields})
        reply = await self._await_reply(ident, pending, frame, limit)
        if data_limit:
            reply = {**reply, "_data": bytes(pending.data)}
        return reply

    async def exec(self, argv: list[str], cwd: str, env: dict[str, str], timeout_ms: int, *,
                   pty: bool = False, rows: int | None = None, cols: int | None = None,
                   timeout: float | None = None) -> GuestExec:
        """Start a process; returns once the guest answered (``started`` holds the answer, which may be a refusal).

        ``pty=True`` runs it on a new pseudo-terminal of ``rows`` x ``cols`` (the guest's 24 x 80 when not given).
        Raises GuestFailure, or GuestTimeout past ``timeout`` (default: the exec start deadline).
        """
        request: dict[str, Any] = {"argv": argv, "cwd": cwd, "env": env, "timeout_ms": timeout_ms}
        if pty:
            request["pty"] = True
            if rows is not None and cols is not None:
                if not 1 <= rows <= wire.MAX_WINSIZE or not 1 <= cols <= wire.MAX_WINSIZE:
                    raise ValueError(f"rows and cols must be in 1..{wire.MAX_WINSIZE}")
                request.update(rows=rows, cols=cols)
        if self.failure:
            raise GuestFailure(self.failure)
        limit = GUEST_REQUEST_DEADLINES["exec"].default if timeout is None else timeout
        ident = self._new_id()
        started: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        handle = GuestExec(self, ident, started)
        pending = _Pending("exec", started, exec=handle)
        self._pending[ident] = pending
        self._execs[ident] = handle
        frame = wire.encode_json_frame(wire.REQUEST, {"id": ident, "op": "exec", **request})
        try:
            await self._await_reply(ident, pending, frame, limit)
        except BaseException:
            # Still listed only if it did start, just as its caller gave up (cancelled, or the deadline struck
            # in the same turn): nobody will read it, so it is abandoned and killed like one that starts late.
            if self._execs.get(ident) is handle:
                self._abandon(ident)
                spawn(self._kill_abandoned(ident), name=f"guest-link-kill-{ident}")
            raise
        return handle

    async def _await_reply(self, ident: int, pending: _Pending, frame: bytes, limit: float) -> dict[str, Any]:
        """Send ``frame`` and wait for its reply within ``limit`` seconds; abandon the id if the wait is cut short."""
        try:
            async with asyncio.timeout(limit):
                await self.send(frame)
                return await pending.reply
        except TimeoutError:
            self.timeouts += 1
            raise GuestTimeout(pending.op, ident, limit) from None
        finally:
            if self._pending.get(ident) is pending and (not pending.reply.done() or pending.reply.cancelled()):
                self._abandon(ident)

    def _abandon(self, ident: int) -> None:
        """Nobody waits for this id any more: forget its request, remember the id (bounded) so late frames are
        dropped, and drop an exec's output (its credit goes back, so the guest can reach its EXIT)."""
        pending = self._pending.pop(ident)
        self._execs.pop(ident, None)
        pending.data = bytearray()  # a diff's DATA so far is nobody's now
        if pending.exec is not None:
            pending.exec.output.drop()
        self._abandoned[ident] = pending
        while len(self._abandoned) > self._abandoned_memory:
            self._abandoned.popitem(last=False)

    def send_credit_soon(self, handle: GuestExec) -> None:
        """Acknowledge the exec's released output once ``CREDIT_BATCH`` has gathered: at once while the channel is
        not backed up, else as soon as it drains (credit released meanwhile is merged into one OUTPUT_ACK per exec,
        so the backlog stays bounded)."""
        if self.failure is not None or handle.exited or handle.output.credit_due < CREDIT_BATCH:
            return  # after EXIT the guest needs no credit (and would ignore it)
        if not self._credit_due and self._writer.transport.get_write_buffer_size() < CREDIT_WRITE_BACKLOG:
            self._write_credit(handle)
        else:
            self._credit_due[handle.id] = handle
            self._credit_wake.set()

    def _write_credit(self, handle: GuestExec) -> None:
        # One whole frame in one write: it cannot split another frame, so it needs no write lock.
        self._writer.write(wire.encode_output_ack(handle.id, handle.output.acknowledge()))

    async def _send_credit(self) -> None:
        while self.failure is None:
            await self._credit_wake.wait()
            self._credit_wake.clear()
            while self._credit_due and self.failure is None:
                async with self._write_lock:
                    try:
                        await self._writer.drain()
                    except (ConnectionError, OSError) as exc:
                        self._fail(f"the agent channel broke while writing: {exc}")
                        return
                ident = next(iter(self._credit_due))
                handle = self._credit_due.pop(ident)
                if self.failure is None and not handle.exited and handle.output.credit_due:
                    self._write_credit(handle)

    # ---- receiving -----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(READ_CHUNK)
                if not data:
                    self._decoder.eof()
                    raise GuestFailure("the guest closed the agent channel")
                for frame in self._decoder.feed(data):
                    self._dispatch(frame)  # never waits: no reader can stall the channel
        except wire.ProtocolError as exc:
            self.broke_protocol = not self.failure
            self._fail(f"the guest broke the protocol: {exc}")
        except GuestFailure as exc:
            self._fail(str(exc))
        except (ConnectionError, OSError) as exc:
            self._fail(f"the agent channel failed: {exc}")

    def _dispatch(self, frame: wire.Frame) -> None:
        kind = frame.type
        if kind == wire.RESPONSE:
            body = wire.loads_strict(frame.payload)
            ident = body.get("id")
            if type(ident) is int and ident in self._abandoned:
                self._late_response(ident, body)
                return
            pending = self._pending.get(ident) if type(ident) is int else None
            if pending is None or pending.reply.done():
                raise wire.ProtocolError(f"RESPONSE for id {ident!r}, which has no request waiting")
            wire.validate_response(body, pending.op)
            pending.answered = True
            if pending.op != "exec" or body["ok"] is False:
                self._pending.pop(ident)
                if pending.exec is not None:
                    self._execs.pop(ident, None)
            pending.reply.set_result(body)
        elif kind in (wire.STDOUT, wire.STDERR):
            ident, chunk = wire.split_id(frame.payload)
            abandoned = self._abandoned.get(ident)
            if abandoned is not None and abandoned.exec is not None and abandoned.answered:
                self.late_replies += 1
                handle = abandoned.exec  # dropped within its window; the credit lets the guest reach EXIT
            else:
                handle = self._started_exec(ident, "output")
            try:
                handle.output.received(STDOUT if kind == wire.STDOUT else STDERR, chunk)
            except wire.ProtocolError as exc:
                raise wire.ProtocolError(f"exec {ident} sent output beyond its window: {exc}") from None
            if handle.output.dropping:
                self.send_credit_soon(handle)
        elif kind == wire.EXIT:
            body = wire.validate_exit(wire.loads_strict(frame.payload))
            ident = body["id"]
            abandoned = self._abandoned.get(ident)
            if abandoned is not None and abandoned.exec is not None and abandoned.answered:
                self.late_replies += 1
                abandoned.exec.exited = True
                del self._abandoned[ident]  # the id's last frame
                return
            handle = self._started_exec(ident, "EXIT")
            handle.exited = True
            handle.window_opened.set()
            self._execs.pop(ident, None)
            self._pending.pop(ident, None)
            handle.output.finish(body)
        elif kind == wire.DATA:
            ident, chunk = wire.split_id(frame.payload)
            abandoned = self._abandoned.get(ident)
            if abandoned is not None and abandoned.op in ("diff", "files"):
                self.late_replies += 1
                return
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

    def _late_response(self, ident: int, body: dict[str, Any]) -> None:
        """The RESPONSE of an abandoned request: checked, counted, dropped.  It ends the id, except for an exec
        that did start: nobody waits for it, so it is killed, and its id ends with its EXIT."""
        abandoned = self._abandoned[ident]
        if abandoned.answered:
            raise wire.ProtocolError(f"a second RESPONSE for id {ident}")
        wire.validate_response(body, abandoned.op)
        abandoned.answered = True
        self.late_replies += 1
        if abandoned.op == "exec" and body["ok"] is True:  # started: its output and EXIT may follow now
            spawn(self._kill_abandoned(ident), name=f"guest-link-kill-{ident}")
        else:
            del self._abandoned[ident]

    async def _kill_abandoned(self, ident: int) -> None:
        with contextlib.suppress(GuestFailure):
            await self.request("signal", target=ident, signal=9)

    def _started_exec(self, ident: int, what: str) -> GuestExec:
        handle = self._execs.get(ident)
        if handle is None or not handle.started.done() or handle.exited:
            raise wire.ProtocolError(f"{what} for id {ident}, which is not a running exec")
        return handle

    # ---- the end -------------------------------------------------------------------------

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
            handle.output.finish(error)  # after the output already queued
        self._pending.clear()
        self._execs.clear()
        self._credit_due.clear()
        self._credit_wake.set()  # the credit sender sees the failure and ends
        self._writer.close()
        self._on_failure(reason)

    async def close(self) -> None:
        self._fail("the host closed the agent channel")
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
