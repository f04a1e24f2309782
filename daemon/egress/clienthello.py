"""The egress proxy's reader of a box client's TLS ClientHello, sans-IO: bytes in, ``Admit`` or ``Refuse`` out.

After ``CONNECT host:port`` the proxy forwards no byte upstream until this reader has admitted the ClientHello.
``ClientHelloReader(connect_host).feed(data)`` returns None while it needs more bytes; it reads TLS records
(handshake, record version 0x0301..0x0303, 1..2^14 bytes each), reassembles the ONE ClientHello they carry across any
number of records and writes, then reads it strictly (``clienthello_parse``) and checks its server name:

- the first record header's type and version must be a TLS handshake record's, else ``egress-not-tls`` (alert,
  change_cipher_spec, application data, an SSLv2-compatible hello, plain HTTP...), known from the first byte that
  differs: the caller decides whether a non-TLS tunnel may go to this port. Every later fault is
  ``egress-bad-clienthello``: another record type before the hello ends, a zero-length or oversized record,
  another handshake message first, bytes after the hello in its last record;
- bounded: the records together at most ``limits.EGRESS_CLIENTHELLO_RECORDS`` (32 KiB: a 16 KiB hello plus room for
  headers when it is cut into small records), the handshake message at most ``limits.EGRESS_CLIENTHELLO``
  (16 KiB; a hello with a post-quantum key share is about 2 KiB), else ``egress-clienthello-too-large``; the
  refusal comes as soon as a header states too much;
- an encrypted ClientHello (ECH, its drafts, ESNI) is ``egress-ech``;
- a CONNECT host that is a name: exactly one server_name with one host_name entry (``egress-bad-sni`` otherwise,
  ``egress-sni-missing`` without one), equal to the host ignoring ASCII case and one trailing dot
  (``egress-sni-mismatch``). A CONNECT host that is an IP address: the hello must carry NO server_name, since
  RFC 6066 forbids IP literals there (``Admit.server_name`` is then None, which the proxy records).

``Admit.forward`` is exactly the records that carry the hello, no byte after; ``Admit.rest`` is what was fed after
them. When the server answers with a HelloRetryRequest, ``expect_second_hello()`` gives the reader for the client's
second hello: before it only change_cipher_spec records (and application data when the first hello offered early
data) may come, and it is checked against the same CONNECT host, so it names the same server. ``tls_opening``
drives both readers and the server's side.
"""

from __future__ import annotations

import ipaddress

from ..limits import EGRESS_CLIENTHELLO, EGRESS_CLIENTHELLO_RECORDS
from .clienthello_parse import (
    EARLY_DATA,
    ECH_EXTENSIONS,
    ClientHelloFields,
    host_name_problem,
    normalised_host_name,
    parse_client_hello,
)
from .tls_verdicts import (
    BAD_CLIENTHELLO,
    BAD_SNI,
    CLIENTHELLO_TOO_LARGE,
    ECH,
    NOT_TLS,
    SNI_MISMATCH,
    SNI_MISSING,
    Admit,
    HelloRefused,
    Refuse,
    shown,
)

RECORD_HEADER = 5
RECORD_PAYLOAD_MAX = 2**14
HANDSHAKE_HEADER = 4
CHANGE_CIPHER_SPEC = 20
ALERT = 21
HANDSHAKE = 22
APPLICATION_DATA = 23
CLIENT_HELLO = 1
RECORD_VERSION_MINORS = (1, 2, 3)  # legacy_record_version 0x0301..0x0303
RECORD_TYPE_NAMES = {CHANGE_CIPHER_SPEC: "change_cipher_spec", ALERT: "alert", HANDSHAKE: "handshake",
                     APPLICATION_DATA: "application_data"}


def expected_server_name(connect_host: str) -> str | None:
    """The server name a hello must carry for ``connect_host``; None when the host is an IP address (with or
    without brackets), which must be sent with no server_name. Raises ValueError for a host no target parser
    would have let through (not ASCII, not a valid host name)."""
    bare = connect_host[1:-1] if connect_host.startswith("[") and connect_host.endswith("]") else connect_host
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        pass
    else:
        return None
    try:
        raw = connect_host.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError(f"CONNECT host {connect_host!r} is not ASCII (give its IDNA form)") from None
    problem = host_name_problem(raw)
    if problem:
        raise ValueError(f"CONNECT host {connect_host!r}: {problem}")
    return normalised_host_name(raw)


