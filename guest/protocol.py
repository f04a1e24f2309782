"""The agent channel's wire format, shared by host and guest: frames, strict JSON and the per-op schemas.

Sans-IO and standard library only: nothing here touches a socket, a process or a file, so the daemon can import
``tkbox_guest.protocol`` and check the guest's frames with exactly the rules the guest uses to check the host's.

A frame is ``[type u8][len u32 big-endian][payload]`` with ``len <= MAX_PAYLOAD``. Anything that breaks a rule
raises :class:`ProtocolError`; the receiver then closes the channel.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from typing import Any, NamedTuple

MAX_PAYLOAD = 1 << 20  # 1 MiB
HEADER_SIZE = 5
MAX_OUTPUT_CHUNK = 64 * 1024  # bytes of stdout/stderr per frame
MAX_ID_DATA = MAX_PAYLOAD - 4  # bytes after the id in STDIN and DATA frames
STDIN_WINDOW = 1 << 20  # stdin bytes the host may have sent but not had acknowledged, per exec
MAX_FILES_READ = 64 << 20
MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 16
MAX_U32 = 2**32 - 1

REQUEST = 1
RESPONSE = 2
STDIN = 3
STDIN_EOF = 4
STDOUT = 5
STDERR = 6
EXIT = 7
DATA = 8
STDIN_ACK = 9

TYPE_NAMES = {
    REQUEST: "REQUEST", RESPONSE: "RESPONSE", STDIN: "STDIN", STDIN_EOF: "STDIN_EOF", STDOUT: "STDOUT",
    STDERR: "STDERR", EXIT: "EXIT", DATA: "DATA", STDIN_ACK: "STDIN_ACK",
}
HOST_TO_GUEST = frozenset({REQUEST, STDIN, STDIN_EOF})
GUEST_TO_HOST = frozenset({RESPONSE, STDOUT, STDERR, EXIT, DATA, STDIN_ACK})
JSON_TYPES = frozenset({REQUEST, RESPONSE, EXIT})

# (smallest, largest) payload length per type: checked from the header alone, before any payload is buffered.
_LENGTHS = {
    REQUEST: (2, MAX_PAYLOAD), RESPONSE: (2, MAX_PAYLOAD), EXIT: (2, MAX_PAYLOAD),
    STDIN: (4, MAX_PAYLOAD), DATA: (4, MAX_PAYLOAD),
    STDOUT: (4, 4 + MAX_OUTPUT_CHUNK), STDERR: (4, 4 + MAX_OUTPUT_CHUNK),
    STDIN_EOF: (4, 4), STDIN_ACK: (8, 8),
}

OPS = ("exec", "signal", "resize", "diff", "files", "shutdown", "ping")
MAX_WINSIZE = 1000  # rows and columns of a pty, each 1..MAX_WINSIZE
DEFAULT_WINSIZE = (24, 80)  # rows, cols of a pty exec that gives none
ALLOWED_SIGNALS = frozenset({1, 2, 9, 15})  # SIGHUP, SIGINT, SIGKILL, SIGTERM
CHANGES = ("added", "modified", "deleted", "mode")
GIT_MODES = ("100644", "100755", "120000")

_HEADER = struct.Struct(">BI")
_U32 = struct.Struct(">I")
_ACK = struct.Struct(">II")


class ProtocolError(Exception):
    """The peer broke the protocol; the message says how. The channel must be closed."""


class Frame(NamedTuple):
    type: int
    payload: bytes


def _check_length(ftype: int, length: int, accept: frozenset[int] | None = None) -> None:
    if ftype not in _LENGTHS:
        raise ProtocolError(f"unknown frame type {ftype}")
    name = TYPE_NAMES[ftype]
    if accept is not None and ftype not in accept:
        raise ProtocolError(f"frame type {name} is not allowed in this direction")
    low, high = _LENGTHS[ftype]
    if length > high:
        raise ProtocolError(f"{name} frame of {length} bytes exceeds the limit of {high}")
    if length < low:
        raise ProtocolError(f"{name} frame of {length} bytes is shorter than {low}")


def encode_frame(ftype: int, payload: bytes) -> bytes:
    """One frame's bytes; refuses what a decoder would refuse."""
    _check_length(ftype, len(payload))
    return _HEADER.pack(ftype, len(payload)) + bytes(payload)


