"""The opening of one TLS tunnel, sans-IO: which client bytes the proxy may forward, and when.

The proxy feeds ``TlsOpening`` every byte the client sends after ``CONNECT`` (``from_client``) and every byte the
server sends (``from_server``; the proxy forwards those to the client at once, as they come). Each call returns a
``Step``: the client bytes it may now forward upstream, a ``Refuse`` (close the tunnel; after a server-side refusal,
once the server's bytes so far reached the client), or ``open`` (from now on relay both ways without asking).

1. Nothing is forwarded until the first ClientHello is admitted (``ClientHelloReader``); then exactly its records.
2. Everything the client sends after it is held (at most ``limits.EGRESS_HELD_BEFORE_SERVERHELLO``) until the
   server's first handshake message shows what comes next (``ServerHelloReader``). Held, because a client could
   send a second ClientHello naming another server right behind the first, and a server that then asks for a retry
   would read it: the proxy forwards client bytes again only once it knows no second hello is due.
3. A ServerHello: the held bytes go out, the tunnel is open. A HelloRetryRequest: the held and later bytes go to
   the reader of the second hello, which must name the same server; once admitted, back to 2. A second
   HelloRetryRequest (RFC 8446 §4.1.4 forbids it) or anything that is not a ServerHello: refused.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..limits import EGRESS_HELD_BEFORE_SERVERHELLO
from .clienthello import ClientHelloReader
from .serverhello import ServerAnswerKind, ServerHelloReader
from .tls_verdicts import BAD_SERVERHELLO, HELD_TOO_MUCH, Admit, Refuse, message_for


@dataclass(frozen=True)
class Step:
    """What the proxy does after one call: forward ``to_server`` upstream; close on ``refused``; relay freely once
    ``open``."""

    to_server: bytes = b""
    refused: Refuse | None = None
    open: bool = False


class _State(enum.Enum):
    READING_HELLO = "reading a ClientHello"
    AWAITING_SERVER = "holding the client's bytes until the server's first answer"
    OPEN = "open"
    REFUSED = "refused"


@dataclass
class TlsOpening:
    """Checks the ClientHello (and the second one after a HelloRetryRequest) before a tunnel forwards anything."""

    connect_host: str
    held_limit: int = EGRESS_HELD_BEFORE_SERVERHELLO.default
    admitted: list[Admit] = field(default_factory=list)  # the hellos forwarded, first then second, for the record
    _reader: ClientHelloReader = field(init=False)
    _server: ServerHelloReader = field(init=False, default_factory=ServerHelloReader)
    _held: bytearray = field(init=False, default_factory=bytearray)
    _state: _State = field(init=False, default=_State.READING_HELLO)

    def __post_init__(self) -> None:
        self._reader = ClientHelloReader(self.connect_host)

    @property
    def state(self) -> str:
        return self._state.value

    def from_client(self, data: bytes) -> Step:
        if self._state is _State.OPEN:
            return Step(to_server=data, open=True)
        if self._state is _State.REFUSED:
            raise RuntimeError("this tunnel's opening was refused; close it")
        if self._state is _State.READING_HELLO:
            return self._read_hello(data)
        self._held += data
        if len(self._held) > self.held_limit:
            return self._refuse(Refuse(HELD_TOO_MUCH, message_for(
                HELD_TOO_MUCH, f"limit {EGRESS_HELD_BEFORE_SERVERHELLO.name} ({self.held_limit} bytes) reached: the "
                "client sent that much after its ClientHello before the server answered")))
        return Step()

    def from_server(self, data: bytes) -> Step:
        if self._state is _State.OPEN:
            return Step(open=True)
        if self._state is _State.REFUSED:
            raise RuntimeError("this tunnel's opening was refused; close it")
        to_server = b""
        retried_now = False
        for answer in self._server.feed(data):
            if self._state is not _State.AWAITING_SERVER or retried_now:
                # An answer to the second hello before the proxy forwarded it: the server cannot have read it.
                return self._refuse(Refuse(BAD_SERVERHELLO, message_for(
                    BAD_SERVERHELLO, f"the server sent more handshake ({answer.detail}) before it had the "
                    "client's second ClientHello")))
            if answer.kind is ServerAnswerKind.SERVER_HELLO:
                self._state = _State.OPEN
                held, self._held = bytes(self._held), bytearray()
                return Step(to_server=held, open=True)
            if answer.kind is ServerAnswerKind.NOT_SERVER_HELLO:
                return self._refuse(Refuse(BAD_SERVERHELLO, message_for(BAD_SERVERHELLO, answer.detail)))
            if len(self.admitted) > 1:
                return self._refuse(Refuse(BAD_SERVERHELLO, message_for(
                    BAD_SERVERHELLO, "the server sent a second HelloRetryRequest, which RFC 8446 forbids")))
            retried_now = True
            self._state = _State.READING_HELLO
            self._reader = self._reader.expect_second_hello()
            held, self._held = bytes(self._held), bytearray()
            step = self._read_hello(held) if held else Step()
            if step.refused:
                return step
            to_server = step.to_server
        return Step(to_server=to_server)

    def _read_hello(self, data: bytes) -> Step:
        verdict = self._reader.feed(data)
        if verdict is None:
            return Step()
        if isinstance(verdict, Refuse):
            return self._refuse(verdict)
        self.admitted.append(verdict)
        self._state = _State.AWAITING_SERVER
        self._held = bytearray()
        step = Step(to_server=verdict.forward)
        if verdict.rest:
            held = self.from_client(verdict.rest)
            if held.refused:
                return held
        return step

    def _refuse(self, refusal: Refuse) -> Step:
        self._state = _State.REFUSED
        return Step(refused=refusal)
