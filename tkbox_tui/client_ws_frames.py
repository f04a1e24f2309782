"""WebSocket frames (RFC 6455) as the client sends and reads them, without I/O.  Standard library only.

The client speaks to one server, the daemon, with no extensions and no subprotocol, so only that is read: frames
from the server are never masked and have no reserved bits; opcodes are continuation, text, binary, close, ping
and pong; a control frame is whole (FIN) and at most 125 bytes; a continuation comes only inside a fragmented
message and a new message only after the last one ended; a length is in its shortest form and below 2**63; a whole
message is at most ``max_message`` bytes (refused as soon as a frame's header says it would be more); a text
message and a close's reason are UTF-8; a close's payload is empty or a valid code and its reason.  Anything else is
``FrameRefused`` with the close code to answer it with (1002 protocol error, 1007 bad text, 1009 too big).

``client_frame`` writes one whole frame, masked as a client's must be (``os.urandom``).  ``accept_for`` is the
``Sec-WebSocket-Accept`` a server must answer a key with.
"""

from __future__ import annotations

import os
import struct

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
DATA_OPCODES = (TEXT, BINARY)
CONTROL_OPCODES = (CLOSE, PING, PONG)
CONTROL_CAP = 125
NORMAL_CLOSURE, PROTOCOL_ERROR, INVALID_DATA, TOO_BIG = 1000, 1002, 1007, 1009
ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# Close codes a peer may send (RFC 6455 7.4): 1000-1003, 1007-1014, and the registered and private ranges.
SENDABLE_CODES = frozenset({1000, 1001, 1002, 1003, *range(1007, 1015)})


class FrameRefused(Exception):
    """The server's bytes break the rules above; ``code`` is the close code that answers it."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.before: list[tuple[int, bytes]] = []


class MessageTooLarge(FrameRefused):
    """A message over ``max_message`` bytes."""

    def __init__(self, cap: int) -> None:
        super().__init__(TOO_BIG, f"a message over {cap} bytes")


def accept_for(key: bytes) -> bytes:
    """The ``Sec-WebSocket-Accept`` value for the client's ``Sec-WebSocket-Key``."""
    import base64
    import hashlib

    return base64.b64encode(hashlib.sha1(key + ACCEPT_GUID).digest())  # noqa: S324  # the protocol's own use


def client_frame(opcode: int, payload: bytes, mask: bytes | None = None) -> bytes:
    """One whole (FIN) frame of ``payload``, masked with ``mask`` (4 bytes; random when not given)."""
    mask = os.urandom(4) if mask is None else mask
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, size)
    return head + mask + masked(payload, mask)