class FrameDecoder:
    """Incremental decoder: ``feed`` bytes as they arrive, get the complete frames back.

    It validates each header as soon as its 5 bytes are in (type, direction, length) and never holds more than one
    header or one payload (at most ``MAX_PAYLOAD``). After a :class:`ProtocolError` it stays failed.
    """

    def __init__(self, accept: Iterable[int] | None = None) -> None:
        self._accept = frozenset(accept) if accept is not None else None
        self._buf = bytearray()
        self._header: tuple[int, int] | None = None
        self._failed: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for the frame in progress."""
        return len(self._buf)

    @property
    def mid_frame(self) -> bool:
        """True when part of a frame has been fed."""
        return self._header is not None or bool(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if self._failed is not None:
            raise ProtocolError(self._failed)
        try:
            return self._feed(memoryview(data).cast("B"))
        except ProtocolError as exc:
            self._failed = str(exc)
            self._buf = bytearray()
            raise

    def _feed(self, view: memoryview) -> list[Frame]:
        frames: list[Frame] = []
        pos, end = 0, len(view)
        while True:
            if self._header is None:
                if not self._buf and end - pos >= HEADER_SIZE:
                    ftype, length = _HEADER.unpack_from(view, pos)
                    pos += HEADER_SIZE
                else:
                    take = min(HEADER_SIZE - len(self._buf), end - pos)
                    self._buf += view[pos:pos + take]
                    pos += take
                    if len(self._buf) < HEADER_SIZE:
                        return frames
                    ftype, length = _HEADER.unpack(self._buf)
                    self._buf.clear()
                _check_length(ftype, length, self._accept)
                self._header = (ftype, length)
            ftype, length = self._header
            if not self._buf and end - pos >= length:
                frames.append(Frame(ftype, bytes(view[pos:pos + length])))
                pos += length
            else:
                take = min(length - len(self._buf), end - pos)
                self._buf += view[pos:pos + take]
                pos += take
                if len(self._buf) < length:
                    return frames
                frames.append(Frame(ftype, bytes(self._buf)))
                self._buf.clear()
            self._header = None

    def eof(self) -> None:
        """The stream ended: refuse a frame cut in the middle."""
        if self._failed is None and self.mid_frame:
            self._failed = "the channel closed in the middle of a frame"
        if self._failed is not None:
            raise ProtocolError(self._failed)


# -- [id u32][bytes] payloads ---------------------------------------------------------------------------------


def pack_id(ident: int, data: bytes = b"") -> bytes:
    if not 0 <= ident <= MAX_U32:
        raise ProtocolError(f"id {ident} is not a u32")
    return _U32.pack(ident) + bytes(data)


def split_id(payload: bytes) -> tuple[int, bytes]:
    if len(payload) < 4:
        raise ProtocolError("payload too short for an id")
    return _U32.unpack_from(payload)[0], payload[4:]


def encode_id_frame(ftype: int, ident: int, data: bytes = b"") -> bytes:
    return encode_frame(ftype, pack_id(ident, data))


def encode_stdin_ack(ident: int, count: int) -> bytes:
    if not 1 <= count <= STDIN_WINDOW:
        raise ProtocolError(f"stdin credit {count} is outside 1..{STDIN_WINDOW}")
    return encode_frame(STDIN_ACK, _ACK.pack(ident, count))


def decode_stdin_ack(payload: bytes) -> tuple[int, int]:
    if len(payload) != 8:
        raise ProtocolError("STDIN_ACK payload must be 8 bytes")
    ident, count = _ACK.unpack(payload)
    if not 1 <= count <= STDIN_WINDOW:
        raise ProtocolError(f"stdin credit {count} is outside 1..{STDIN_WINDOW}")
    return ident, count


class StdinWindow:
    """Stdin flow control for one exec, the same arithmetic on both sides.

    The host calls ``take(n)`` before sending n bytes of STDIN and ``give_back(n)`` on each STDIN_ACK; the guest
    calls ``take(n)`` when STDIN arrives and ``give_back(n)`` when it has written (or dropped) those bytes and
    acknowledges them. At most ``size`` bytes are ever outstanding.
    """

    def __init__(self, size: int = STDIN_WINDOW) -> None:
        self.size = size
        self.outstanding = 0

    @property
    def available(self) -> int:
        return self.size - self.outstanding

    def take(self, count: int) -> None:
        if count < 0 or count > self.available:
            raise ProtocolError(f"{count} stdin bytes exceed the window ({self.outstanding} of {self.size} in use)")
        self.outstanding += count

    def give_back(self, count: int) -> None:
        if count < 0 or count > self.outstanding:
            raise ProtocolError(f"stdin credit of {count} exceeds the {self.outstanding} bytes outstanding")
        self.outstanding -= count


# -- strict JSON ------------------------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"JSON constant {name} is not allowed")


def _reject_float(text: str) -> Any:
    raise ProtocolError(f"JSON number {text[:32]} is not an integer")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 16:
        raise ProtocolError("JSON integer beyond ±(2^53-1)")
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise ProtocolError("JSON integer beyond ±(2^53-1)")
    return value


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ProtocolError(f"duplicate JSON key {key[:64]!r}")
        result[key] = value
    return result


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_reject_constant,
                            parse_int=_bounded_int, parse_float=_reject_float)
# A string token (an unterminated one runs to the end) and runs of non-brackets, for the depth precheck.
_STRING_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*\\?(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _precheck_depth(text: str) -> None:
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for char in _NOT_BRACKET.sub("", _STRING_TOKEN.sub("", text)):
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ProtocolError(f"JSON nested deeper than {MAX_DEPTH}")
        else:
            depth -= 1


def _check_strings(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ProtocolError("JSON string holds a lone surrogate") from None


def loads_strict(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Parse one strict JSON object: UTF-8, no duplicate keys, integers only, bounded, nesting <= 16."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ProtocolError("JSON must be given as bytes")
    raw = bytes(data)
    if len(raw) > MAX_PAYLOAD:
        raise ProtocolError(f"JSON text of {len(raw)} bytes exceeds {MAX_PAYLOAD}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"JSON is not UTF-8 (byte {exc.start})") from None
    _precheck_depth(text)
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; the hooks raise ProtocolError
        raise ProtocolError(f"malformed JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError("JSON must be an object")
    if "\\u" in text:
        _check_strings(value)
    return value


def dumps(obj: dict[str, Any]) -> bytes:
    """Compact, key-sorted UTF-8 JSON."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                      allow_nan=False).encode("utf-8")


