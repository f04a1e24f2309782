"""A WebSocket to the daemon over its Unix socket without an event loop (the CLI's ``tkbox exec``; the console's is
``client_ws``): the same upgrade (``client_ws_upgrade``), frames and caps (``client_ws_frames``) on a blocking
socket, for a caller that waits on ``fileno()`` with ``selectors`` and then calls ``receive_ready``.

``receive_ready`` reads once (the socket is readable, so it does not block) and gives the whole messages that read
completed (``[]``: none yet), or None once the WebSocket has ended (the daemon closed it, the connection was lost,
or the daemon broke the framing, answered with a close frame naming the rule).  A message over ``max_message``
bytes is ``reply_too_large``; pings are answered here; failures are ``DaemonError``.
"""

from __future__ import annotations

import socket

from .client_errors import lost, too_large
from .client_http import READ_SIZE, connect_blocking
from .client_ws_frames import BINARY, NORMAL_CLOSURE, TEXT, TOO_BIG, Inbound, MessageTooLarge, client_frame
from .client_ws_upgrade import Upgrade


class BlockingWebSocket:
    def __init__(self, sock: socket.socket, max_message: int, first: bytes = b"") -> None:
        self._sock = sock
        self._inbound = Inbound(max_message)
        self._max_message = max_message
        self._pending = bytes(first)  # bytes read with the upgrade's reply
        self._ended = False
        self._closed = False

    @classmethod
    def open(cls, socket_path: object, target: str, *, max_message: int) -> BlockingWebSocket:
        """Connect and upgrade (``WebSocketRefused`` with the daemon's status when it answers otherwise)."""
        sock = connect_blocking(socket_path)
        try:
            upgrade = Upgrade(target)
            sock.sendall(upgrade.request)
            while True:
                try:
                    data = sock.recv(READ_SIZE)
                except OSError:
                    data = b""
                if upgrade.feed(data):
                    return cls(sock, max_message, upgrade.rest)
        except OSError:
            sock.close()
            raise lost() from None
        except BaseException:
            sock.close()
            raise

    def fileno(self) -> int:
        return self._sock.fileno()

    @property
    def ready(self) -> bool:
        """Whether ``receive_ready`` has something without a read (bytes that came with the upgrade's reply, or the
        end after the daemon's close): call it without waiting for the socket."""
        return bool(self._pending) or self._ended

    def send_text(self, text: str) -> None:
        self._send(TEXT, text.encode("utf-8"))

    def send_bytes(self, data: bytes) -> None:
        self._send(BINARY, data)

    def _send(self, opcode: int, payload: bytes) -> None:
        if self._closed or self._inbound.sent_close:
            raise lost()
        try:
            self._sock.sendall(client_frame(opcode, payload))
        except OSError:
            raise lost() from None

    def receive_ready(self) -> list[str | bytes] | None:
        """The messages one read completes (the socket is readable), or None once the WebSocket has ended."""
        if self._ended or self._closed:
            self.close()
            return None
        data, self._pending = self._pending, b""
        if not data:
            try:
                data = self._sock.recv(READ_SIZE)
            except OSError:
                data = b""
        if not data:  # the connection ended without a close (abnormal closure): nothing to answer
            self._inbound.sent_close = True
            self.close()
            return None
        try:
            messages, answers, self._ended = self._inbound.feed(data)
        except MessageTooLarge:
            self._write_quietly(self._inbound.close_frame(TOO_BIG))
            self.close()
            raise too_large("WebSocket message", self._max_message) from None
        if answers:
            self._write_quietly(answers)
        if self._ended and not messages:
            self.close()
            return None
        return messages

    def _write_quietly(self, data: bytes) -> None:
        """Pongs and close frames: as far as the connection still takes them."""
        try:
            self._sock.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        """Say goodbye (a close frame, when none was sent) and close the connection."""
        if self._closed:
            return
        self._write_quietly(self._inbound.close_frame(NORMAL_CLOSURE))
        self._closed = True
        self._sock.close()
