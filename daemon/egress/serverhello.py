"""Reads the start of the server's answer to a ClientHello, sans-IO: a ServerHello, a HelloRetryRequest, or neither.

A HelloRetryRequest is a ServerHello whose random is SHA-256("HelloRetryRequest") (RFC 8446 §4.1.3); after it the
client sends a second ClientHello, which the proxy must check like the first. The reader only looks: the caller
forwards the server's bytes to the client as they come. It keeps a few dozen bytes of state whatever it is fed: the
record header in progress and the first 38 bytes of each handshake message (header, version, random).

``feed`` returns the answers found in the bytes, in order: zero or more ``HELLO_RETRY_REQUEST`` and then at most one
``SERVER_HELLO`` or ``NOT_SERVER_HELLO``, after which it reads no more. Change_cipher_spec records (a TLS 1.3 server
sends one after its HelloRetryRequest) are skipped between messages; an alert, any other record type, a bad record
header or another handshake message first is ``NOT_SERVER_HELLO``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .clienthello import (
    ALERT,
    CHANGE_CIPHER_SPEC,
    HANDSHAKE,
    HANDSHAKE_HEADER,
    RECORD_HEADER,
    RECORD_PAYLOAD_MAX,
    RECORD_VERSION_MINORS,
)

SERVER_HELLO_TYPE = 2
HELLO_RETRY_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
_VERSION_AND_RANDOM = 2 + 32
_SEEN = HANDSHAKE_HEADER + _VERSION_AND_RANDOM


class ServerAnswerKind(enum.Enum):
    SERVER_HELLO = "server_hello"
    HELLO_RETRY_REQUEST = "hello_retry_request"
    NOT_SERVER_HELLO = "not_server_hello"


@dataclass(frozen=True)
class ServerAnswer:
    """One handshake message's reading; ``detail`` says what it was (for a record of why a tunnel closed)."""

    kind: ServerAnswerKind
    detail: str


class ServerHelloReader:
    """Watches the server's first records; ``feed`` every byte the server sends until an answer ends it."""

    def __init__(self) -> None:
        self._header = bytearray()
        self._record_type = 0
        self._record_left = 0  # payload bytes of the current record still to come
        self._message = bytearray()  # the first _SEEN bytes of the current handshake message
        self._message_skip = 0  # bytes of the current handshake message past those, still to come
        self.finished = False

    def feed(self, data: bytes) -> tuple[ServerAnswer, ...]:
        answers: list[ServerAnswer] = []
        at = 0
        while at < len(data) and not self.finished:
            if self._record_left == 0:
                taken = data[at:at + RECORD_HEADER - len(self._header)]
                self._header += taken
                at += len(taken)
                if len(self._header) == RECORD_HEADER:
                    problem = self._start_record(bytes(self._header))
                    self._header.clear()
                    if problem:
                        answers.append(self._finish(ServerAnswerKind.NOT_SERVER_HELLO, problem))
                continue
            chunk = data[at:at + self._record_left]
            at += len(chunk)
            self._record_left -= len(chunk)
            if self._record_type == HANDSHAKE:
                answers.extend(self._take_handshake(chunk))
            elif chunk != b"\x01":
                answers.append(self._finish(ServerAnswerKind.NOT_SERVER_HELLO,
                                            "the server's change_cipher_spec record is not the byte 0x01"))
        return tuple(answers)

    def _start_record(self, header: bytes) -> str | None:
        kind, length = header[0], int.from_bytes(header[3:5], "big")
        if kind == ALERT:
            return "the server answered the ClientHello with a TLS alert"
        if header[1] != 3 or header[2] not in RECORD_VERSION_MINORS or not 1 <= length <= RECORD_PAYLOAD_MAX:
            return f"the server's record header {header.hex()} is not TLS's"
        if kind == CHANGE_CIPHER_SPEC and length == 1 and not self._message and not self._message_skip:
            self._record_type, self._record_left = kind, length
            return None
        if kind != HANDSHAKE:
            return f"the server answered the ClientHello with a record of type {kind}, not a handshake record"
        self._record_type, self._record_left = kind, length
        return None

    def _take_handshake(self, chunk: bytes) -> list[ServerAnswer]:
        answers = []
        at = 0
        while at < len(chunk) and not self.finished:
            if self._message_skip:
                skipped = min(self._message_skip, len(chunk) - at)
                self._message_skip -= skipped
                at += skipped
                continue
            taken = chunk[at:at + _SEEN - len(self._message)]
            self._message += taken
            at += len(taken)
            if len(self._message) >= HANDSHAKE_HEADER:
                message_type = self._message[0]
                length = int.from_bytes(self._message[1:4], "big")
                if message_type != SERVER_HELLO_TYPE:
                    answers.append(self._finish(ServerAnswerKind.NOT_SERVER_HELLO, "the server's handshake message "
                                                f"is of type {message_type}, not a ServerHello (2)"))
                elif length < _VERSION_AND_RANDOM:
                    answers.append(self._finish(ServerAnswerKind.NOT_SERVER_HELLO,
                                                f"the server's ServerHello states {length} bytes, too few"))
                elif len(self._message) == _SEEN:
                    answers.append(self._read_hello(length))
        return answers

    def _read_hello(self, length: int) -> ServerAnswer:
        random = bytes(self._message[HANDSHAKE_HEADER + 2:_SEEN])
        if random != HELLO_RETRY_RANDOM:
            return self._finish(ServerAnswerKind.SERVER_HELLO, "the server answered with a ServerHello")
        self._message.clear()
        self._message_skip = length - _VERSION_AND_RANDOM
        return ServerAnswer(ServerAnswerKind.HELLO_RETRY_REQUEST,
                            "the server answered with a HelloRetryRequest: the client sends a second ClientHello")

    def _finish(self, kind: ServerAnswerKind, detail: str) -> ServerAnswer:
        self.finished = True
        return ServerAnswer(kind, detail)
