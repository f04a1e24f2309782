"""The signer's asyncio shell: newline-delimited JSON over a Unix socket, answered in order.

The caller's identity is the socket peer's uid (SO_PEERCRED), never a field.  Only
the signer's own uid and root are served; anyone else gets ``unauthenticated`` and
the connection is closed.  A line over 1 MiB gets ``quota_exceeded`` and a close;
any other bad line gets ``invalid_request`` and the connection stays open.  Requests
on one connection may be pipelined: they are handled concurrently (sharing fsyncs)
and answered in the order they came.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import strictjson
from ..tasks import spawn
from .rpc_schema import MAX_LINE_BYTES, error
from .service import SignerService

READ_TIMEOUT_SECONDS = 300.0
CHECKPOINT_INTERVAL_SECONDS = 10.0
MAX_PIPELINED = 256
SEND_HIGH_WATER = 64 * 1024  # bytes of replies the socket may hold unsent before reading pauses
BACKLOG = 256


def peer_uid(sock: socket.socket) -> int:
    """The connecting process's uid, from the kernel."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


_REPLY_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # built once: json.dumps builds one per call


def encode_reply(reply: dict[str, Any]) -> bytes:
    return _REPLY_ENCODER.encode(reply).encode() + b"\n"


class SignerServer:
    """Serves a SignerService on a Unix socket path."""

    def __init__(self, service: SignerService, socket_path: Path, *, allowed_uids: Iterable[int] | None = None) -> None:
        self.service = service
        self.socket_path = socket_path
        self.allowed_uids = frozenset(allowed_uids if allowed_uids is not None else {os.getuid(), 0})
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._checkpointer: asyncio.Task[Any] | None = None

    async def start(self) -> None:
        self.socket_path.unlink(missing_ok=True)
        old_umask = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(
                self._serve_connection, path=str(self.socket_path), limit=MAX_LINE_BYTES + 1, backlog=BACKLOG
            )
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        self._checkpointer = spawn(self._checkpoint_periodically(), name="signer-checkpoints")

    async def close(self) -> None:
        """Stop accepting, let in-flight requests finish, make everything durable, sign a last checkpoint."""
        if self._server is not None:
            self._server.close()
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpointer
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        await self.service.store.drain()
        if not self.service.store.error and self.service.store.durable_tree.size:
            self.service.store.checkpoint()
        self.service.exports.discard_all()
        self.socket_path.unlink(missing_ok=True)

    async def _checkpoint_periodically(self) -> None:
        last_size = -1
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL_SECONDS)
            store = self.service.store
            if not store.error and store.durable_tree.size != last_size:
                last_size, _ = store.checkpoint()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._converse(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        uid = peer_uid(sock)
        if uid not in self.allowed_uids:
            writer.write(encode_reply(error("unauthenticated", f"uid {uid} may not use this signer")))
            await writer.drain()
            return
        identity = f"uid:{uid}"
        replies = _Replies(writer)
        try:
            await self._read_requests(reader, identity, replies)
        finally:
            await replies.finish()

    async def _read_requests(self, reader: asyncio.StreamReader, identity: str, replies: _Replies) -> None:
        while True:
            await replies.wait_for_room()
            try:
                async with asyncio.timeout(READ_TIMEOUT_SECONDS):  # no task per line, as wait_for would make
                    line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as partial:
                if partial.partial.strip():
                    replies.add(_done(error("invalid_request", "the last line has no newline")))
                return
            except asyncio.LimitOverrunError:
                replies.add(_done(error("quota_exceeded", f"a line is over {MAX_LINE_BYTES} bytes")))
                return
            except TimeoutError:
                return
            try:
                request = strictjson.loads_object(line[:-1], max_bytes=MAX_LINE_BYTES)
            except strictjson.StrictJSONError as exc:
                replies.add(_done(error("invalid_request", f"not one strict JSON object: {exc}")))
                continue
            # Created in arrival order: each handler fixes its log position before its first await.
            replies.add(spawn(self.service.handle(identity, request), name="signer-request"))


class _Replies:
    """One connection's unanswered requests, oldest first; each reply is written as soon as it and every
    reply before it are ready (from the futures' done callbacks: no task wakes up per reply).  Replies
    that become ready in one turn of the event loop (a group commit answers many at once) go out in one
    write, not one system call each.

    Bounded: at most MAX_PIPELINED unanswered requests, and no new line is read while the socket's send
    buffer is over its high-water mark (a caller that does not read its replies stops being read)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.pending: deque[asyncio.Future[dict[str, Any]]] = deque()
        self.room = asyncio.Event()
        self.room.set()
        self.answered = asyncio.Event()
        self.answered.set()
        self.write_due = False  # a write of the ready replies is scheduled for the end of this loop turn

    def add(self, future: asyncio.Future[dict[str, Any]]) -> None:
        self.pending.append(future)
        self.answered.clear()
        if len(self.pending) >= MAX_PIPELINED:
            self.room.clear()
        future.add_done_callback(self._schedule_write)

    def _schedule_write(self, _future: asyncio.Future[dict[str, Any]]) -> None:
        if not self.write_due:
            self.write_due = True
            asyncio.get_running_loop().call_soon(self._write_ready)

    def _write_ready(self) -> None:
        self.write_due = False
        pending = self.pending
        lines = []
        while pending and pending[0].done():
            future = pending.popleft()
            try:
                reply = future.result()
            except (Exception, asyncio.CancelledError) as exc:  # a handler bug must still be answered
                reply = error("unavailable", f"internal error: {type(exc).__name__}: {exc}")
            lines.append(encode_reply(reply))
        if lines and not self.writer.is_closing():
            self.writer.write(b"".join(lines))
        if len(pending) < MAX_PIPELINED:
            self.room.set()
        if not pending:
            self.answered.set()

    async def wait_for_room(self) -> None:
        if not self.room.is_set():
            await self.room.wait()
        if self.writer.transport.get_write_buffer_size() > SEND_HIGH_WATER:
            await self.writer.drain()

    async def finish(self) -> None:
        """Wait until every request is answered and its reply handed to the socket."""
        await self.answered.wait()
        await self.writer.drain()


def _done(reply: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
    future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    future.set_result(reply)
    return future
