"""HTTP/1.1 to the daemon over its Unix socket: one request and its reply per connection, every read bounded.  ``HttpExchange`` is the protocol without I/O (bytes in, pieces of the reply out, the caps checked); the
blocking driver (``pieces_blocking``, ``collect_blocking``) is here, asyncio's is in ``client_http_async``.

The request is written here; the reply is read by ``client_http_reply`` (strict, small: h11 and the
``dataclasses`` it imports cost a CLI command ~20 ms before it sends a byte).  The caps: a reply head is at most
``HEAD_CAP`` bytes (a longer one is refused); a reply read whole has a body cap,
refused at its head when its Content-Length says more, else as soon as more arrives; a driver never reads more than
``HEAD_CAP + cap + 1`` bytes of such a reply from the socket.  A streamed reply (events, apply, export) has no
total cap: whoever reads it bounds each message (``LineSplitter``) or the total (an export's announced size).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from tkbox_daemon.limits import API_CONNECT_DEADLINE
from tkbox_daemon.wire import API_VERSION

from .client_errors import DaemonError, lost, too_large, unreachable
from .client_http_reply import HeadTooLarge, ReplyBroken, ReplyHead, ReplyReader

HEAD_CAP = 64 * 1024  # a reply's status line and headers; the daemon's are a few hundred bytes
READ_SIZE = 64 * 1024
CONNECT_DEADLINE_S = API_CONNECT_DEADLINE.default


class Head(ReplyHead):
    """A reply's status and headers (names lower-case, values as latin-1 text, the last of repeated names)."""

    __slots__ = ()

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def request_target(path: str, params: dict[str, str] | None = None) -> str:
    """``/v1{path}`` with ``params`` as its query (``path`` is already percent-encoded, see ``client.box_path``)."""
    query = f"?{urlencode(params)}" if params else ""
    return f"/{API_VERSION}{path}{query}"


class HttpExchange:
    """One request and its reply, without I/O: ``request_bytes`` to send, then ``receive`` each read (``b""`` at
    end of file) for the pieces it completes: the ``Head``, body chunks (``bytes``), ``None`` at the end.

    ``body_cap`` (None: a stream) bounds the body; ``read_size`` says how much a driver may read next so that no
    more than ``HEAD_CAP + body_cap + 1`` bytes are ever read.  A broken or cut reply is DaemonError
    ``daemon_lost``; one over its cap is ``reply_too_large``."""

    def __init__(self, method: str, target: str, *, json_body: Any = None, data: bytes | None = None,
                 body_cap: int | None = None, what: str = "reply") -> None:
        self.method = method
        self.target = target
        if json_body is not None:
            self.body, self.content_type = json.dumps(json_body).encode(), "application/json"
        elif data is not None:
            self.body, self.content_type = bytes(data), "application/octet-stream"
        else:
            self.body, self.content_type = b"", None
        self.body_cap = body_cap
        self.what = what
        self.bytes_read = 0
        self.body_received = 0
        self.finished = False
        self._reader = ReplyReader(HEAD_CAP)

    def request_bytes(self) -> bytes:
        return request_head(self.method, self.target, self.body, self.content_type) + self.body

    def read_size(self) -> int:
        """How many bytes a driver may read next; raises the over-cap error when none may be."""
        room = self._room()
        if room == 0:
            raise self.over_cap()
        return room

    def _room(self) -> int:
        if self.body_cap is None:
            return READ_SIZE
        return max(0, min(READ_SIZE, HEAD_CAP + self.body_cap + 1 - self.bytes_read))

    def over_cap(self) -> DaemonError:
        return too_large(self.what, self.body_cap if self.body_cap is not None else 0)

    def receive(self, data: bytes) -> list[Head | bytes | None]:
        self.bytes_read += len(data)
        try:
            parts = self._reader.feed(data)
        except HeadTooLarge:
            raise too_large(f"{self.what}'s head", HEAD_CAP) from None
        except ReplyBroken:  # a malformed reply, or one cut short
            raise lost() from None
        pieces: list[Head | bytes | None] = []
        for part in parts:
            if isinstance(part, ReplyHead):
                pieces.append(self._head(part))
            elif part is None:
                self.finished = True
                pieces.append(None)
            elif part:
                self.body_received += len(part)
                if self.body_cap is not None and self.body_received > self.body_cap:
                    raise self.over_cap()
                pieces.append(part)
        if not self.finished and self.body_cap is not None and self._room() == 0:
            raise self.over_cap()
        return pieces

    def _head(self, head: ReplyHead) -> Head:
        length = head.headers.get("content-length", "")
        if self.body_cap is not None and length.isdigit() and int(length) > self.body_cap:
            raise self.over_cap()  # said before a byte of it is read
        return Head(head.status, head.headers)


