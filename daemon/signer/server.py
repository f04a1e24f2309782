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
BACKLOG = 256


def peer_uid(sock: socket.socket) -> int:
    """The connecting process's uid, from the kernel."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


def encode_reply(reply: dict[str, Any]) -> bytes:
    return json.dumps(reply, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


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
        replies: asyncio.Queue[asyncio.Future[dict[str, Any]] | None] = asyncio.Queue(MAX_PIPELINED)
        sender = spawn(self._send_in_order(replies, writer), name="signer-replies")
        try:
            await self._read_requests(reader, identity, replies)
        finally:
            await replies.put(None)
            await sender

    async def _read_requests(self, reader: asyncio.StreamReader, identity: str,
                             replies: asyncio.Queue[asyncio.Future[dict[str, Any]] | None]) -> None:
        while True:
            try:
                async with asyncio.timeout(READ_TIMEOUT_SECONDS):  # no task per line, as wait_for would make
                    line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as partial:
                if partial.partial.strip():
                    await replies.put(_done(error("invalid_request", "the last line has no newline")))
                return
            except asyncio.LimitOverrunError:
                await replies.put(_done(error("quota_exceeded", f"a line is over {MAX_LINE_BYTES} bytes")))
                return
            except TimeoutError:
                return
            try:
                request = strictjson.loads_object(line[:-1], max_bytes=MAX_LINE_BYTES)
            except strictjson.StrictJSONError as exc:
                await replies.put(_done(error("invalid_request", f"not one strict JSON object: {exc}")))
                continue
            # Created in arrival order: each handler fixes its log position before its first await.
            await replies.put(spawn(self.service.handle(identity, request), name="signer-request"))

    @staticmethod
    async def _send_in_order(replies: asyncio.Queue[asyncio.Future[dict[str, Any]] | None],
                             writer: asyncio.StreamWriter) -> None:
        while (pending := await replies.get()) is not None:
            try:
                reply = await pending
            except Exception as exc:  # a handler bug must still be answered, never a silent drop
                reply = error("unavailable", f"internal error: {type(exc).__name__}: {exc}")
            writer.write(encode_reply(reply))
            if replies.empty():
                await writer.drain()


def _done(reply: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
    future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    future.set_result(reply)
    return future
