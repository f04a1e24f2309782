"""Properties of the egress proxy's ClientHello reader, against Python's ssl (OpenSSL) and an independent reader.

(a) An admitted ClientHello names the CONNECT host and only it under every reading: the proxy's parser, OpenSSL's
    server side (its server-name callback, whenever OpenSSL reads the hello that far) and the lenient reader of the
    tests (``tls_hellos.every_server_name``), which lists every entry of every server_name extension. For an IP
    CONNECT host every reading finds no name. Real hellos from Python's ssl are always admitted.
(b) Any split of a hello into records and of the records into feeds gives the same verdict, and the admitted bytes
    are exactly the records as sent.
(c) Any mutation of a valid hello (bytes flipped, set, inserted, deleted or duplicated, at random or at its length
    fields; extensions added, dropped, duplicated or rewritten with lengths kept right) is refused, or admitted
    with every reading exactly [the CONNECT host].
(d) The admitted bytes hold exactly one handshake message, a ClientHello; bytes fed after it (anything, even
    another hello) are never among them and come back as ``rest``, whatever the split.
(e) Through ``TlsOpening``, a real handshake with a HelloRetryRequest forwards exactly the client's bytes, in
    order, whatever the splits, and ends open.
"""

from __future__ import annotations

import functools
import ipaddress
import ssl
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tls_hellos import (
    BASIC_EXTENSIONS,
    client_hello,
    every_server_name,
    extension,
    handshake_of,
    names_python_sees,
    plain_name,
    python_client,
    python_hello,
    python_server,
    records,
    server_context,
    sni_data,
)
from tkbox_daemon.egress.clienthello import ClientHelloReader
from tkbox_daemon.egress.tls_opening import TlsOpening
from tkbox_daemon.egress.tls_verdicts import Admit, Refuse

SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
_TOP = st.from_regex(r"[a-z]{2,6}", fullmatch=True)
HOST_NAMES = st.builds(lambda labels, top: ".".join([*labels, top]), st.lists(_LABEL, min_size=1, max_size=3), _TOP)
IP_HOSTS = st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(lambda a: f"[{a}]"))


@st.composite
def spellings(draw: st.DrawFn, name: str) -> str:
    """``name`` in mixed ASCII case, maybe with a trailing dot: the same name to the proxy."""
    flips = draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    spelled = "".join(c.upper() if flip else c for c, flip in zip(name, flips, strict=True))
    return spelled + ("." if draw(st.booleans()) else "")


def expected(connect_host: str) -> str | None:
    try:
        ipaddress.ip_address(connect_host.strip("[]"))
    except ValueError:
        return plain_name(connect_host.encode())
    return None


@st.composite
def real_hellos(draw: st.DrawFn) -> tuple[str, bytes]:
    """(CONNECT host, the first bytes Python's ssl sends for it, spelled its own way, or without SNI for an IP)."""
    options = {"maximum": draw(st.sampled_from([None, ssl.TLSVersion.TLSv1_2])),
               "alpn": draw(st.sampled_from([None, ["h2", "http/1.1"]]))}
    if draw(st.booleans()):
        host = draw(IP_HOSTS)
        return host, python_hello(None, **options)
    host = draw(HOST_NAMES)
    return draw(spellings(host)), python_hello(draw(spellings(host)), **options)


def _entries(draw: st.DrawFn, host: str) -> bytes:
    """A server_name extension's data, hostile or not."""
    other = draw(HOST_NAMES)
    name = draw(st.one_of(st.sampled_from([host.encode(), host.encode() + b".", host.upper().encode()]),
                          st.sampled_from([other.encode(), host.encode() + b"\x00", b"\x00" + host.encode(),
                                           host.encode() + b".evil.com", b"192.0.2.1", b"", host.encode() + b"..",
                                           b"ex_" + host.encode()])))
    more = draw(st.one_of(st.just([]), st.lists(st.sampled_from([host.encode(), other.encode()]), max_size=2)))
    return sni_data(name, *more, name_type=draw(st.sampled_from([0, 0, 0, 1, 255])))


@st.composite
def built_hellos(draw: st.DrawFn) -> tuple[str, bytes]:
    """(CONNECT host, a hand-built ClientHello message) from random, often hostile, extensions."""
    host = draw(st.one_of(HOST_NAMES, IP_HOSTS))
    parts = [BASIC_EXTENSIONS]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["sni", "sni", "ech", "unknown", "early", "psk", "padding"]))
        if kind == "sni":
            parts.append(extension(0, _entries(draw, host.strip("[]"))))
        elif kind == "ech":
            parts.append(extension(draw(st.sampled_from([0xFE0D, 0xFF02, 0xFE0A, 0xFFCE, 0xFD00])), b"\x00\x01"))
        elif kind == "unknown":
            parts.append(extension(draw(st.integers(0x0100, 0xFAFA)), draw(st.binary(max_size=8))))
        elif kind == "early":
            parts.append(extension(0x002A, b""))
        elif kind == "psk":
            parts.append(extension(0x0029, b"\x00\x00\x00\x00"))
        else:
            parts.append(extension(0x0015, bytes(draw(st.integers(0, 300)))))
    parts = draw(st.permutations(parts))
    connect_host = host if expected(host) is None else draw(spellings(host))
    return connect_host, client_hello(b"".join(parts) if draw(st.integers(0, 9)) else None)


