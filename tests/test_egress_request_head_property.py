"""Properties of the proxy's request head reader (``egress/request.py``), the first parser a box's bytes reach on the
host: a head reads the same however the box cuts it into writes; any bytes at all end in a request, a wait for
more, or a refusal whose message is printable ASCII (box bytes escaped) and names a known rule; and a head never
grows past its limit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon.egress.request import RequestHead, RequestRefused

SETTINGS = settings(max_examples=300, deadline=None)
RULES = {"egress-bad-request", "egress-bad-target", "egress-header", "egress-host-header"}
LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)
HOST = st.builds(lambda labels: ".".join(labels), st.lists(LABEL, min_size=2, max_size=4))
PORT = st.integers(min_value=1, max_value=65535)
PATH = st.text("abcdefghijklmnopqrstuvwxyz0123456789/-._~%?=&", max_size=40).map(lambda text: "/" + text)
HEADER_VALUE = st.text("abcdefghijklmnopqrstuvwxyz0123456789 -_.;=/", max_size=30).map(str.strip)


@st.composite
def heads(draw: st.DrawFn) -> tuple[bytes, str, str, str, bytes]:
    """(head and what follows it, method, target, Host value, the bytes after the head)."""
    host, port = draw(HOST), draw(PORT)
    extra = draw(st.lists(st.tuples(st.sampled_from(["accept", "user-agent", "x-trace"]), HEADER_VALUE),
                          max_size=4))
    if draw(st.booleans()):
        method, target = "CONNECT", f"{host}:{port}"
    else:
        method, target = draw(st.sampled_from(["GET", "POST", "HEAD", "DELETE"])), f"http://{host}:{port}{draw(PATH)}"
    host_value = f"{host}:{port}"
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host_value}", *(f"{name}: {value}" for name, value in extra)]
    if method in ("POST", "DELETE"):
        lines.append("Content-Length: 0")
    after = draw(st.binary(max_size=64)) if method == "CONNECT" else b""
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + after, method, target, host_value, after


def cuts(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at ``points`` (positions taken modulo its length), in order."""
    marks = sorted({0, len(data), *(point % (len(data) + 1) for point in points)})
    return [data[start:end] for start, end in zip(marks, marks[1:], strict=False)]


def read(chunks: list[bytes], head: RequestHead):
    """Feed ``chunks`` in turn until a request comes out (then stop, as the proxy does: the tunnel reads the rest
    from the socket itself); None if none did. Unfed chunks are left in ``chunks``."""
    while chunks:
        request = head.feed(chunks.pop(0))
        if request is not None:
            return request
    return None


@SETTINGS
@given(heads(), st.lists(st.integers(min_value=0), max_size=12))
def test_a_head_reads_the_same_however_the_box_cuts_it(head_and_after, points):
    data, method, target, host_value, after = head_and_after
    whole_reader, cut_reader = RequestHead(), RequestHead()
    unfed = cuts(data, points)
    whole, cut = whole_reader.feed(data), read(unfed, cut_reader)
    assert whole is not None and cut == whole
    assert (whole.method, whole.target, whole.host_header) == (method, target, host_value)
    if method == "CONNECT":  # the tunnel's first bytes: what came with the head, then what the socket still has
        assert whole_reader.tunnel_bytes() == cut_reader.tunnel_bytes() + b"".join(unfed) == after


NOISE = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda line, header: line + b"\r\n" + header + b"\r\n\r\n", st.binary(max_size=60),
              st.binary(max_size=60)),
    st.lists(st.sampled_from([b"CONNECT ", b"GET ", b"http://", b"a.example", b":443", b" HTTP/1.1", b" HTTP/1.0",
                              b"\r\n", b"\n", b"Host: ", b"Upgrade: x", b"Transfer-Encoding: chunked",
                              b"Content-Length: 3", b"\x00", b"\x1b[31m", b"\xff", b" ", b":", b"'", b'"', b"\\",
                              b"https://", b"/", b"*", b"OPTIONS "]), max_size=30).map(b"".join),
)


@SETTINGS
@given(NOISE, st.lists(st.integers(min_value=0), max_size=8), st.booleans())
def test_any_bytes_give_a_request_a_wait_or_a_readable_refusal(data, points, closed):
    head = RequestHead(max_head=512)
    try:
        request = read([*cuts(data, points), *([b""] if closed else [])], head)
    except RequestRefused as refused:
        message = str(refused)
        assert refused.rule in RULES and refused.status in (400, 431)
        assert message and all(" " <= char <= "~" for char in message), message
        assert "bytearray(" not in message, message
        return
    if request is not None:
        assert request.method.isascii() and request.target.isascii()
        assert request.is_connect or request.target.lower().startswith("http://")
    else:
        assert not closed  # a client that closed gets an answer, never a wait


@SETTINGS
@given(st.integers(min_value=64, max_value=4096), st.lists(st.integers(min_value=1, max_value=700), min_size=1,
                                                          max_size=40))
def test_a_head_is_refused_before_it_grows_past_its_limit(limit, sizes):
    """Bytes that never finish a head (no blank line) are refused with 431 once over the limit; the reader never
    holds more than the limit and one write."""
    head, fed = RequestHead(max_head=limit), 0
    line = b"GET http://a.example/" + b"a" * 10_000
    for size in sizes:
        chunk, line = line[:size], line[size:] or b"a" * 10_000
        try:
            assert head.feed(chunk) is None
        except RequestRefused as refused:
            assert refused.status == 431 and refused.rule == "egress-bad-request"
            assert fed <= limit
            return
        fed += len(chunk)
    assert fed <= limit + max(sizes)
