"""Properties of what the API client parses from the daemon over HTTP (``client_http``): a reply within its cap comes
out exactly, whatever its framing and however the socket cuts it; a reply over its cap is refused with
``reply_too_large`` having read at most ``HEAD_CAP + cap + 1`` bytes; a reply cut short, or not HTTP, is a
DaemonError and never a library's exception; lines of a stream come out exactly, and one over its cap is refused."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_tui.client_errors import DaemonError, error_from, json_reply
from tkbox_tui.client_http import HEAD_CAP, HttpExchange, LineSplitter, _read_blocking, collect


class FakeSocket:
    """A socket whose reads return ``data`` cut at ``cuts`` (and never more than asked), counting what was read."""

    def __init__(self, data: bytes, cuts: list[int]) -> None:
        self.data = data
        self.cuts = cuts
        self.read = 0

    def recv(self, size: int) -> bytes:
        assert size > 0
        cut = self.cuts.pop(0) if self.cuts else size
        chunk = self.data[self.read: self.read + max(1, min(size, cut))]
        self.read += len(chunk)
        return chunk


def framed(status: int, body: bytes, framing: str, content_type: str = "application/json") -> bytes:
    """A reply as an HTTP/1.1 server would frame it: with Content-Length, chunked, or read until the close."""
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n".encode()
    if framing == "length":
        return head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    if framing == "chunked":
        chunks = b"".join(f"{len(body[i:i + 7]):x}\r\n".encode() + body[i:i + 7] + b"\r\n"
                          for i in range(0, len(body), 7))
        return head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    return head + b"Connection: close\r\n\r\n" + body


def read_reply(data: bytes, cuts: list[int], cap: int | None) -> tuple[tuple[int, bytes], FakeSocket]:
    sock = FakeSocket(data, cuts)
    exchange = HttpExchange("GET", "/v1/boxes", body_cap=cap)
    exchange.request_bytes()
    head, body = collect(list(_read_blocking(sock, exchange)))  # type: ignore[arg-type]
    return (head.status, body), sock


framings = st.sampled_from(["length", "chunked", "close"])
cuts = st.lists(st.integers(min_value=1, max_value=300), max_size=40)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=20)


@given(json_values, framings, cuts, st.integers(min_value=0, max_value=64))
def test_a_json_reply_within_its_cap_round_trips_exactly_however_it_is_cut(value, framing, cuts, slack):
    body = json.dumps(value).encode()
    (status, received), _ = read_reply(framed(200, body, framing), cuts, len(body) + slack)
    assert status == 200 and received == body and json_reply(received) == value


@given(st.binary(min_size=1, max_size=2000), framings, cuts, st.integers(min_value=0, max_value=1999))
def test_a_reply_over_its_cap_is_refused_and_nothing_past_the_cap_is_read(body, framing, cuts, cap):
    cap = cap % len(body)  # strictly below the body's size
    data = framed(200, body, framing) + b"\0" * 100_000  # more than any cap: a daemon that never stops
    with pytest.raises(DaemonError) as raised:
        read_reply(data, cuts, cap)
    assert raised.value.code == "reply_too_large" and str(cap) in raised.value.message
    assert raised.value.extra["hint"]


@given(st.binary(max_size=500), framings, cuts, st.data())
def test_a_reply_cut_short_is_the_daemon_lost_never_a_library_error(body, framing, cuts, data):
    whole = framed(200, body, framing)
    if framing == "close":  # its end is the close: cut it inside the head, where a cut is always visible
        whole = whole[: whole.index(b"\r\n\r\n")]
    cut_at = data.draw(st.integers(min_value=0, max_value=len(whole) - 1))
    with pytest.raises(DaemonError) as raised:
        read_reply(whole[:cut_at], cuts, 10_000)
    assert raised.value.code == "daemon_lost"


@given(st.binary(max_size=3000), cuts)
def test_bytes_that_are_not_http_give_a_reply_or_a_daemon_error_and_nothing_else(data, cuts):
    try:
        (status, body), sock = read_reply(data, cuts, 1000)
    except DaemonError as error:
        assert error.code in ("daemon_lost", "reply_too_large")
    else:
        assert 100 <= status <= 999 and len(body) <= 1000 and sock.read <= HEAD_CAP + 1001


@given(st.integers(min_value=1, max_value=4 * HEAD_CAP), cuts)
def test_a_head_past_its_cap_is_refused_without_reading_on(padding, cuts):
    data = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * padding + b"\r\nContent-Length: 0\r\n\r\n"
    try:
        (status, body), sock = read_reply(data, cuts, 0)
    except DaemonError as error:
        assert padding > HEAD_CAP - 64 and error.code == "reply_too_large"
    else:
        assert status == 200 and body == b"" and padding < HEAD_CAP


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=0, max_value=10**6))
def test_a_content_length_over_the_cap_is_refused_at_the_head(length, cap):
    data = f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n".encode()
    try:
        (status, body), sock = read_reply(data, [], cap)
    except DaemonError as error:  # refused before a body byte, or (within the cap) cut short
        assert error.code == ("reply_too_large" if length > cap else "daemon_lost")
    else:
        assert length == 0 and body == b"" and status == 200


def test_an_exact_reply_is_refused_the_moment_its_content_length_says_too_much():
    sock = FakeSocket(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n" + b"x" * 11, [])
    exchange = HttpExchange("GET", "/v1/boxes", body_cap=10)
    with pytest.raises(DaemonError) as raised:
        list(_read_blocking(sock, exchange))  # type: ignore[arg-type]
    assert raised.value.code == "reply_too_large"


lines_strategy = st.lists(st.binary(max_size=40).map(lambda line: line.replace(b"\n", b"")), max_size=30)


@given(lines_strategy, st.lists(st.integers(min_value=1, max_value=50), max_size=60))
def test_lines_within_their_cap_come_out_exactly_whatever_the_chunking(lines, sizes):
    stream = b"".join(line + b"\n" for line in lines)
    splitter = LineSplitter(40, "line")
    out: list[bytes] = []
    position = 0
    for size in [*sizes, len(stream)]:
        out += splitter.feed(stream[position: position + size])
        position += size
    assert out == lines and splitter.pending == b""


@given(lines_strategy, st.integers(min_value=41, max_value=200), st.lists(st.integers(1, 50), max_size=60))
def test_a_line_over_its_cap_is_refused_and_never_given(lines, long_size, sizes):
    stream = b"".join(line + b"\n" for line in lines) + b"x" * long_size + b"\nafter\n"
    splitter = LineSplitter(40, "line")
    out: list[bytes] = []
    position = 0
    with pytest.raises(DaemonError) as raised:
        for size in [*sizes, len(stream)]:
            out += splitter.feed(stream[position: position + size])
            position += size
    assert raised.value.code == "reply_too_large"
    assert out == lines[: len(out)] and all(len(line) <= 40 for line in out)


@given(st.integers(min_value=400, max_value=599), st.one_of(st.binary(max_size=300), json_values.map(
    lambda value: json.dumps({"error": value}).encode())))
def test_any_error_body_is_a_daemon_error_with_its_status(status, body):
    error = error_from(status, body)
    assert isinstance(error, DaemonError) and error.status == status and isinstance(error.code, str)
    assert error.code != "http_error" or error.message.startswith(f"the daemon answered {status}: \"")