def _splits(draw: st.DrawFn, size: int, max_parts: int = 40) -> list[int]:
    return draw(st.lists(st.integers(1, max(1, size)), max_size=max_parts))


def _feed(connect_host: str, stream: bytes, cuts: list[int]) -> tuple[Admit | Refuse | None, bytes]:
    """Feed ``stream`` in pieces of the ``cuts`` sizes (the rest as one last piece): the first verdict, and the
    bytes not fed once it came (the caller still holds them)."""
    pieces, at = [], 0
    for cut in cuts:
        if at >= len(stream):
            break
        pieces.append(stream[at:at + cut])
        at += cut
    if at < len(stream):
        pieces.append(stream[at:])
    reader = ClientHelloReader(connect_host)
    for index, piece in enumerate(pieces):
        verdict = reader.feed(piece)
        if verdict is not None:
            return verdict, b"".join(pieces[index + 1:])
    return None, b""


def _assert_only_the_connect_host(connect_host: str, admitted: Admit, *, python_must_read: bool) -> None:
    name = expected(connect_host)
    assert admitted.server_name == name
    reading = every_server_name(admitted.forward)
    assert reading.message_types == (1,)
    assert [(kind, plain_name(raw)) for kind, raw in reading.names] == ([] if name is None else [(0, name)])
    assert all(b"\x00" not in raw for _kind, raw in reading.names)
    seen = names_python_sees(admitted.forward)
    if python_must_read:
        assert seen is not None
    if seen is not None:
        assert [plain_name(n.encode()) if n is not None else None for n in seen] == [name]


# ---- (a) -----------------------------------------------------------------------------------------------------

@SETTINGS
@given(real_hellos())
def test_a_real_hello_is_admitted_and_names_only_the_connect_host(case):
    connect_host, hello = case
    admitted = ClientHelloReader(connect_host).feed(hello)
    assert isinstance(admitted, Admit), admitted
    _assert_only_the_connect_host(connect_host, admitted, python_must_read=True)


@SETTINGS
@given(built_hellos())
def test_an_admitted_built_hello_names_only_the_connect_host(case):
    connect_host, message = case
    verdict = ClientHelloReader(connect_host).feed(records(message))
    if isinstance(verdict, Admit):
        _assert_only_the_connect_host(connect_host, verdict, python_must_read=False)
    else:
        assert isinstance(verdict, Refuse)


# ---- (b) -----------------------------------------------------------------------------------------------------

@SETTINGS
@given(real_hellos(), st.data())
def test_any_split_into_records_and_feeds_gives_the_same_verdict(case, data):
    connect_host, hello = case
    whole = ClientHelloReader(connect_host).feed(hello)
    assert isinstance(whole, Admit)
    message = handshake_of(hello)
    stream = records(message, _splits(data.draw, len(message)), version=data.draw(st.sampled_from([0x0301, 0x0303])))
    verdict, unfed = _feed(connect_host, stream, _splits(data.draw, len(stream)))
    assert isinstance(verdict, Admit)
    assert (verdict.forward, verdict.rest, unfed, verdict.server_name) == (stream, b"", b"", whole.server_name)


@SETTINGS
@given(built_hellos(), st.data())
def test_any_split_into_feeds_gives_the_same_verdict_for_any_hello(case, data):
    connect_host, message = case
    stream = records(message, _splits(data.draw, len(message), max_parts=5))
    whole = ClientHelloReader(connect_host).feed(stream)
    verdict, _unfed = _feed(connect_host, stream, _splits(data.draw, len(stream)))
    if isinstance(whole, Admit):
        assert isinstance(verdict, Admit) and (verdict.forward, verdict.server_name) == (stream, whole.server_name)
    else:
        assert isinstance(verdict, Refuse) and (verdict.rule, verdict.message) == (whole.rule, whole.message)


# ---- (c) -----------------------------------------------------------------------------------------------------

def _landmarks(message: bytes) -> list[int]:
    """Offsets (in the one-record stream) of a valid hello's length fields and extension headers."""
    marks = [3, 4, 6, 9 + 34]
    at = 4 + 34
    at += 1 + message[at]
    marks.append(5 + at)
    at += 2 + int.from_bytes(message[at:at + 2], "big")
    marks.append(5 + at)
    at += 1 + message[at]
    marks.append(5 + at)
    at += 2
    while at + 4 <= len(message):
        marks += [5 + at, 5 + at + 2, 5 + at + 4, 5 + at + 6]
        at += 4 + int.from_bytes(message[at + 2:at + 4], "big")
    return marks


