"""A WebSocket to the daemon over its Unix socket, on asyncio streams (the console's; the CLI's is
``client_ws_blocking``): the upgrade (``client_ws_upgrade``) and the frames (``client_ws_frames``).

``WebSocketChannel.open`` does the upgrade (a refusal is ``WebSocketRefused`` with the daemon's status; a ``101``
whose ``Sec-WebSocket-Accept`` or ``Upgrade`` is wrong is ``daemon_lost``); then ``receive`` gives whole messages
(``str`` for text, ``bytes`` for binary, ``None`` once the daemon closes, the connection is lost, or the daemon broke
the framing, which is answered with a close frame naming the rule), each at most ``max_message`` bytes (a longer
one is ``reply_too_large``, refused at the header that announces it).  Pings are answered here.  Failures are
``DaemonError``.
"""

from __future__ import annotations

import asyncio

from .client_errors import lost, too_large
from .client_http import READ_SIZE
from .client_http_async import connect, disconnect
from .client_ws_frames import BINARY, NORMAL_CLOSURE, TEXT, TOO_BIG, Inbound, MessageTooLarge, client_frame
from .client_ws_upgrade import Upgrade, WebSocketRefused

__all__ = ["NORMAL_CLOSURE", "WebSocketChannel", "WebSocketRefused"]


class WebSocketChannel:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_message: int,
                 first: bytes = b"") -> None:
        self._reader = reader
        self._writer = writer
        self._inbound = Inbound(max_message)
        self._max_message = max_message
        self._pending = bytes(first)  # bytes read with the upgrade's reply
        self._messages: list[str | bytes] = []
        self._ended = False
        self._closed = False

    @classmethod
    async def open(cls, socket_path: object, target: str, *, max_message: int) -> WebSocketChannel:
        reader, writer = await connect(socket_path)
        try:
            upgrade = Upgrade(target)
            writer.write(upgrade.request)
            await writer.drain()
            while True:
                try:
                    data = await reader.read(READ_SIZE)
                except OSError:
                    data = b""
                if upgrade.feed(data):
                    return cls(reader, writer, max_message, upgrade.rest)
        except OSError:
            await disconnect(writer)
            raise lost() from None
        except BaseException:
            await disconnect(writer)
            raise

    async def _write(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError:
            raise lost() from None

    async def send_text(self, text: str) -> None:
        await self._send(TEXT, text.encode("utf-8"))

    async def send_bytes(self, data: bytes) -> None:
        await self._send(BINARY, data)

    async def _send(self, opcode: int, payload: bytes) -> None:
        if self._closed or self._inbound.sent_close:
            raise lost()
        await self._write(client_frame(opcode, payload))

    async def receive(self) -> str | bytes | None:
        """The next whole message, or None when the WebSocket is closed (by the daemon, or the connection lost)."""
        while not self._messages:
            if self._ended or self._closed:
                await self.close()
                return None
            data, self._pending = self._pending, b""
            if not data:
                try:
                    data = await self._reader.read(READ_SIZE)
                except OSError:
                    data = b""
            if not data:  # the connection ended without a close (abnormal closure): nothing to answer
                self._inbound.sent_close = True
                await self.close()
                return None
            try:
                self._messages, answers, self._ended = self._inbound.feed(data)
            except MessageTooLarge:
                self._write_quietly(self._inbound.close_frame(TOO_BIG))
                await self.close()
                raise too_large("WebSocket message", self._max_message) from None
            if answers:
                self._write_quietly(answers)
        return self._messages.pop(0)

    def _write_quietly(self, data: bytes) -> None:
        """Pongs and close frames: as far as the connection still takes them."""
        try:
            self._writer.write(data)
        except OSError:
            pass

    async def close(self) -> None:
        """Say goodbye (a close frame, when none was sent) and close the connection."""
        if self._closed:
            return
        self._write_quietly(self._inbound.close_frame(NORMAL_CLOSURE))
        self._closed = True
        await disconnect(self._writer)
