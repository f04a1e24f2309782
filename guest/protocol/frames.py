"""Frames of the agent channel: ``[type u8][len u32 big-endian][payload]``, their types and length rules, the
incremental decoder, ``[id u32][bytes]`` payloads and the two credit windows (stdin host→guest, output
guest→host).

Sans-IO: nothing here touches a socket.  Anything that breaks a rule raises :class:`ProtocolError`; the receiver
then closes the channel.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

MAX_PAYLOAD = 1 << 20  # 1 MiB
HEADER_SIZE = 5
MAX_OUTPUT_CHUNK = 64 * 1024  # bytes of stdout/stderr per frame
MAX_ID_DATA = MAX_PAYLOAD - 4  # bytes after the id in STDIN and DATA frames
STDIN_WINDOW = 1 << 20  # stdin bytes the host may have sent but not had acknowledged, per exec
OUTPUT_WINDOW = 1 << 20  # stdout+stderr bytes the guest may have sent but not had acknowledged, per exec
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
OUTPUT_ACK = 10

TYPE_NAMES = {
    REQUEST: "REQUEST", RESPONSE: "RESPONSE", STDIN: "STDIN", STDIN_EOF: "STDIN_EOF", STDOUT: "STDOUT",
    STDERR: "STDERR", EXIT: "EXIT", DATA: "DATA", STDIN_ACK: "STDIN_ACK", OUTPUT_ACK: "OUTPUT_ACK",
}
HOST_TO_GUEST = frozenset({REQUEST, STDIN, STDIN_EOF, OUTPUT_ACK})
GUEST_TO_HOST = frozenset({RESPONSE, STDOUT, STDERR, EXIT, DATA, STDIN_ACK})
JSON_TYPES = frozenset({REQUEST, RESPONSE, EXIT})

# (smallest, largest) payload length per type: checked from the header alone, before any payload is buffered.
# Output frames carry at least one byte: the host queues output by bytes against the output window, and empty
# frames would let a guest queue unbounded items within it.
_LENGTHS = {
    REQUEST: (2, MAX_PAYLOAD), RESPONSE: (2, MAX_PAYLOAD), EXIT: (2, MAX_PAYLOAD),
    STDIN: (4, MAX_PAYLOAD), DATA: (4, MAX_PAYLOAD),
    STDOUT: (5, 4 + MAX_OUTPUT_CHUNK), STDERR: (5, 4 + MAX_OUTPUT_CHUNK),
    STDIN_EOF: (4, 4), STDIN_ACK: (8, 8), OUTPUT_ACK: (8, 8),
}

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


def _encode_ack(ftype: int, ident: int, count: int, window: int) -> bytes:
    if not 1 <= count <= window:
        raise ProtocolError(f"{TYPE_NAMES[ftype]} credit {count} is outside 1..{window}")
    return encode_frame(ftype, _ACK.pack(ident, count))


def _decode_ack(ftype: int, payload: bytes, window: int) -> tuple[int, int]:
    if len(payload) != 8:
        raise ProtocolError(f"{TYPE_NAMES[ftype]} payload must be 8 bytes")
    ident, count = _ACK.unpack(payload)
    if not 1 <= count <= window:
        raise ProtocolError(f"{TYPE_NAMES[ftype]} credit {count} is outside 1..{window}")
    return ident, count


def encode_stdin_ack(ident: int, count: int) -> bytes:
    return _encode_ack(STDIN_ACK, ident, count, STDIN_WINDOW)


def decode_stdin_ack(payload: bytes) -> tuple[int, int]:
    return _decode_ack(STDIN_ACK, payload, STDIN_WINDOW)


def encode_output_ack(ident: int, count: int) -> bytes:
    return _encode_ack(OUTPUT_ACK, ident, count, OUTPUT_WINDOW)


def decode_output_ack(payload: bytes) -> tuple[int, int]:
    return _decode_ack(OUTPUT_ACK, payload, OUTPUT_WINDOW)


class CreditWindow:
    """Flow control for one exec in one direction, the same arithmetic on both sides.

    The sender calls ``take(n)`` before sending n bytes and ``give_back(n)`` on each ack; the receiver calls
    ``take(n)`` when the bytes arrive (raising :class:`ProtocolError` beyond the window) and ``give_back(n)`` when
    it has used or dropped them and acknowledges them. At most ``size`` bytes are ever outstanding, and never fewer
    than none: an ack beyond what is outstanding is a :class:`ProtocolError` too.
    """

    what = "credit"

    def __init__(self, size: int) -> None:
        self.size = size
        self.outstanding = 0

    @property
    def available(self) -> int:
        return self.size - self.outstanding

    def take(self, count: int) -> None:
        if count < 0 or count > self.available:
            raise ProtocolError(f"{count} {self.what} bytes exceed the window ({self.outstanding} of {self.size} in use)")
        self.outstanding += count

    def give_back(self, count: int) -> None:
        if count < 0 or count > self.outstanding:
            raise ProtocolError(f"{self.what} credit of {count} exceeds the {self.outstanding} bytes outstanding")
        self.outstanding -= count


class StdinWindow(CreditWindow):
    """Stdin, host → guest: STDIN takes, STDIN_ACK gives back (``STDIN_WINDOW`` bytes per exec)."""

    what = "stdin"

    def __init__(self, size: int = STDIN_WINDOW) -> None:
        super().__init__(size)


class OutputWindow(CreditWindow):
    """Stdout and stderr together, guest → host: STDOUT/STDERR take, OUTPUT_ACK gives back (``OUTPUT_WINDOW``)."""

    what = "output"

    def __init__(self, size: int = OUTPUT_WINDOW) -> None:
        super().__init__(size)