def encode_json_frame(ftype: int, obj: dict[str, Any]) -> bytes:
    if ftype not in JSON_TYPES:
        raise ProtocolError(f"{TYPE_NAMES.get(ftype, ftype)} does not carry JSON")
    return encode_frame(ftype, dumps(obj))


# -- schemas ----------------------------------------------------------------------------------------------------

_ERROR_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,31}")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


def _keys(obj: dict[str, Any], required: set[str], optional: set[str], what: str) -> None:
    missing = required - obj.keys()
    if missing:
        raise ProtocolError(f"{what}: missing {sorted(missing)}")
    extra = obj.keys() - required - optional
    if extra:
        raise ProtocolError(f"{what}: unknown keys {sorted(extra)[:8]}")


def _int(obj: dict[str, Any], key: str, low: int, high: int, what: str) -> int:
    value = obj[key]
    if type(value) is not int or not low <= value <= high:
        raise ProtocolError(f"{what}: {key} must be an integer in {low}..{high}")
    return value


def _bool(obj: dict[str, Any], key: str, what: str) -> bool:
    if type(obj[key]) is not bool:
        raise ProtocolError(f"{what}: {key} must be a boolean")
    return obj[key]


def _text(value: Any, what: str, *, max_bytes: int, allow_empty: bool = False, nul: bool = False) -> str:
    if type(value) is not str:
        raise ProtocolError(f"{what} must be a string")
    if not value and not allow_empty:
        raise ProtocolError(f"{what} must not be empty")
    if not nul and "\x00" in value:
        raise ProtocolError(f"{what} must not contain NUL")
    if len(value) > max_bytes or len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise ProtocolError(f"{what} exceeds {max_bytes} bytes")
    return value


def _env(value: Any, what: str) -> dict[str, str]:
    if type(value) is not dict:
        raise ProtocolError(f"{what} must be an object")
    if len(value) > 4096:
        raise ProtocolError(f"{what} has more than 4096 variables")
    for key, item in value.items():
        _text(key, f"{what} name", max_bytes=4096)
        if "=" in key:
            raise ProtocolError(f"{what} name {key[:64]!r} contains '='")
        _text(item, f"{what} value", max_bytes=MAX_PAYLOAD, allow_empty=True)
    return value


