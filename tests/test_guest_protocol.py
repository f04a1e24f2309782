"""The guest protocol codec: frames, strict JSON, schemas and the stdin window (unit and Hypothesis)."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_guest import protocol as P
from tkbox_guest.protocol import frames, strict_json

# -- frames -----------------------------------------------------------------------------------------------------


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, start = [], 0
    for point in points + [len(data)]:
        pieces.append(data[start:point])
        start = point
    return pieces


def _header(ftype: int, length: int) -> bytes:
    return struct.pack(">BI", ftype, length)


_lengths = st.one_of(st.integers(0, 64), st.integers(0, 2**32 - 1),
                     st.sampled_from([P.MAX_PAYLOAD, P.MAX_PAYLOAD + 1, 4, 8, 4 + P.MAX_OUTPUT_CHUNK,
                                      5 + P.MAX_OUTPUT_CHUNK, 2**32 - 1]))
_noise = st.one_of(
    st.binary(max_size=80),
    st.builds(_header, st.integers(0, 255), _lengths),
    st.builds(lambda t, p: _header(t, len(p)) + p, st.integers(0, 12), st.binary(max_size=80)),
    st.builds(lambda n: b"\x08" + struct.pack(">I", n) + b"\0" * n, st.integers(4, 200_000)),
)


@given(pieces=st.lists(_noise, max_size=12), cuts=st.lists(st.integers(0, 2**20), max_size=12),
       accept=st.sampled_from([None, P.HOST_TO_GUEST, P.GUEST_TO_HOST]))
def test_any_byte_stream_gives_bounded_frames_or_a_protocol_error(pieces, cuts, accept):
    decoder = P.FrameDecoder(accept=accept)
    try:
        for chunk in _chunked(b"".join(pieces), cuts):
            for frame in decoder.feed(chunk):
                assert frame.type in P.TYPE_NAMES and len(frame.payload) <= P.MAX_PAYLOAD
                assert accept is None or frame.type in accept
            assert decoder.buffered <= P.MAX_PAYLOAD + P.HEADER_SIZE
        decoder.eof()
    except P.ProtocolError:
        with pytest.raises(P.ProtocolError):  # a failed decoder stays failed
            decoder.feed(b"")


def _valid_frame(ftype: int, data: st.DataObject) -> P.Frame:
    low, high = frames._LENGTHS[ftype]
    if ftype == P.STDIN_ACK:
        return P.Frame(ftype, struct.pack(">II", data.draw(st.integers(0, 2**32 - 1)),
                                          data.draw(st.integers(1, P.STDIN_WINDOW))))
    size = data.draw(st.one_of(st.integers(low, min(high, low + 100)), st.sampled_from([low, high])))
    body = data.draw(st.binary(min_size=min(size, 64), max_size=min(size, 64)))
    return P.Frame(ftype, (body * (size // max(len(body), 1) + 1))[:size] if body else b"\0" * size)


@settings(max_examples=60)
@given(data=st.data(), types=st.lists(st.sampled_from(sorted(P.TYPE_NAMES)), max_size=8),
       cuts=st.lists(st.integers(0, 2**22), max_size=20))
def test_valid_frames_round_trip_in_any_chunking(data, types, cuts):
    frames = [_valid_frame(t, data) for t in types]
    encoded = b"".join(P.encode_frame(f.type, f.payload) for f in frames)
    decoder = P.FrameDecoder()
    decoded = [frame for chunk in _chunked(encoded, cuts) for frame in decoder.feed(chunk)]
    decoder.eof()
    assert decoded == frames
    assert b"".join(P.encode_frame(f.type, f.payload) for f in decoded) == encoded


@pytest.mark.parametrize(("raw", "message"), [
    (_header(0, 2), "unknown frame type 0"),
    (_header(77, 2), "unknown frame type 77"),
    (_header(P.REQUEST, P.MAX_PAYLOAD + 1), "exceeds the limit"),
    (_header(P.STDOUT, 4 + P.MAX_OUTPUT_CHUNK + 1), "exceeds the limit"),
    (_header(P.STDIN_EOF, 5), "exceeds the limit"),
    (_header(P.STDIN, 3), "shorter than 4"),
    (_header(P.STDOUT, 4), "not allowed in this direction"),
])
def test_bad_headers_are_refused_before_any_payload(raw, message):
    with pytest.raises(P.ProtocolError, match=message):
        P.FrameDecoder(accept=P.HOST_TO_GUEST if "direction" in message else None).feed(raw)


def test_eof_in_the_middle_of_a_frame_is_an_error():
    decoder = P.FrameDecoder()
    assert decoder.feed(P.encode_frame(P.REQUEST, b"{}")[:6]) == []
    with pytest.raises(P.ProtocolError, match="middle of a frame"):
        decoder.eof()


def test_encode_refuses_what_decode_would_refuse():
    with pytest.raises(P.ProtocolError):
        P.encode_frame(P.REQUEST, b"x" * (P.MAX_PAYLOAD + 1))
    with pytest.raises(P.ProtocolError):
        P.encode_frame(42, b"{}")
    with pytest.raises(P.ProtocolError):
        P.encode_frame(P.STDOUT, b"\0" * (5 + P.MAX_OUTPUT_CHUNK))


def test_id_payload_helpers():
    assert P.split_id(P.pack_id(7, b"abc")) == (7, b"abc")
    assert P.decode_stdin_ack(P.encode_stdin_ack(3, 100)[5:]) == (3, 100)
    with pytest.raises(P.ProtocolError):
        P.pack_id(2**32)
    with pytest.raises(P.ProtocolError):
        P.encode_stdin_ack(1, 0)
    with pytest.raises(P.ProtocolError):
        P.decode_stdin_ack(struct.pack(">II", 1, P.STDIN_WINDOW + 1))


def test_stdin_window_arithmetic():
    window = P.StdinWindow()
    window.take(P.STDIN_WINDOW - 10)
    assert window.available == 10
    with pytest.raises(P.ProtocolError, match="exceed the window"):
        window.take(11)
    window.give_back(P.STDIN_WINDOW - 10)
    with pytest.raises(P.ProtocolError, match="exceeds"):
        window.give_back(1)
    window.take(P.STDIN_WINDOW)
    assert window.available == 0


# -- strict JSON ------------------------------------------------------------------------------------------------

_ints = st.integers(-P.MAX_SAFE_INTEGER, P.MAX_SAFE_INTEGER)
_values = st.recursive(
    st.one_of(_ints, st.text(max_size=20), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=40,
)


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@given(value=st.dictionaries(st.text(max_size=8), _values, max_size=5), ascii_only=st.booleans())
def test_loads_strict_accepts_what_json_dumps_writes(value, ascii_only):
    data = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert P.loads_strict(data) == value


@given(depth=st.integers(1, 40), kind=st.sampled_from(["[", "{"]))
def test_nesting_beyond_16_is_refused(depth, kind):
    inner: object = 1
    for level in range(depth - 1):
        inner = [inner] if (kind == "[" or level % 2) else {"k": inner}
    value = {"v": inner}
    data = json.dumps(value).encode()
    if _depth(value) <= P.MAX_DEPTH:
        assert P.loads_strict(data) == value
    else:
        with pytest.raises(P.ProtocolError, match="nested deeper"):
            P.loads_strict(data)


@given(number=st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()))
def test_floats_are_refused(number):
    with pytest.raises(P.ProtocolError):
        P.loads_strict(json.dumps({"n": number}).encode())


@given(number=st.one_of(st.integers(max_value=-P.MAX_SAFE_INTEGER - 1), st.integers(min_value=P.MAX_SAFE_INTEGER + 1)))
def test_integers_beyond_the_safe_range_are_refused(number):
    with pytest.raises(P.ProtocolError, match="2\\^53"):
        P.loads_strict(json.dumps({"n": number}).encode())


@pytest.mark.parametrize("text", [
    b'{"a":1,"a":2}', b'{"a":{"b":1,"b":1}}', b'{"n":NaN}', b'{"n":Infinity}', b'{"n":-Infinity}',
    b'{"n":1.0}', b'{"n":1e3}', b"[1]", b'"s"', b"1", b"null", b"", b"{", b'{"a":1} x', b"\xef\xbb\xbf{}",
    b'{"s":"\xff"}', b'{"s":"\\ud800"}', b'{"s":"\\udc00x"}', b'{"s":"a\nb"}', b"{'a':1}",
    b"[" * 17 + b"]" * 17, b'{"a":' + b"[" * 16 + b"]" * 16 + b"}",
])
def test_loads_strict_refuses(text):
    with pytest.raises(P.ProtocolError):
        P.loads_strict(text)


def test_loads_strict_refuses_str_and_oversize_input():
    with pytest.raises(P.ProtocolError):
        P.loads_strict('{"a":1}')  # type: ignore[arg-type]
    with pytest.raises(P.ProtocolError, match="exceeds"):
        P.loads_strict(b'{"a":"' + b"x" * P.MAX_PAYLOAD + b'"}')


def test_sixteen_levels_are_fine():
    text = b'{"a":' + b"[" * 15 + b"]" * 15 + b"}"
    assert strict_json._DECODER.decode(text.decode()) == P.loads_strict(text)


# -- schemas ----------------------------------------------------------------------------------------------------

EXEC = {"id": 1, "op": "exec", "argv": ["echo", "hi"], "cwd": "/workspace", "env": {"A": "b"}, "timeout_ms": 1000}


@pytest.mark.parametrize("request_", [
    EXEC, {**EXEC, "pty": False}, {"id": 0, "op": "ping"}, {"id": 2**32 - 1, "op": "diff"},
    {"id": 3, "op": "shutdown"}, {"id": 4, "op": "signal", "target": 1, "signal": 2},
    {"id": 5, "op": "files", "path": "a/b", "max_bytes": 64 << 20},
])
def test_valid_requests(request_):
    assert P.validate_request(request_)["id"] == request_["id"]


@pytest.mark.parametrize("request_", [
    {"op": "ping"}, {"id": -1, "op": "ping"}, {"id": 2**32, "op": "ping"}, {"id": True, "op": "ping"},
    {"id": 1, "op": "reboot"}, {"id": 1, "op": "ping", "extra": 1}, [], {"id": "1", "op": "ping"},
    {**EXEC, "argv": []}, {**EXEC, "argv": [""]}, {**EXEC, "argv": ["a\0b"]}, {**EXEC, "argv": "echo"},
    {**EXEC, "argv": ["x"] * 4097}, {**EXEC, "argv": ["x" * (128 * 1024 + 1)]}, {**EXEC, "cwd": "rel"},
    {**EXEC, "env": {"A=B": "c"}}, {**EXEC, "env": {"": "c"}}, {**EXEC, "env": {"A": 1}},
    {**EXEC, "timeout_ms": -1}, {**EXEC, "pty": 0}, {k: v for k, v in EXEC.items() if k != "env"},
    {"id": 4, "op": "signal", "target": 1, "signal": 11}, {"id": 4, "op": "signal", "target": 1},
    {"id": 5, "op": "files", "path": "", "max_bytes": 1}, {"id": 5, "op": "files", "path": "a", "max_bytes": -1},
    {"id": 5, "op": "files", "path": "a", "max_bytes": (64 << 20) + 1},
])
def test_invalid_requests(request_):
    with pytest.raises(P.ProtocolError):
        P.validate_request(request_)


FILE = {"path": "a b/c", "change": "added", "binary": False, "old_mode": None, "new_mode": "100644"}
DIFF_OK = {"id": 1, "ok": True, "size": 10, "sha256": "sha256:" + "0" * 64, "files": [FILE],
           "files_truncated": False}


@pytest.mark.parametrize(("op", "response"), [
    ("exec", {"id": 1, "ok": True, "pid": 7}), ("ping", {"id": 1, "ok": True}),
    ("files", {"id": 1, "ok": True, "size": 0, "truncated": False}), ("diff", DIFF_OK),
    ("diff", {**DIFF_OK, "files": [{**FILE, "change": "mode", "old_mode": "100644", "new_mode": "100755"}]}),
    ("exec", {"id": 1, "ok": False, "error": {"code": "ENOENT", "message": "no such file"}}),
])
def test_valid_responses(op, response):
    assert P.validate_response(response, op) is response


@pytest.mark.parametrize(("op", "response"), [
    ("exec", {"id": 1, "ok": True}), ("exec", {"id": 1, "ok": True, "pid": 0}), ("ping", {"id": 1, "ok": 1}),
    ("ping", {"id": 1, "ok": True, "x": 1}), ("files", {"id": 1, "ok": True, "size": 0}),
    ("diff", {**DIFF_OK, "sha256": "sha256:XYZ"}), ("diff", {**DIFF_OK, "files": [{**FILE, "change": "renamed"}]}),
    ("diff", {**DIFF_OK, "files": [{**FILE, "old_mode": "100644"}]}),
    ("diff", {**DIFF_OK, "files": [{**FILE, "change": "mode", "old_mode": "100644", "new_mode": "100644"}]}),
    ("ping", {"id": 1, "ok": False, "error": {"code": "lower", "message": ""}}),
    ("ping", {"id": 1, "ok": False, "error": {"code": "E", "message": "", "x": 1}}),
    ("nope", {"id": 1, "ok": True}),
])
def test_invalid_responses(op, response):
    with pytest.raises(P.ProtocolError):
        P.validate_response(response, op)


def test_exit_schema():
    assert P.validate_exit({"id": 1, "exit_code": 0, "signal": None, "timed_out": False})
    assert P.validate_exit({"id": 1, "exit_code": None, "signal": 9, "timed_out": True})
    for bad in ({"id": 1, "exit_code": 0, "signal": 9, "timed_out": False},
                {"id": 1, "exit_code": None, "signal": None, "timed_out": False},
                {"id": 1, "exit_code": 256, "signal": None, "timed_out": False},
                {"id": 1, "exit_code": 0, "signal": None, "timed_out": 0},
                {"id": 1, "exit_code": 0, "signal": None}):
        with pytest.raises(P.ProtocolError):
            P.validate_exit(bad)


BOOT = {"box_id": "b1", "env": {"PATH": "/usr/bin"}, "workspace": "/workspace", "agent_socket": "/run/a.sock",
        "limits": {"exec_timeout_ms": 0, "max_execs": 64}, "clock": 1}


def test_boot_schema():
    assert P.validate_boot(BOOT)["upper_dir"] == "/run/tkbox/upper"
    assert P.validate_boot({**BOOT, "base_dir": "/b"})["base_dir"] == "/b"
    for bad in ({**BOOT, "x": 1}, {**BOOT, "workspace": "ws"}, {**BOOT, "limits": {"max_execs": 1}},
                {**BOOT, "limits": {"exec_timeout_ms": 0, "max_execs": 0}}, {**BOOT, "clock": -1}):
        with pytest.raises(P.ProtocolError):
            P.validate_boot(bad)


@given(st.dictionaries(st.sampled_from(["id", "op", "argv", "cwd", "env", "timeout_ms", "pty", "x"]),
                       st.one_of(_values, st.sampled_from(list(P.OPS))), max_size=8))
def test_validate_request_only_ever_raises_protocol_error(obj):
    try:
        P.validate_request(obj)
    except P.ProtocolError:
        pass
