"""What a WebSocket server (wsproto, the other side in the client's tests) writes for a list of messages: each
text or bytes, cut into 1..n fragments, optionally after a ping."""

from __future__ import annotations

from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, Ping, TextMessage

Message = tuple[str | bytes, int, bool]  # the message, its fragments, a ping before it


def server_bytes(items: list[Message], ping_payload: bytes = b"p", server: Connection | None = None) -> bytes:
    """The frames' bytes, in order; ``server`` to keep writing on one connection (e.g. to close it after)."""
    server = server or Connection(ConnectionType.SERVER)
    out = bytearray()
    for data, fragments, ping_first in items:
        if ping_first:
            out += server.send(Ping(payload=ping_payload))
        step = max(1, -(-len(data) // fragments))
        pieces = [data[i: i + step] for i in range(0, len(data), step)] or [data]
        for index, piece in enumerate(pieces):
            last = index == len(pieces) - 1
            out += server.send(TextMessage(data=piece, message_finished=last) if isinstance(data, str)
                               else BytesMessage(data=piece, message_finished=last))
    return bytes(out)