def _id_of(obj: Any, what: str) -> int:
    if type(obj) is not dict:
        raise ProtocolError(f"{what} must be an object")
    if "id" not in obj:
        raise ProtocolError(f"{what}: missing id")
    return _int(obj, "id", 0, MAX_U32, what)


def validate_request(obj: Any) -> dict[str, Any]:
    """Check a REQUEST against its op's closed schema; returns it with defaults filled in."""
    _id_of(obj, "request")
    op = obj.get("op")
    if op not in OPS:
        raise ProtocolError(f"request: unknown op {str(op)[:32]!r}")
    what = f"{op} request"
    base = {"id", "op"}
    if op == "exec":
        _keys(obj, base | {"argv", "cwd", "env", "timeout_ms"}, {"pty", "rows", "cols"}, what)
        argv = obj["argv"]
        if type(argv) is not list or not 1 <= len(argv) <= 4096:
            raise ProtocolError(f"{what}: argv must be a list of 1..4096 strings")
        for arg in argv:
            _text(arg, f"{what}: argv item", max_bytes=128 * 1024, allow_empty=True)
        if not argv[0]:
            raise ProtocolError(f"{what}: argv[0] must not be empty")
        cwd = _text(obj["cwd"], f"{what}: cwd", max_bytes=4096)
        if not cwd.startswith("/"):
            raise ProtocolError(f"{what}: cwd must be an absolute path")
        _env(obj["env"], f"{what}: env")
        _int(obj, "timeout_ms", 0, 2**31 - 1, what)
        if "pty" in obj and type(obj["pty"]) is not bool:
            raise ProtocolError(f"{what}: pty must be a boolean")
        pty = obj.get("pty", False)
        sized = ("rows" in obj) + ("cols" in obj)
        if sized and not pty:
            raise ProtocolError(f"{what}: rows and cols are only for pty execs")
        if sized == 1:
            raise ProtocolError(f"{what}: rows and cols come together")
        if sized:
            _int(obj, "rows", 1, MAX_WINSIZE, what)
            _int(obj, "cols", 1, MAX_WINSIZE, what)
        if pty:
            rows, cols = DEFAULT_WINSIZE
            return {**obj, "pty": True, "rows": obj.get("rows", rows), "cols": obj.get("cols", cols)}
        return {**obj, "pty": False}
    if op == "resize":
        _keys(obj, base | {"target", "rows", "cols"}, set(), what)
        _int(obj, "target", 0, MAX_U32, what)
        _int(obj, "rows", 1, MAX_WINSIZE, what)
        _int(obj, "cols", 1, MAX_WINSIZE, what)
        return dict(obj)
    if op == "signal":
        _keys(obj, base | {"target", "signal"}, set(), what)
        _int(obj, "target", 0, MAX_U32, what)
        if type(obj["signal"]) is not int or obj["signal"] not in ALLOWED_SIGNALS:
            raise ProtocolError(f"{what}: signal must be one of {sorted(ALLOWED_SIGNALS)}")
        return dict(obj)
    if op == "files":
        _keys(obj, base | {"path", "max_bytes"}, set(), what)
        _text(obj["path"], f"{what}: path", max_bytes=4096)
        _int(obj, "max_bytes", 0, MAX_FILES_READ, what)
        return dict(obj)
    _keys(obj, base, set(), what)  # diff, shutdown, ping
    return dict(obj)


def _validate_error(obj: dict[str, Any]) -> None:
    _keys(obj, {"id", "ok", "error"}, set(), "error response")
    error = obj["error"]
    if type(error) is not dict:
        raise ProtocolError("error response: error must be an object")
    _keys(error, {"code", "message"}, set(), "error response: error")
    if type(error["code"]) is not str or not _ERROR_CODE.fullmatch(error["code"]):
        raise ProtocolError("error response: code must match [A-Z][A-Z0-9_]{0,31}")
    _text(error["message"], "error response: message", max_bytes=4096, allow_empty=True)


