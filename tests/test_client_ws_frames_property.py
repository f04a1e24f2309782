"""Properties of the client's WebSocket frames (``client_ws_frames``), with wsproto as the other side: what the client
writes, a server reads back exactly (masked, as a client's frames must be); what a server writes, the client reads
back exactly whatever its fragmentation and however it is cut; and each rule a server's frame can break (a mask, a
reserved bit, an unknown opcode, a fragmented or long control frame, a continuation out of place, a length not in
its shortest form, a message over the cap, text that is not UTF-8, a close code no peer sends) is refused with the
close code that answers it, wherever the bytes are cut."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

from tests.ws_server_frames import server_bytes
from tkbox_tui.client_ws_frames import (
    BINARY,
    CLOSE,
    INVALID_DATA,
    PING,
    PROTOCOL_ERROR,
    TEXT,
    TOO_BIG,
    FrameReader,
    FrameRefused,
    accept_for,
    client_frame,
)

CAP = 1000
cuts = st.lists(st.integers(min_value=1, max_value=50), max_size=40)


def read_all(data: bytes, cut_sizes: list[int], cap: int = CAP) -> list[tuple[int, bytes]]:
    reader = FrameReader(cap)
    out: list[tuple[int, bytes]] = []
    position = 0
    for size in [*cut_sizes, len(data)]:
        out += reader.feed(data[position: position + size])
        position += size
    return out


@given(st.sampled_from([TEXT, BINARY, PING]), st.binary(max_size=70_000), st.binary(min_size=4, max_size=4))
def test_a_client_frame_is_read_back_exactly_by_a_server(opcode, payload, mask):
    if opcode == TEXT:
        payload = payload.decode("utf-8", "replace").encode("utf-8")
    if opcode == PING:
        payload = payload[:125]
    server = Connection(ConnectionType.SERVER)
    server.receive_data(client_frame(opcode, payload, mask))
    events = list(server.events())
    assert len(events) == 1
    event = events[0]
    got = event.payload if opcode == PING else event.data
    assert (got.encode() if isinstance(got, str) else got) == payload
    assert type(event) is {TEXT: TextMessage, BINARY: BytesMessage, PING: Ping}[opcode]


messages = st.lists(st.tuples(st.one_of(st.text(max_size=100), st.binary(max_size=300)),
                              st.integers(min_value=1, max_value=5), st.booleans()), max_size=8)


@given(messages, cuts)
def test_what_a_server_writes_is_read_back_exactly_however_fragmented_and_cut(items, cut_sizes):
    server = Connection(ConnectionType.SERVER)
    data = bytearray(server_bytes(items, ping_payload=b"ping", server=server))
    expected: list[tuple[int, bytes]] = []
    for message, _, ping_first in items:
        if ping_first:
            expected.append((PING, b"ping"))
        expected.append((TEXT, message.encode()) if isinstance(message, str) else (BINARY, message))
    data += server.send(CloseConnection(code=1000, reason="done"))
    expected.append((CLOSE, struct.pack("!H", 1000) + b"done"))
    assert read_all(bytes(data), cut_sizes) == expected


def frame(first: int, payload: bytes, *, masked: bool = False, length: bytes | None = None) -> bytes:
    """A server frame written by hand, so that it can break any rule."""
    if length is None:
        length = bytes([len(payload)]) if len(payload) < 126 else bytes([126]) + struct.pack("!H", len(payload))
    if masked:
        length = bytes([length[0] | 0x80]) + length[1:]
        return bytes([first]) + length + b"\0\0\0\0" + payload
    return bytes([first]) + length + payload


BROKEN = {
    "masked": (frame(0x82, b"x", masked=True), PROTOCOL_ERROR),
    "reserved bit 1": (frame(0xC2, b"x"), PROTOCOL_ERROR),
    "reserved bit 2": (frame(0xA2, b"x"), PROTOCOL_ERROR),
    "reserved bit 3": (frame(0x92, b"x"), PROTOCOL_ERROR),
    "opcode 3": (frame(0x83, b"x"), PROTOCOL_ERROR),
    "opcode 0xB": (frame(0x8B, b"x"), PROTOCOL_ERROR),
    "fragmented ping": (frame(0x09, b"x"), PROTOCOL_ERROR),
    "fragmented close": (frame(0x08, b"\x03\xe8"), PROTOCOL_ERROR),
    "long ping": (frame(0x89, b"x" * 126), PROTOCOL_ERROR),
    "continuation first": (frame(0x80, b"x"), PROTOCOL_ERROR),
    "new message mid-fragment": (frame(0x02, b"x") + frame(0x82, b"y"), PROTOCOL_ERROR),
    "long length for a short frame": (frame(0x82, b"x", length=bytes([126]) + struct.pack("!H", 1)), PROTOCOL_ERROR),
    "64-bit length for a short frame": (frame(0x82, b"", length=bytes([127]) + struct.pack("!Q", 200)),
                                        PROTOCOL_ERROR),
    "length with its top bit": (frame(0x82, b"", length=bytes([127]) + struct.pack("!Q", 1 << 63)), PROTOCOL_ERROR),
    "over the cap": (frame(0x82, b"x" * (CAP + 1)), TOO_BIG),
    "over the cap in fragments": (frame(0x02, b"x" * CAP) + frame(0x80, b"y"), TOO_BIG),
    "text not UTF-8": (frame(0x81, b"\xff\xfe"), INVALID_DATA),
    "text split inside a character, then broken": (frame(0x01, b"\xe2\x82") + frame(0x80, b"x"), INVALID_DATA),
    "one-byte close": (frame(0x88, b"\x03"), PROTOCOL_ERROR),
    "close code 1005": (frame(0x88, struct.pack("!H", 1005)), PROTOCOL_ERROR),
    "close code 999": (frame(0x88, struct.pack("!H", 999)), PROTOCOL_ERROR),
    "close reason not UTF-8": (frame(0x88, struct.pack("!H", 1000) + b"\xff"), INVALID_DATA),
}


@pytest.mark.parametrize("rule", list(BROKEN))
@given(prefix=st.lists(st.binary(max_size=20), max_size=3), cut_sizes=cuts)
def test_each_broken_rule_is_refused_with_its_close_code_wherever_cut(rule, prefix, cut_sizes):
    data, code = BROKEN[rule]
    good = b"".join(frame(0x82, piece) for piece in prefix)  # whole messages before it change nothing
    with pytest.raises(FrameRefused) as refused:
        read_all(good + data, cut_sizes)
    assert refused.value.code == code


def test_a_split_character_across_fragments_is_text_and_a_close_ends_the_reading():
    data = frame(0x01, b"\xe2\x82") + frame(0x80, b"\xac") + frame(0x88, struct.pack("!H", 1000)) + frame(0x82, b"z")
    assert read_all(data, []) == [(TEXT, "€".encode()), (CLOSE, struct.pack("!H", 1000))]


@given(st.binary(max_size=600), cuts)
def test_any_bytes_give_messages_or_a_refusal_and_nothing_else(data, cut_sizes):
    try:
        out = read_all(data, cut_sizes)
    except FrameRefused as refused:
        assert refused.code in (PROTOCOL_ERROR, INVALID_DATA, TOO_BIG)
    else:
        assert all(len(payload) <= CAP for _, payload in out)


def test_the_accept_value_is_the_rfc_s_example():
    assert accept_for(b"dGhlIHNhbXBsZSBub25jZQ==") == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
