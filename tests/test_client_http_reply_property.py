"""Properties of the client's HTTP reply reader (``client_http_reply``): a well-formed reply comes out exactly (status,
headers, body) whatever its framing and however the bytes are cut; each way a reply can break the rules it reads by
is refused as ``ReplyBroken``, wherever it is cut; a head or chunk line over its cap is ``HeadTooLarge``; and any
bytes at all give a reply or one of those two errors, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_tui.client_http_reply import CHUNK_LINE_CAP, HeadTooLarge, ReplyBroken, ReplyHead, ReplyReader

CAP = 4096
names = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).filter(
    lambda name: name not in ("content-length", "transfer-encoding"))
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30).map(str.strip)
cuts = st.lists(st.integers(min_value=1, max_value=200), max_size=30)


def framed(status: int, headers: dict[str, str], body: bytes, framing: str, chunk: int = 5) -> bytes:
    head = f"HTTP/1.1 {status} Some Reason\r\n" + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    if framing == "length":
        return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    if framing == "chunked":
        chunks = b"".join(f"{len(body[i:i + chunk]):x}\r\n".encode() + body[i:i + chunk] + b"\r\n"
                          for i in range(0, len(body), chunk))
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunks + b"0\r\n\r\n"
    return (head + "\r\n").encode() + body


def read(data: bytes, cut_sizes: list[int]) -> tuple[ReplyHead, bytes]:
    reader = ReplyReader(CAP)
    out: list[ReplyHead | bytes | None] = []
    position = 0
    for size in [*cut_sizes, len(data)]:
        if reader.finished or position >= len(data):
            break
        out += reader.feed(data[position: position + size])
        position += size
    if not reader.finished:
        out += reader.feed(b"")
    assert out[-1] is None and isinstance(out[0], ReplyHead)
    assert sum(1 for piece in out if piece is None) == 1
    return out[0], b"".join(piece for piece in out[1:-1] if isinstance(piece, bytes))


@given(st.integers(min_value=200, max_value=599).filter(lambda code: code not in (204, 304)),
       st.dictionaries(names, header_values, max_size=5), st.binary(max_size=300),
       st.sampled_from(["length", "chunked", "close"]), st.integers(min_value=1, max_value=40), cuts)
def test_a_well_formed_reply_comes_out_exactly_however_it_is_cut(status, headers, body, framing, chunk, cut_sizes):
    head, received = read(framed(status, headers, body, framing, chunk), cut_sizes)
    assert head.status == status and received == body
    assert {name: head.headers[name] for name in headers} == headers


DEFECTS = {
    "folded header": lambda reply: reply.replace(b"\r\nX-A: 1\r\n", b"\r\nX-A: 1\r\n  folded\r\n"),
    "no colon": lambda reply: reply.replace(b"X-A: 1", b"X-A 1"),
    "space before the colon": lambda reply: reply.replace(b"X-A: 1", b"X-A : 1"),
    "control character": lambda reply: reply.replace(b"X-A: 1", b"X-A: 1\x01"),
    "bare LF in a value": lambda reply: reply.replace(b"X-A: 1", b"X-A: 1\nX-B: 2"),
    "another protocol": lambda reply: reply.replace(b"HTTP/1.1 ", b"HTTP/2.0 ", 1),
    "two-digit status": lambda reply: reply.replace(b" 200 ", b" 20 ", 1),
    "gzip encoding": lambda reply: reply.replace(b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip"),
    "both framings": lambda reply: reply.replace(b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked\r\n"
                                                                                 b"Content-Length: 3"),
    "two lengths": lambda reply: reply.replace(b"X-A: 1", b"Content-Length: 99999"),
    "signed length": lambda reply: reply.replace(b"X-A: 1", b"Content-Length: -1"),
    "size not hex": lambda reply: reply.replace(b"\r\n\r\n5\r\n", b"\r\n\r\n5g\r\n", 1),
    "chunk without its CRLF": lambda reply: reply.replace(b"hello\r\n", b"helloXY", 1),
}


@pytest.mark.parametrize("defect", list(DEFECTS))
@given(framing=st.sampled_from(["length", "chunked"]), cut_sizes=cuts)
def test_each_broken_rule_is_refused_wherever_the_bytes_are_cut(defect, framing, cut_sizes):
    good = framed(200, {"X-A": "1"}, b"hello world", framing)
    broken = DEFECTS[defect](good)
    if broken == good:  # this defect needs the other framing
        return
    with pytest.raises(ReplyBroken):
        read(broken, cut_sizes)


@given(st.integers(min_value=CAP - 100, max_value=3 * CAP), cuts)
def test_a_head_over_its_cap_is_refused_and_one_within_is_read(padding, cut_sizes):
    data = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * padding + b"\r\nContent-Length: 0\r\n\r\n"
    head_size = data.index(b"\r\n\r\n")
    if head_size > CAP:
        with pytest.raises(HeadTooLarge):
            read(data, cut_sizes)
    else:
        assert read(data, cut_sizes)[0].status == 200


@given(st.integers(min_value=CHUNK_LINE_CAP + 1, max_value=4 * CHUNK_LINE_CAP), cuts)
def test_a_chunk_line_over_its_cap_is_refused(size, cut_sizes):
    data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + b"e" * size + b"\r\nx\r\n0\r\n\r\n"
    with pytest.raises(HeadTooLarge):
        read(data, cut_sizes)


@given(st.binary(max_size=2000), cuts)
def test_any_bytes_give_a_reply_or_one_of_the_reader_s_errors(data, cut_sizes):
    try:
        head, body = read(data, cut_sizes)
    except (ReplyBroken, HeadTooLarge):
        return
    assert 100 <= head.status <= 999 and len(body) <= len(data)


@given(st.integers(min_value=0, max_value=10), st.binary(max_size=50))
def test_interim_replies_are_skipped_up_to_a_few(count, body):
    data = b"HTTP/1.1 100 Continue\r\n\r\n" * count + framed(200, {}, body, "length")
    if count > 8:
        with pytest.raises(ReplyBroken):
            read(data, [])
    else:
        assert read(data, [])[1] == body


def test_an_upgrade_reply_ends_at_its_head_and_keeps_what_follows():
    reader = ReplyReader(CAP, upgrade=True)
    out = reader.feed(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x02hi")
    assert isinstance(out[0], ReplyHead) and out[0].status == 101 and out[1] is None and reader.rest == b"\x81\x02hi"
    with pytest.raises(ReplyBroken):  # a 101 nobody asked for
        ReplyReader(CAP).feed(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
