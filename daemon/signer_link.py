"""The daemon's asyncio client for the signer: one pipelined connection, replies matched in order.

The connection is an ``asyncio.Protocol``: each reply line is parsed and its call's future resolved in the same
event-loop turn that read it (no reader task between the socket and the caller: a decision waits one turn less).
Any failure to reach the signer, or a connection lost with calls in flight, raises ``SignerUnreachable`` for those
calls; the next call reconnects.  Callers treat an unreachable signer as a refusal: nothing is ever allowed
without an answer.  A reply line is bounded (``MAX_LINE_BYTES``); a longer one, a reply nobody asked for, or one
that is not a strict JSON object ends the connection and fails every call in flight.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from pathlib import Path
from typing import Any

from . import strictjson
from .signer.idempotency import new_request_id as new_request_id  # callers make request ids here
from .signer.rpc_schema import MAX_LINE_BYTES

CALL_TIMEOUT_SECONDS = 30.0
CLOSE_TIMEOUT_SECONDS = 5.0  # the transport's close is the loop's next turn; a bound all the same
MAX_REPLY_BYTES = MAX_LINE_BYTES + 1  # a reply line with its newline


class SignerCallError(RuntimeError):
    """The signer answered with an error object."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class SignerUnreachable(SignerCallError):
    def __init__(self, message: str) -> None:
        super().__init__("unreachable", message)


class _SignerConnection(asyncio.Protocol):
    """One connection: requests written in call order, each reply line handed to the oldest call waiting."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future[dict[str, Any]]] = deque()
        self.buffer = bytearray()
        self.lost_because = ""
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    @property
    def usable(self) -> bool:
        return not self.lost_because and self.transport is not None and not self.transport.is_closing()

    def send(self, line: bytes) -> asyncio.Future[dict[str, Any]]:
        assert self.transport is not None
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        self.transport.write(line)
        return future

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        start = 0
        while (end := self.buffer.find(b"\n", start)) >= 0:
            if end - start + 1 > MAX_REPLY_BYTES:
                return self.fail(f"the signer sent a line over {MAX_LINE_BYTES} bytes")
            try:
                reply = strictjson.loads_object(bytes(self.buffer[start:end]), max_bytes=MAX_REPLY_BYTES)
            except ValueError as exc:
                return self.fail(f"the signer connection failed: {exc}")
            start = end + 1
            if not self.pending:
                return self.fail("the signer sent an answer nobody asked for")
            future = self.pending.popleft()
            if not future.done():
                future.set_result(reply)
        del self.buffer[:start]
        if len(self.buffer) > MAX_REPLY_BYTES:
            self.fail(f"the signer sent a line over {MAX_LINE_BYTES} bytes")

    def eof_received(self) -> bool:
        self.fail("the signer closed the connection")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(f"the signer connection failed: {exc}" if exc else "the signer closed the connection")
        if not self.closed.done():
            self.closed.set_result(None)

    def fail(self, reason: str) -> None:
        """End the connection; every call still waiting gets ``SignerUnreachable(reason)``."""
        if not self.lost_because:
            self.lost_because = reason
        self.buffer.clear()
        if self.transport is not None:
            self.transport.close()
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_exception(SignerUnreachable(self.lost_because))


class AsyncSignerClient:
    def __init__(self, socket_path: Path | str) -> None:
        self.socket_path = str(socket_path)
        self._connection: _SignerConnection | None = None
        self._connect_lock = asyncio.Lock()

    async def _ensure_connected(self) -> _SignerConnection:
        connection = self._connection
        if connection is not None and connection.usable:
            return connection
        async with self._connect_lock:
            if self._connection is not None and self._connection.usable:
                return self._connection
            try:
                _, connection = await asyncio.get_running_loop().create_unix_connection(
                    _SignerConnection, self.socket_path)
            except OSError as exc:
                raise SignerUnreachable(
                    f"cannot reach the signer at {self.socket_path} ({exc.strerror or exc}); "
                    "start one with: tkbox signer up"
                ) from None
            self._connection = connection
            return connection

    async def call(self, method: str, **fields: Any) -> dict[str, Any]:
        """One call; raises SignerCallError for an error answer and SignerUnreachable for no answer."""
        connection = await self._ensure_connected()
        future = connection.send(json.dumps({"method": method, **fields}, separators=(",", ":")).encode() + b"\n")
        try:
            async with asyncio.timeout(CALL_TIMEOUT_SECONDS):  # no task per call, as wait_for would make
                reply = await asyncio.shield(future)
        except TimeoutError:
            connection.fail(f"the signer did not answer {method} within {CALL_TIMEOUT_SECONDS:.0f}s")
            raise SignerUnreachable(f"the signer did not answer {method} within {CALL_TIMEOUT_SECONDS:.0f}s") from None
        if "error" in reply:
            error = reply["error"]
            raise SignerCallError(str(error.get("code", "?")), str(error.get("message", "")))
        return reply

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.fail("the daemon closed its signer connection")
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                    await asyncio.shield(connection.closed)
            except TimeoutError:  # writes the signer never read: drop them
                assert connection.transport is not None
                connection.transport.abort()