def masked(payload: bytes, mask: bytes) -> bytes:
    """``payload`` XOR the repeated 4-byte ``mask`` (one integer XOR: fast for a 64 KiB chunk too)."""
    if not payload:
        return b""
    size = len(payload)
    key = (mask * (size // 4 + 1))[:size]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")


class FrameReader:
    """``feed`` the server's bytes and get the whole messages they complete, in order, as ``(opcode, payload)``:
    ``TEXT`` (the payload checked as UTF-8) or ``BINARY`` with the message's bytes, and each ``CLOSE``, ``PING`` and
    ``PONG`` frame as it comes.  Raises ``FrameRefused`` (``MessageTooLarge``) at the first byte that breaks a rule;
    after that, or after a close, it reads nothing more."""

    def __init__(self, max_message: int) -> None:
        self.max_message = max_message
        self._buffer = bytearray()
        self._message_opcode: int | None = None  # the opcode of the fragmented message under way
        self._parts: list[bytes] = []
        self._size = 0
        self._done = False

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        if self._done:
            return []
        self._buffer += data
        out: list[tuple[int, bytes]] = []
        try:
            while (frame := self._frame()) is not None:
                message = self._message(*frame)
                if message is not None:
                    out.append(message)
                    if message[0] == CLOSE:
                        self._done = True
                        break
        except FrameRefused as refused:
            self._done = True
            refused.before = out  # the messages whole before the broken frame
            raise
        return out

    def _frame(self) -> tuple[bool, int, bytes] | None:
        """The next whole frame buffered: (fin, opcode, payload), or None until more bytes come."""
        buffer = self._buffer
        if len(buffer) < 2:
            return None
        first, second = buffer[0], buffer[1]
        fin, opcode = bool(first & 0x80), first & 0x0F
        if first & 0x70:
            raise FrameRefused(PROTOCOL_ERROR, "a frame with reserved bits set (no extension was agreed)")
        if opcode not in (CONTINUATION, *DATA_OPCODES, *CONTROL_OPCODES):
            raise FrameRefused(PROTOCOL_ERROR, f"a frame with the unknown opcode {opcode:#x}")
        if second & 0x80:
            raise FrameRefused(PROTOCOL_ERROR, "a masked frame from the server")
        length, offset = second & 0x7F, 2
        if opcode in CONTROL_OPCODES and (not fin or length > CONTROL_CAP):
            raise FrameRefused(PROTOCOL_ERROR, "a control frame that is fragmented or over 125 bytes")
        if length == 126:
            if len(buffer) < 4:
                return None
            length, offset = struct.unpack_from("!H", buffer, 2)[0], 4
            if length < 126:
                raise FrameRefused(PROTOCOL_ERROR, "a frame length not in its shortest form")
        elif length == 127:
            if len(buffer) < 10:
                return None
            length, offset = struct.unpack_from("!Q", buffer, 2)[0], 10
            if length < 1 << 16 or length >= 1 << 63:
                raise FrameRefused(PROTOCOL_ERROR, "a frame length not in its shortest form, or over 2**63")
        if opcode not in CONTROL_OPCODES:
            self._check_order(opcode)
            if self._size + length > self.max_message:
                raise MessageTooLarge(self.max_message)
        if len(buffer) < offset + length:
            return None
        payload = bytes(buffer[offset: offset + length])
        del buffer[: offset + length]
        return fin, opcode, payload

    def _check_order(self, opcode: int) -> None:
        if opcode == CONTINUATION and self._message_opcode is None:
            raise FrameRefused(PROTOCOL_ERROR, "a continuation frame outside a fragmented message")
        if opcode != CONTINUATION and self._message_opcode is not None:
            raise FrameRefused(PROTOCOL_ERROR, "a new message before the fragmented one ended")

    def _message(self, fin: bool, opcode: int, payload: bytes) -> tuple[int, bytes] | None:
        if opcode in CONTROL_OPCODES:
            if opcode == CLOSE:
                _check_close(payload)
            return opcode, payload
        if opcode != CONTINUATION:
            self._message_opcode = opcode
        self._parts.append(payload)
        self._size += len(payload)
        if not fin:
            return None
        message_opcode, data = self._message_opcode, b"".join(self._parts)
        self._message_opcode, self._parts, self._size = None, [], 0
        assert message_opcode is not None
        if message_opcode == TEXT:
            _check_utf8(data)
        return message_opcode, data


def _check_utf8(data: bytes) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise FrameRefused(INVALID_DATA, "a text message that is not UTF-8") from None


def _check_close(payload: bytes) -> None:
    if not payload:
        return
    if len(payload) < 2:
        raise FrameRefused(PROTOCOL_ERROR, "a close frame with a one-byte payload")
    code = struct.unpack_from("!H", payload)[0]
    if code not in SENDABLE_CODES and not 3000 <= code <= 4999:
        raise FrameRefused(PROTOCOL_ERROR, f"a close frame with the code {code}, which no peer sends")
    _check_utf8(payload[2:])


def close_code(payload: bytes) -> int | None:
    """The code of a (checked) close frame's payload; None for an empty one."""
    return struct.unpack_from("!H", payload)[0] if payload else None


class Inbound:
    """What a client channel makes of the server's bytes: ``feed`` gives the messages they complete (``str`` for
    text, ``bytes`` for binary), the frames to write back (a pong for each ping; the close that answers the
    server's close or a broken rule), and whether the WebSocket has ended.  A message over the cap raises
    ``MessageTooLarge`` (the channel answers it with ``close_frame(TOO_BIG)`` and refuses the reply)."""

    def __init__(self, max_message: int) -> None:
        self._frames = FrameReader(max_message)
        self.sent_close = False

    def feed(self, data: bytes) -> tuple[list[str | bytes], bytes, bool]:
        messages: list[str | bytes] = []
        answers = bytearray()
        ended_by: FrameRefused | None = None
        try:
            frames = self._frames.feed(data)
        except MessageTooLarge:
            raise
        except FrameRefused as refused:
            frames, ended_by = refused.before, refused
        for opcode, payload in frames:
            if opcode == TEXT:
                messages.append(payload.decode("utf-8"))
            elif opcode == BINARY:
                messages.append(payload)
            elif opcode == PING:
                answers += client_frame(PONG, payload)
            elif opcode == CLOSE:
                code = close_code(payload)
                answers += self.close_frame(NORMAL_CLOSURE if code is None else code)
                return messages, bytes(answers), True
        if ended_by is not None:
            return messages, bytes(answers) + self.close_frame(ended_by.code), True
        return messages, bytes(answers), False

    def close_frame(self, code: int = 1000) -> bytes:
        """The client's close frame with ``code``, once (b"" when one was already sent)."""
        if self.sent_close:
            return b""
        self.sent_close = True
        return client_frame(CLOSE, struct.pack("!H", code))
