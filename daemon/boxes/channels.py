"""Host listeners for a box's channels: the boot configuration served once, and the agent connection accepted once."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from ..limits import FRAME_PAYLOAD


class ChannelError(RuntimeError):
    """A box channel could not be served; the message says which and why."""


async def _listen(path: Path, box_uid: int, handler: Any) -> asyncio.AbstractServer:
    path.unlink(missing_ok=True)
    server = await asyncio.start_unix_server(handler, path=str(path), limit=FRAME_PAYLOAD.default + 16)
    # The box's unprivileged host uid must be able to connect; nobody else.
    os.chown(path, box_uid, box_uid)
    os.chmod(path, 0o600)
    return server


class BootServer:
    """Serves the boot configuration to the first connection, then stops listening and removes the socket.

    Made without a configuration (a box started ahead, ``pool.py``), it accepts the guest's connection and holds
    it, unanswered, until ``release`` gives the configuration; the guest waits in its boot meanwhile."""

    def __init__(self, path: Path, box_uid: int, config: dict[str, Any] | None = None) -> None:
        self.path = path
        self.box_uid = box_uid
        self.payload = b""
        self.served = asyncio.Event()
        self._released = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        if config is not None:
            self.release(config)

    def release(self, config: dict[str, Any]) -> None:
        """The configuration to send (now, to a guest already waiting)."""
        payload = json.dumps(config, separators=(",", ":"), sort_keys=True).encode()
        if len(payload) > FRAME_PAYLOAD.default:
            raise ChannelError("the boot configuration is over 1 MiB")
        self.payload = payload
        self._released.set()

    async def start(self) -> None:
        self._server = await _listen(self.path, self.box_uid, self._serve)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.served.is_set():
            writer.close()
            return
        self.served.set()
        await self._stop_listening()
        try:
            await self._released.wait()
            if self.payload:  # else closed unreleased: the guest reads no configuration and ends
                writer.write(self.payload)
                await writer.drain()
        finally:
            writer.close()

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self.path.unlink(missing_ok=True)

    async def close(self) -> None:
        """Stop listening; a connection held for a configuration never released is closed."""
        await self._stop_listening()
        self._released.set()


class AgentListener:
    """Accepts exactly one connection from the guest on the agent socket; later ones are closed at once."""

    def __init__(self, path: Path, box_uid: int) -> None:
        self.path = path
        self.box_uid = box_uid
        self.connection: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] | None = None
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.connection = asyncio.get_running_loop().create_future()
        self._server = await _listen(self.path, self.box_uid, self._accept)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.connection is not None
        if self.connection.done():
            writer.close()
            return
        self.connection.set_result((reader, writer))
        # One guest, one connection: nothing else in the box may open a second channel.
        if self._server is not None:
            self._server.close()
            self._server = None
        self.path.unlink(missing_ok=True)

    async def wait(self, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        assert self.connection is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self.connection), timeout)
        except TimeoutError:
            raise ChannelError(f"the guest agent did not connect within {timeout:.0f}s") from None

    async def close(self) -> None:
        """Stop listening; an accepted connection belongs to whoever took it from ``wait``."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.path.unlink(missing_ok=True)
