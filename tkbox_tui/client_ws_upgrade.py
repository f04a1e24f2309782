"""The WebSocket upgrade to the daemon, without I/O: the request (``client_http.request_head``) and the check of its
reply (``client_http_reply``, strict): a ``101`` whose ``Upgrade``, ``Connection`` and ``Sec-WebSocket-Accept`` are
the ones asked for, with no extension or subprotocol; any other status is ``WebSocketRefused``, a broken reply is
``daemon_lost``.  Shared by the asyncio channel (``client_ws``) and the blocking one (``client_ws_blocking``).
"""

from __future__ import annotations

import base64
import os

from .client_errors import DaemonError, lost
from .client_http import HEAD_CAP, request_head
from .client_http_reply import HeadTooLarge, ReplyBroken, ReplyHead, ReplyReader
from .client_ws_frames import accept_for


class WebSocketRefused(DaemonError):
    """The daemon answered the upgrade with an HTTP status instead of a WebSocket (``status``: 404, 409, …)."""

    def __init__(self, status: int) -> None:
        super().__init__("ws_refused", f"the daemon refused the WebSocket ({status})", status)


class Upgrade:
    """One upgrade: ``request`` to send, then ``feed`` each read of the reply (``b""`` at the end of the
    connection) until it returns True; ``rest`` is what the daemon sent after the reply's head (frames)."""

    def __init__(self, target: str) -> None:
        self.key = base64.b64encode(os.urandom(16))
        self.request = request_head("GET", target, extra=(("Upgrade", "websocket"), ("Connection", "Upgrade"),
                                                          ("Sec-WebSocket-Key", self.key.decode("ascii")),
                                                          ("Sec-WebSocket-Version", "13")))
        self._reply = ReplyReader(HEAD_CAP, upgrade=True)

    @property
    def rest(self) -> bytes:
        return self._reply.rest

    def feed(self, data: bytes) -> bool:
        try:
            pieces = self._reply.feed(data)
        except (ReplyBroken, HeadTooLarge):
            raise lost() from None
        head = next((piece for piece in pieces if isinstance(piece, ReplyHead)), None)
        if head is None:
            if not data:
                raise lost()
            return False
        if head.status != 101:
            raise WebSocketRefused(head.status)
        headers = head.headers
        connection = [token.strip() for token in headers.get("connection", "").lower().split(",")]
        if headers.get("upgrade", "").lower() != "websocket" or "upgrade" not in connection or \
                headers.get("sec-websocket-accept", "").encode("latin-1") != accept_for(self.key) or \
                headers.get("sec-websocket-extensions") or headers.get("sec-websocket-protocol"):
            raise lost()  # not the WebSocket that was asked for
        return True