def request_head(method: str, target: str, body: bytes = b"", content_type: str | None = None,
                 extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A request's line and headers to the daemon: ``Connection: close`` (one request per connection), or the
    ``extra`` headers instead (the WebSocket upgrade's); a target that no request line can carry (a space, a control
    character, not ASCII) is a bug, refused by name."""
    if not target.startswith("/") or not all("!" <= char <= "~" for char in target):
        raise DaemonError("bad_request", f"the request cannot be sent: its target {target!r} is not a URL path")
    lines = [f"{method} {target} HTTP/1.1", "Host: tkbox"]
    lines += [f"{name}: {value}" for name, value in extra] or ["Connection: close"]
    if content_type is not None or method in ("POST", "PUT", "PATCH", "DELETE"):
        lines.append(f"Content-Length: {len(body)}")
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def connect_blocking(socket_path: object) -> socket.socket:
    """A connected Unix socket (blocking, no deadline once connected), or DaemonUnreachable."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_DEADLINE_S)
        sock.connect(str(socket_path))
        sock.settimeout(None)
    except OSError as error:
        sock.close()
        raise unreachable(socket_path, error) from None
    return sock


def pieces_blocking(socket_path: object, exchange: HttpExchange) -> Iterator[Head | bytes]:
    """The reply's ``Head`` and body chunks as they arrive, over a blocking socket closed when this ends."""
    sock = connect_blocking(socket_path)
    try:
        try:
            sock.sendall(exchange.request_bytes())
        except OSError:
            raise lost() from None
        yield from _read_blocking(sock, exchange)
    finally:
        sock.close()


def _read_blocking(sock: socket.socket, exchange: HttpExchange) -> Iterator[Head | bytes]:
    while True:
        size = exchange.read_size()
        try:
            data = sock.recv(size)
        except OSError:
            raise lost() from None
        for piece in exchange.receive(data):
            if piece is None:
                return
            yield piece


def collect(pieces: list[Head | bytes]) -> tuple[Head, bytes]:
    """The head and the whole body of a reply from its pieces."""
    head = pieces[0]
    if not isinstance(head, Head):
        raise lost()
    return head, b"".join(piece for piece in pieces[1:] if isinstance(piece, bytes))


def collect_blocking(socket_path: object, exchange: HttpExchange) -> tuple[Head, bytes]:
    return collect(list(pieces_blocking(socket_path, exchange)))


class LineSplitter:
    """Lines (without their ``\\n``) out of a byte stream, each at most ``cap`` bytes: a longer one is
    ``reply_too_large`` once ``cap + 1`` bytes of it arrived, whatever follows."""

    def __init__(self, cap: int, what: str) -> None:
        self.cap = cap
        self.what = what
        self._partial = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        self._partial += chunk
        lines = self._partial.split(b"\n")
        rest = lines.pop()
        if any(len(line) > self.cap for line in lines) or len(rest) > self.cap:
            raise too_large(self.what, self.cap)
        self._partial = bytearray(rest)
        return [bytes(line) for line in lines]

    @property
    def pending(self) -> bytes:
        """What arrived after the last ``\\n`` (a last line the stream did not end)."""
        return bytes(self._partial)
