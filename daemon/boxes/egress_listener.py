"""A box's egress channel on the host: the listener on its ``egress.sock`` and the seam the egress proxy plugs into.

Inside the box the guest's forwarder (``tkbox_guest.forwarder``) opens one Unix connection here per TCP connection
a command makes to ``127.0.0.1:3128``. Unlike the agent socket this one accepts many connections, each from the
guest's host uid only (the socket is that uid's, 0600, and every peer is checked with ``SO_PEERCRED``), at most
``limits.CONNECTIONS_PER_BOX`` open at once, and hands each to the box's ``EgressHandler``. Until the proxy is
plugged in, that handler is :func:`refuse_door_not_enabled`. ``close`` ends the listener and every connection at
once (a box stop begins with it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .. import limits

log = logging.getLogger("tkbox.daemon")

EgressHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
"""Serves one egress connection from a box: ``async def handler(reader, writer) -> None``. The listener closes
the connection when the handler returns or raises, and cancels the handler when the box stops."""

STREAM_LIMIT = 64 * 1024  # the StreamReader's buffer: a handler reads what it needs, the rest waits in the socket
LINGER_BYTES = 64 * 1024  # after a refusal, what is read and dropped so the client sees the answer, not a reset
LINGER_S = 5.0
WRITE_S = 5.0
NOT_ENABLED_BODY = ("the network door is not enabled for this box: nothing leaves it, and this connection was not "
                    "forwarded\n")


def refusal_response(body: str) -> bytes:
    """An ``HTTP/1.1 403 Forbidden`` answer with ``body`` (plain text), closing the connection."""
    data = body.encode("utf-8")
    head = (f"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode("ascii") + data


async def answer_and_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response: bytes) -> None:
    """Write ``response``, end our output, and drop what the client still sends (bounded in bytes and time) before
    the close, so an answer sent before the request was read is not lost to a connection reset."""
    try:
        writer.write(response)
        await asyncio.wait_for(writer.drain(), WRITE_S)
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(LINGER_S):
            dropped = 0
            while dropped < LINGER_BYTES and (data := await reader.read(STREAM_LIMIT)):
                dropped += len(data)
    except (OSError, TimeoutError):
        pass
    finally:
        writer.close()


async def refuse_door_not_enabled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The default handler: a 403 naming the door, and nothing dialled."""
    await answer_and_close(reader, writer, refusal_response(NOT_ENABLED_BODY))


def peer_uid(writer: asyncio.StreamWriter) -> int | None:
    """The connecting process's uid, from the kernel (None if the transport has no socket)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


class EgressListener:
    """Listens on ``path`` for the guest (host uid ``box_uid``) and serves each connection with ``handler``."""

    def __init__(self, path: Path, box_uid: int, handler: EgressHandler, *,
                 max_connections: int = limits.CONNECTIONS_PER_BOX.default) -> None:
        self.path = path
        self.box_uid = box_uid  # the only peer uid served; a test may set it to its own
        self.handler = handler
        self.max_connections = max_connections
        self.refused_peers = 0  # connections from another uid, closed unanswered
        self.refused_over_limit = 0  # connections past max_connections, answered 403 naming the limit
        self.handler_failures = 0
        self.closed = False
        self._server: asyncio.AbstractServer | None = None
        self._connections: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)
        # A burst of the box's connections must wait in the accept queue, not be dropped: room for all it may open.
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.path), limit=STREAM_LIMIT,
                                                       backlog=4 * self.max_connections)
        # The box's unprivileged host uid must be able to connect; nobody else (its jobs run under another uid).
        os.chown(self.path, self.box_uid, self.box_uid)
        os.chmod(self.path, 0o600)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.closed:
            writer.transport.abort()
            return
        try:
            uid = peer_uid(writer)
        except OSError:
            uid = None
        if uid != self.box_uid:
            self.refused_peers += 1
            writer.transport.abort()
            return
        if len(self._connections) >= self.max_connections:
            # Answered without waiting for anything (a small write the kernel takes at once), so connections past
            # the limit hold nothing on the host.
            self.refused_over_limit += 1
            body = limits.CONNECTIONS_PER_BOX.refusal(f"{len(self._connections)} connections open") + "\n"
            writer.write(refusal_response(body))
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        ended = False
        try:
            await self.handler(reader, writer)
            ended = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in the handler: this connection ends, the others go on
            self.handler_failures += 1
            if self.handler_failures == 1:
                log.warning("an egress connection handler failed: %s: %s", type(exc).__name__, exc)
        finally:
            self._connections.pop(task, None)
            if ended:
                writer.close()  # what the handler wrote is still delivered
            else:
                writer.transport.abort()

    async def close(self) -> None:
        """Stop listening, remove the socket, and end every open connection now (their handlers are cancelled)."""
        self.closed = True
        if self._server is not None:
            self._server.close()
            self._server = None
        self.path.unlink(missing_ok=True)
        tasks = [task for task in self._connections if task is not asyncio.current_task()]
        for task, writer in list(self._connections.items()):
            writer.transport.abort()
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
