"""The daemon's asyncio client for the signer: one pipelined connection, replies matched in order.

Any failure to reach the signer, or a connection lost with calls in flight, raises
``SignerUnreachable`` for those calls; the next call reconnects.  Callers treat an
unreachable signer as a refusal: nothing is ever allowed without an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from pathlib import Path
from typing import Any

from . import strictjson
from .signer.idempotency import new_request_id as new_request_id  # callers make request ids here
from .signer.rpc_schema import MAX_LINE_BYTES
from .tasks import spawn

CALL_TIMEOUT_SECONDS = 30.0


class SignerCallError(RuntimeError):
    """The signer answered with an error object."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class SignerUnreachable(SignerCallError):
    def __init__(self, message: str) -> None:
        super().__init__("unreachable", message)


class AsyncSignerClient:
    def __init__(self, socket_path: Path | str) -> None:
        self.socket_path = str(socket_path)
        self._writer: asyncio.StreamWriter | None = None
        self._pending: deque[asyncio.Future[dict[str, Any]]] = deque()
        self._reader_task: asyncio.Task[Any] | None = None
        self._connect_lock = asyncio.Lock()

    async def _ensure_connected(self) -> asyncio.StreamWriter:
        async with self._connect_lock:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            try:
                reader, writer = await asyncio.open_unix_connection(self.socket_path, limit=MAX_LINE_BYTES + 2)
            except OSError as exc:
                raise SignerUnreachable(
                    f"cannot reach the signer at {self.socket_path} ({exc.strerror or exc}); "
                    "start one with: tkbox signer up"
                ) from None
            self._writer = writer
            self._reader_task = spawn(self._read_replies(reader, writer), name="signer-link-reader")
            return writer

    async def _read_replies(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reason = "the signer closed the connection"
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                reply = strictjson.loads_object(line, max_bytes=MAX_LINE_BYTES + 1)
                if not self._pending:
                    reason = "the signer sent an answer nobody asked for"
                    break
                future = self._pending.popleft()
                if not future.done():
                    future.set_result(reply)
        except (OSError, ValueError, asyncio.LimitOverrunError) as exc:
            reason = f"the signer connection failed: {exc}"
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()
            while self._pending:
                future = self._pending.popleft()
                if not future.done():
                    future.set_exception(SignerUnreachable(reason))

    async def call(self, method: str, **fields: Any) -> dict[str, Any]:
        """One call; raises SignerCallError for an error answer and SignerUnreachable for no answer."""
        writer = await self._ensure_connected()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        writer.write(json.dumps({"method": method, **fields}, separators=(",", ":")).encode() + b"\n")
        try:
            async with asyncio.timeout(CALL_TIMEOUT_SECONDS):  # no task per call, as wait_for would make
                reply = await asyncio.shield(future)
        except TimeoutError:
            writer.close()
            raise SignerUnreachable(f"the signer did not answer {method} within {CALL_TIMEOUT_SECONDS:.0f}s") from None
        if "error" in reply:
            error = reply["error"]
            raise SignerCallError(str(error.get("code", "?")), str(error.get("message", "")))
        return reply

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        if self._reader_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._reader_task