def _validate_file_entry(entry: Any) -> None:
    what = "diff response: files item"
    if type(entry) is not dict:
        raise ProtocolError(f"{what} must be an object")
    _keys(entry, {"path", "change", "binary", "old_mode", "new_mode"}, set(), what)
    _text(entry["path"], f"{what}: path", max_bytes=4 * 4096)
    if entry["change"] not in CHANGES:
        raise ProtocolError(f"{what}: change must be one of {CHANGES}")
    _bool(entry, "binary", what)
    for key in ("old_mode", "new_mode"):
        if entry[key] is not None and entry[key] not in GIT_MODES:
            raise ProtocolError(f"{what}: {key} must be null or one of {GIT_MODES}")
    old, new, change = entry["old_mode"], entry["new_mode"], entry["change"]
    shape_ok = {
        "added": old is None and new is not None,
        "deleted": old is not None and new is None,
        "modified": old is not None and new is not None,
        "mode": old is not None and new is not None and old != new,
    }[change]
    if not shape_ok:
        raise ProtocolError(f"{what}: modes {old!r}/{new!r} do not fit change {change!r}")


def validate_response(obj: Any, op: str) -> dict[str, Any]:
    """Check a RESPONSE to a request of ``op`` (the host knows which op each id belongs to)."""
    _id_of(obj, "response")
    if op not in OPS:
        raise ProtocolError(f"response: unknown op {op!r}")
    if obj.get("ok") is False:
        _validate_error(obj)
        return obj
    if obj.get("ok") is not True:
        raise ProtocolError("response: ok must be a boolean")
    what = f"{op} response"
    base = {"id", "ok"}
    if op == "exec":
        _keys(obj, base | {"pid"}, set(), what)
        _int(obj, "pid", 1, 2**31 - 1, what)
    elif op == "diff":
        _keys(obj, base | {"size", "sha256", "files", "files_truncated"}, set(), what)
        _int(obj, "size", 0, MAX_SAFE_INTEGER, what)
        if type(obj["sha256"]) is not str or not _SHA256.fullmatch(obj["sha256"]):
            raise ProtocolError(f"{what}: sha256 must be 'sha256:' and 64 lowercase hex digits")
        if type(obj["files"]) is not list:
            raise ProtocolError(f"{what}: files must be a list")
        for entry in obj["files"]:
            _validate_file_entry(entry)
        _bool(obj, "files_truncated", what)
    elif op == "files":
        _keys(obj, base | {"size", "truncated"}, set(), what)
        _int(obj, "size", 0, MAX_FILES_READ, what)
        _bool(obj, "truncated", what)
    else:
        _keys(obj, base, set(), what)
    return obj


def validate_exit(obj: Any) -> dict[str, Any]:
    """Check an EXIT payload: exactly one of exit_code (0..255) and signal (1..64) is set."""
    _id_of(obj, "exit")
    _keys(obj, {"id", "exit_code", "signal", "timed_out"}, set(), "exit")
    code, sig = obj["exit_code"], obj["signal"]
    if (code is None) == (sig is None):
        raise ProtocolError("exit: exactly one of exit_code and signal must be set")
    if code is not None:
        _int(obj, "exit_code", 0, 255, "exit")
    else:
        _int(obj, "signal", 1, 64, "exit")
    _bool(obj, "timed_out", "exit")
    return obj


def validate_boot(obj: Any) -> dict[str, Any]:
    """Check the boot configuration (closed schema); returns it with defaults filled in."""
    what = "boot config"
    if type(obj) is not dict:
        raise ProtocolError(f"{what} must be an object")
    _keys(obj, {"box_id", "env", "workspace", "agent_socket", "limits", "clock"}, {"base_dir", "upper_dir"}, what)
    _text(obj["box_id"], f"{what}: box_id", max_bytes=128)
    _env(obj["env"], f"{what}: env")
    for key in ("workspace", "agent_socket", "base_dir", "upper_dir"):
        if key in obj:
            path = _text(obj[key], f"{what}: {key}", max_bytes=4096)
            if not path.startswith("/"):
                raise ProtocolError(f"{what}: {key} must be an absolute path")
    limits = obj["limits"]
    if type(limits) is not dict:
        raise ProtocolError(f"{what}: limits must be an object")
    _keys(limits, {"exec_timeout_ms", "max_execs"}, set(), f"{what}: limits")
    _int(limits, "exec_timeout_ms", 0, 2**31 - 1, f"{what}: limits")
    _int(limits, "max_execs", 1, 1024, f"{what}: limits")
    _int(obj, "clock", 0, MAX_SAFE_INTEGER, what)
    return {"base_dir": "/run/tkbox/base", "upper_dir": "/run/tkbox/upper", **obj}
