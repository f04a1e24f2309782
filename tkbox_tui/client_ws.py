"""A WebSocket to the daemon over its Unix socket: wsproto's protocol on asyncio streams.

``WebSocketChannel.open`` does the upgrade (a refusal is ``WebSocketRefused`` with the daemon's status); then
``receive`` gives whole messages (``str`` for text, ``bytes`` for binary, ``None`` once the daemon closes or the
connection is lost), each at most ``max_message`` bytes (a longer one is ``reply_too_large``, refused once
``max_message + 1`` bytes of it arrived).  Pings are answered here.  Nothing the library raises leaves this module:
failures are ``DaemonError``.
"""

from __future__ import annotations

import asyncio

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from .client_errors import DaemonError, lost, too_large
from .client_http import READ_SIZE
from .client_http_async import connect, disconnect

NORMAL_CLOSURE = 1000


class WebSocketRefused(DaemonError):
    """The daemon answered the upgrade with an HTTP status instead of a WebSocket (``status``: 404, 409, …)."""

    def __init__(self, status: int) -> None:
        super().__init__("ws_refused", f"the daemon refused the WebSocket ({status})", status)


class WebSocketChannel:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: WSConnection,
                 max_message: int) -> None:
        self._reader = reader
        self._writer = writer
        self._connection = connection
        self._max_message = max_message
        self._pending: list[object] = []  # events read with the handshake or a previous message
        self._closed = False

    @classmethod
    async def open(cls, socket_path: object, target: str, *, max_message: int) -> WebSocketChannel:
        reader, writer = await connect(socket_path)
        connection = WSConnection(ConnectionType.CLIENT)
        channel = cls(reader, writer, connection, max_message)
        try:
            await channel._write(connection.send(Request(host="tkbox", target=target)))
            while True:
                for event in await channel._read_events(handshake=True):
                    if isinstance(event, AcceptConnection):
                        return channel
                    if isinstance(event, RejectConnection):
                        raise WebSocketRefused(event.status_code)
                    channel._pending.append(event)
        except BaseException:
            await channel.close()
            raise

    async def _write(self, data: bytes) -> None:
        try:
            self._writer.write(data)
            await self._writer.drain()
        except OSError:
            raise lost() from None

    async def _read_events(self, *, handshake: bool = False) -> list[object]:
        """The events the next read completes; after the upgrade, the end of the connection is the library's
        abnormal closing (a ``CloseConnection``); during it, the daemon lost."""
        try:
            data = await self._reader.read(READ_SIZE)
        except OSError:
            data = b""
        if not data and handshake:
            raise lost()
        try:
            self._connection.receive_data(data or None)
            return list(self._connection.events())
        except (RemoteProtocolError, LocalProtocolError):  # a broken upgrade reply, data after the close
            raise lost() from None

    async def send_text(self, text: str) -> None:
        await self._send(TextMessage(data=text))

    async def send_bytes(self, data: bytes) -> None:
        await self._send(BytesMessage(data=data))

    async def _send(self, event: TextMessage | BytesMessage) -> None:
        if self._closed or self._connection.state is not ConnectionState.OPEN:
            raise lost()
        try:
            data = self._connection.send(event)
        except LocalProtocolError:
            raise lost() from None
        await self._write(data)

    async def receive(self) -> str | bytes | None:
        """The next whole message, or None when the WebSocket is closed (by the daemon, or the connection lost)."""
        parts: list[str | bytes] = []
        size = 0
        while not self._closed:
            events, self._pending = self._pending, []
            if not events:
                events = await self._read_events()
            for index, event in enumerate(events):
                if isinstance(event, TextMessage | BytesMessage):
                    size += len(event.data.encode()) if isinstance(event.data, str) else len(event.data)
                    if size > self._max_message:
                        await self.close()
                        raise too_large("WebSocket message", self._max_message)
                    parts.append(event.data)
                    if event.message_finished:
                        self._pending = events[index + 1:]
                        return "".join(parts) if isinstance(event, TextMessage) else b"".join(parts)  # type: ignore[arg-type]
                elif isinstance(event, Ping):
                    await self._write(self._connection.send(event.response()))
                elif isinstance(event, CloseConnection):
                    if self._connection.state is ConnectionState.REMOTE_CLOSING:
                        try:
                            await self._write(self._connection.send(event.response()))
                        except DaemonError:
                            pass
                    await self.close()
                    return None
        return None

    async def close(self) -> None:
        """Say goodbye (a close frame, when the WebSocket is still open) and close the connection."""
        if self._closed:
            return
        self._closed = True
        if self._connection.state is ConnectionState.OPEN:
            try:
                self._writer.write(self._connection.send(CloseConnection(code=NORMAL_CLOSURE)))
            except (OSError, LocalProtocolError):
                pass
        await disconnect(self._writer)