class ClientHelloReader:
    """Reads one ClientHello from the client's first bytes; ``feed`` until it returns ``Admit`` or ``Refuse``."""

    def __init__(self, connect_host: str, *, max_bytes: int = EGRESS_CLIENTHELLO_RECORDS.default,
                 max_hello: int = EGRESS_CLIENTHELLO.default, first_hello: Admit | None = None) -> None:
        self.connect_host = connect_host
        self.expected = expected_server_name(connect_host)
        self.max_bytes = max_bytes
        self.max_hello = max_hello
        self.first_hello = first_hello  # set when this reads the hello after a HelloRetryRequest
        self._received = bytearray()
        self._at = 0  # where the next record starts in _received
        self._handshake = bytearray()
        self._verdict: Admit | Refuse | None = None

    @property
    def verdict(self) -> Admit | Refuse | None:
        return self._verdict

    def feed(self, data: bytes) -> Admit | Refuse | None:
        """Take the client's next bytes; None while more are needed, else the verdict (given once)."""
        if self._verdict is not None:
            raise RuntimeError("this ClientHelloReader has given its verdict; it reads one hello")
        self._received += data
        try:
            verdict: Admit | Refuse | None = self._read_records()
        except HelloRefused as refused:
            verdict = refused.refusal(bytes(self._received))
        self._verdict = verdict
        return verdict

    def expect_second_hello(self) -> ClientHelloReader:
        """The reader for the hello a client sends after the server's HelloRetryRequest (only one may follow)."""
        if not isinstance(self._verdict, Admit) or self.first_hello is not None:
            raise RuntimeError("a second ClientHello follows only an admitted first one")
        return ClientHelloReader(self.connect_host, max_bytes=self.max_bytes, max_hello=self.max_hello,
                                 first_hello=self._verdict)

    def _read_records(self) -> Admit | None:
        while True:
            header = bytes(self._received[self._at:self._at + RECORD_HEADER])
            self._check_header(header)
            if len(header) < RECORD_HEADER:
                return None
            kind, length = header[0], int.from_bytes(header[3:5], "big")
            end = self._at + RECORD_HEADER + length
            if end > self.max_bytes:
                raise HelloRefused(CLIENTHELLO_TOO_LARGE, _over_limit(
                    EGRESS_CLIENTHELLO_RECORDS.name, self.max_bytes, EGRESS_CLIENTHELLO_RECORDS.how_to_raise,
                    f"the records carrying the ClientHello come to {end} bytes or more"))
            if end > len(self._received):
                return None
            payload = bytes(self._received[self._at + RECORD_HEADER:end])
            self._at = end
            if kind == HANDSHAKE:
                fields = self._take_handshake(payload)
                if fields is not None:
                    return self._judge(fields)
            elif kind == CHANGE_CIPHER_SPEC and payload != b"\x01":
                raise HelloRefused(BAD_CLIENTHELLO, "a change_cipher_spec record before the second ClientHello "
                                                    f"holds {shown(payload, 8)}, not the single byte 0x01")

    def _check_header(self, header: bytes) -> None:
        """Check as much of a record header as has arrived (the same verdict whatever the split)."""
        if not header:
            return
        opening = self._at == 0 and self.first_hello is None  # the first record header: not TLS at all?
        rule = NOT_TLS if opening else BAD_CLIENTHELLO
        kind = header[0]
        if kind not in self._allowed_record_types():
            if opening and kind & 0x80:
                raise HelloRefused(NOT_TLS, f"the client's first byte 0x{kind:02x} starts an SSLv2-compatible "
                                            "hello, which TLS 1.2 and later never send")
            if opening:
                raise HelloRefused(NOT_TLS, f"the client's first bytes are not a TLS handshake record (they "
                                            f"start {shown(header[:1])}, byte 0x{kind:02x})")
            raise HelloRefused(BAD_CLIENTHELLO, f"a {_record_type_name(kind)} record comes before the "
                                                "ClientHello ends; TLS forbids interleaving records there")
        if len(header) >= 2 and header[1] != 3 or len(header) >= 3 and header[2] not in RECORD_VERSION_MINORS:
            raise HelloRefused(rule, f"a record with version bytes {header[1:3].hex()} (TLS accepts 0301..0303)"
                                     + (" starts the client's bytes" if opening else " carries the ClientHello"))
        if len(header) == RECORD_HEADER:
            length = int.from_bytes(header[3:5], "big")
            if length > RECORD_PAYLOAD_MAX:
                raise HelloRefused(BAD_CLIENTHELLO, f"a record of {length} bytes, over TLS's "
                                                    f"{RECORD_PAYLOAD_MAX}")
            if length == 0 and kind != APPLICATION_DATA:
                raise HelloRefused(BAD_CLIENTHELLO, f"a zero-length {_record_type_name(kind)} record "
                                                    "(RFC 8446 section 5.1 forbids them)")

    def _allowed_record_types(self) -> tuple[int, ...]:
        if self.first_hello is None or self._handshake:
            return (HANDSHAKE,)
        if self.first_hello.offers_early_data:
            return (HANDSHAKE, CHANGE_CIPHER_SPEC, APPLICATION_DATA)
        return (HANDSHAKE, CHANGE_CIPHER_SPEC)

    def _take_handshake(self, payload: bytes) -> ClientHelloFields | None:
        self._handshake += payload
        if len(self._handshake) < HANDSHAKE_HEADER:
            return None
        message_type = self._handshake[0]
        if message_type != CLIENT_HELLO:
            raise HelloRefused(BAD_CLIENTHELLO, f"the client's first handshake message is of type {message_type}, "
                                                "not a ClientHello (1)")
        total = HANDSHAKE_HEADER + int.from_bytes(self._handshake[1:4], "big")
        if total > self.max_hello:
            raise HelloRefused(CLIENTHELLO_TOO_LARGE, _over_limit(
                EGRESS_CLIENTHELLO.name, self.max_hello, EGRESS_CLIENTHELLO.how_to_raise,
                f"the ClientHello states {total} bytes"))
        if len(self._handshake) < total:
            return None
        if len(self._handshake) > total:
            raise HelloRefused(BAD_CLIENTHELLO, f"the ClientHello's last record carries {len(self._handshake) - total}"
                                                " more handshake bytes after it")
        return parse_client_hello(bytes(self._handshake[HANDSHAKE_HEADER:]))

    def _judge(self, fields: ClientHelloFields) -> Admit:
        which = "the ClientHello"
        if self.first_hello is not None:
            which = "the second ClientHello (after the server's HelloRetryRequest)"
        for kind in fields.extensions:
            if kind in ECH_EXTENSIONS:
                raise HelloRefused(ECH, f"{which} carries {ECH_EXTENSIONS[kind]}, extension 0x{kind:04x}: its "
                                        "server_name need not be the server reached")
        name = fields.server_name
        host = shown(self.connect_host.encode("ascii", "backslashreplace"))
        if self.expected is None:
            if name is not None:
                raise HelloRefused(SNI_MISMATCH, f"the CONNECT host {host} is an IP address, so {which} must carry "
                                                 "no server_name (RFC 6066 forbids IP literals there), but it "
                                                 f"names {shown(name)}")
        else:
            if name is None:
                raise HelloRefused(SNI_MISSING, f"{which} carries no server_name; the CONNECT host is {host}")
            problem = host_name_problem(name)
            if problem:
                raise HelloRefused(BAD_SNI, problem)
            if normalised_host_name(name) != self.expected:
                raise HelloRefused(SNI_MISMATCH, f"{which} names the server {shown(name)}, not the CONNECT host "
                                                 f"{host}")
        return Admit(forward=bytes(self._received[:self._at]), rest=bytes(self._received[self._at:]),
                     server_name=self.expected, offers_early_data=EARLY_DATA in fields.extensions,
                     after_retry=self.first_hello is not None)


def _record_type_name(kind: int) -> str:
    return RECORD_TYPE_NAMES.get(kind, f"type-{kind}")


def _over_limit(name: str, bound: int, how_to_raise: str, detail: str) -> str:
    return f"limit {name} ({bound} bytes) reached: {detail}; {how_to_raise}"
