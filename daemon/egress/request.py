"""The proxy's reading of a box client's request head, with h11 (sans-IO: bytes in, a request or a refusal out).

A box's client speaks HTTP/1.1 to the proxy: ``CONNECT host:port`` (a tunnel) or an absolute-form request for
plain HTTP (``GET http://host/path HTTP/1.1`` with a ``Host`` header that must agree). Nothing else is accepted:
origin-form requests (a client that thinks the proxy is the server), ``OPTIONS *``, an absolute-form request
without exactly one Host header (``proxy.parse_target``), ``Upgrade``, and any head h11 refuses (bad framing, both
``Content-Length`` and ``Transfer-Encoding``, obsolete line folding, a head over ``limits.EGRESS_REQUEST_HEAD``).
``RequestHead.feed`` returns None until a whole head has arrived; the bytes after the head (a tunnel's first bytes,
or an HTTP request's body, which h11 keeps framing for the caller) stay in the h11 connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import h11

from ..limits import EGRESS_REQUEST_HEAD

FORBIDDEN_REQUEST_HEADERS = frozenset({b"upgrade"})  # a protocol switch the proxy would not read
HOP_BY_HOP_HEADERS = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"expect",
                                b"te", b"trailer"})
"""Headers meant for the proxy or for one hop, never forwarded upstream (``Expect`` too: the proxy sends the body as
soon as it has it, so nobody waits for a ``100 Continue``)."""


class RequestRefused(Exception):
    """The request head is not one the proxy reads; ``rule`` is stable, the message says what and what to do."""

    def __init__(self, rule: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.rule = rule
        self.status = status


@dataclass(frozen=True)
class ProxyRequest:
    """``method`` (``CONNECT`` or another), ``target`` as sent (authority for CONNECT, the absolute URL otherwise),
    the ``Host`` header's value ("" when absent) and the headers, lower-cased names, in order."""

    method: str
    target: str
    host_header: str
    headers: tuple[tuple[bytes, bytes], ...]

    @property
    def is_connect(self) -> bool:
        return self.method == "CONNECT"


class RequestHead:
    """Reads one request head from a box client (``feed``); ``connection`` then frames an HTTP request's body."""

    def __init__(self, *, max_head: int = EGRESS_REQUEST_HEAD.default) -> None:
        self.connection = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
        self.request: ProxyRequest | None = None

    def feed(self, data: bytes) -> ProxyRequest | None:
        """More bytes from the client (``b""`` at its EOF); the request once its head is whole, else None."""
        if self.request is not None:
            raise RuntimeError("the head was read already")
        self.connection.receive_data(data)
        try:
            event = self.connection.next_event()
        except h11.RemoteProtocolError as exc:
            status = 431 if "exceed" in str(exc) or "too long" in str(exc).lower() else 400
            raise RequestRefused("egress-bad-request", f"the request is not HTTP/1.1 the proxy can read: "
                                                       f"{_readable(exc)}", status) from None
        if event is h11.NEED_DATA:
            return None
        if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            raise RequestRefused("egress-bad-request", "the client closed before sending a whole request head")
        assert isinstance(event, h11.Request)
        self.request = _checked(event)
        return self.request

    def tunnel_bytes(self) -> bytes:
        """The bytes a CONNECT client sent after its head (already read with it): the tunnel's first bytes."""
        return bytes(self.connection.trailing_data[0])


_BYTES_REPR = re.compile(r"bytearray\(b(['\"])(.*)\1\)", re.DOTALL)


def _readable(exc: h11.RemoteProtocolError) -> str:
    """h11's message with the client's bytes quoted as escaped text (``'GET \\x00'``), not as a Python
    ``bytearray(b'...')``: the repr has already escaped every byte that is not printable ASCII."""
    return _BYTES_REPR.sub(lambda match: f"'{match[2]}'", str(exc))


def _checked(event: h11.Request) -> ProxyRequest:
    method = event.method.decode("ascii")
    try:
        target = event.target.decode("ascii")
    except UnicodeDecodeError:
        raise RequestRefused("egress-bad-target", "the request target is not ASCII") from None
    names = [name for name, _ in event.headers]
    for name in names:
        if name in FORBIDDEN_REQUEST_HEADERS:
            raise RequestRefused("egress-header", f"the {name.decode()} header is not relayed by the proxy; send "
                                                  "the request without it")
    hosts = [value for name, value in event.headers if name == b"host"]
    if len(hosts) > 1:
        raise RequestRefused("egress-host-header", "the request has more than one Host header")
    host_header = hosts[0].decode("ascii", "replace") if hosts else ""
    if method == "CONNECT":
        if target.startswith(("http://", "https://", "/")):
            raise RequestRefused("egress-bad-target", "CONNECT takes host:port, not a URL or a path")
    elif not target.lower().startswith("http://"):
        hint = "use CONNECT for https" if target.lower().startswith("https://") else \
            "send the absolute URL (http://host/path) to the proxy, or CONNECT host:port"
        raise RequestRefused("egress-bad-target", f"a {method} through the proxy must name an absolute http:// URL; "
                                                  f"{hint}")
    return ProxyRequest(method, target, host_header, tuple(event.headers))