def _extensions(message: bytes) -> tuple[bytes, list[bytes]]:
    """(the body before the extensions block, each extension whole) of a valid hello."""
    body = message[4:]
    at = 2 + 32
    at += 1 + body[at]
    at += 2 + int.from_bytes(body[at:at + 2], "big")
    at += 1 + body[at]
    prefix, block, found = body[:at], body[at + 2:], []
    while block:
        size = 4 + int.from_bytes(block[2:4], "big")
        found.append(block[:size])
        block = block[size:]
    return prefix, found


@st.composite
def mutated_hellos(draw: st.DrawFn) -> tuple[str, bytes]:
    host = draw(HOST_NAMES)
    stream = python_hello(host)
    message = handshake_of(stream)
    if draw(st.booleans()):
        prefix, found = _extensions(message)
        for _ in range(draw(st.integers(1, 3))):
            change = draw(st.sampled_from(["add", "drop", "duplicate", "rewrite_sni"]))
            spot = draw(st.integers(0, len(found)))
            if change == "add":
                found.insert(spot, extension(0, _entries(draw, host)) if draw(st.booleans())
                             else extension(draw(st.sampled_from([0xFE0D, 0x002A, 0x0015, 0x1234])), b"\x00"))
            elif found and change == "drop":
                found.pop(min(spot, len(found) - 1))
            elif found and change == "duplicate":
                found.insert(spot, found[min(spot, len(found) - 1)])
            elif change == "rewrite_sni":
                found = [extension(0, _entries(draw, host)) if item[:2] == b"\x00\x00" else item for item in found]
        block = b"".join(found)
        body = prefix + struct.pack(">H", len(block)) + block
        return host, records(b"\x01" + len(body).to_bytes(3, "big") + body)
    data = bytearray(stream)
    marks = _landmarks(message)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.one_of(st.sampled_from([m for m in marks if m < len(data)] or [0]),
                            st.integers(0, len(data) - 1)))
        change = draw(st.sampled_from(["flip", "set", "insert", "delete", "duplicate"]))
        if change == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif change == "set":
            data[at] = draw(st.sampled_from([0, 1, 0xFF, data[at] + 1 & 0xFF, data[at] - 1 & 0xFF]))
        elif change == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif change == "delete":
            del data[at:at + draw(st.integers(1, 4))]
        else:
            data[at:at] = data[at:at + draw(st.integers(1, 16))]
    return host, bytes(data)


@SETTINGS
@given(mutated_hellos())
def test_a_mutated_hello_is_refused_or_names_only_the_connect_host(case):
    connect_host, stream = case
    verdict = ClientHelloReader(connect_host).feed(stream)
    if isinstance(verdict, Admit):
        assert stream.startswith(verdict.forward) and verdict.forward + verdict.rest == stream
        _assert_only_the_connect_host(connect_host, verdict, python_must_read=False)


# ---- (d) -----------------------------------------------------------------------------------------------------

@SETTINGS
@given(real_hellos(), st.data())
def test_the_admitted_bytes_are_one_hello_and_what_follows_is_kept_apart(case, data):
    connect_host, hello = case
    message = handshake_of(hello)
    stream = records(message, _splits(data.draw, len(message), max_parts=6))
    after = data.draw(st.one_of(st.binary(min_size=1, max_size=64),
                                st.just(python_hello("evil.example.net")),
                                st.just(b"\x14\x03\x03\x00\x01\x01" + python_hello("evil.example.net")),
                                st.just(records(client_hello(BASIC_EXTENSIONS))),
                                st.just(b"\x16\x03\x01\x00\x04\x01\x00\x00\x00")))
    verdict, unfed = _feed(connect_host, stream + after, _splits(data.draw, len(stream) + len(after)))
    assert isinstance(verdict, Admit)
    assert verdict.forward == stream and verdict.rest + unfed == after
    assert every_server_name(verdict.forward).message_types == (1,)


# ---- (e) -----------------------------------------------------------------------------------------------------

@functools.cache
def _retry_transcript() -> tuple[tuple[str, bytes], ...]:
    """A real TLS 1.3 handshake with a HelloRetryRequest, as (who sent it, bytes) in order."""
    client = python_client("example.com")
    server = python_server(server_context(groups="secp384r1"))
    transcript = [("client", client.hello)]
    while not (client.done and server.done):
        answer = server.answer(transcript[-1][1])
        transcript.append(("server", answer))
        reply = client.answer(answer)
        if not reply:
            break
        transcript.append(("client", reply))
    return tuple(transcript)


@SETTINGS
@given(st.data())
def test_the_opening_forwards_exactly_the_client_bytes_whatever_the_splits(data):
    transcript = _retry_transcript()
    opening = TlsOpening("example.com")
    forwarded = b""
    for who, chunk in transcript:
        at = 0
        for cut in [*_splits(data.draw, len(chunk), max_parts=8), len(chunk)]:
            piece = chunk[at:at + cut]
            at += len(piece)
            if piece:
                step = opening.from_client(piece) if who == "client" else opening.from_server(piece)
                assert step.refused is None
                forwarded += step.to_server
    assert forwarded == b"".join(chunk for who, chunk in transcript if who == "client")
    assert opening.state == "open" and len(opening.admitted) == 2
