"""The agent channel's wire format, shared by host and guest: frames, strict JSON and the per-op schemas.

Sans-IO and standard library only: nothing here touches a socket, a process or a file, so the daemon can import
``tkbox_guest.protocol`` and check the guest's frames with exactly the rules the guest uses to check the host's.

- ``frames``: ``[type u8][len u32 big-endian][payload]`` with ``len <= MAX_PAYLOAD``, the decoder, id payloads and
  the stdin credit window;
- ``strict_json``: the JSON inside REQUEST, RESPONSE and EXIT frames;
- ``schemas``: what each op's request, response and exit must hold.

Anything that breaks a rule raises :class:`ProtocolError`; the receiver then closes the channel.
"""

from __future__ import annotations

from .frames import (
    DATA,
    EXIT,
    GUEST_TO_HOST,
    HEADER_SIZE,
    HOST_TO_GUEST,
    JSON_TYPES,
    MAX_ID_DATA,
    MAX_OUTPUT_CHUNK,
    MAX_PAYLOAD,
    MAX_U32,
    REQUEST,
    RESPONSE,
    STDERR,
    STDIN,
    STDIN_ACK,
    STDIN_EOF,
    STDIN_WINDOW,
    STDOUT,
    TYPE_NAMES,
    Frame,
    FrameDecoder,
    ProtocolError,
    StdinWindow,
    decode_stdin_ack,
    encode_frame,
    encode_id_frame,
    encode_stdin_ack,
    pack_id,
    split_id,
)
from .schemas import (
    ALLOWED_SIGNALS,
    CHANGES,
    DEFAULT_WINSIZE,
    GIT_MODES,
    MAX_FILES_READ,
    MAX_WINSIZE,
    OPS,
    validate_boot,
    validate_exit,
    validate_request,
    validate_response,
)
from .strict_json import (
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    dumps,
    encode_json_frame,
    loads_strict,
)

__all__ = [
    "ALLOWED_SIGNALS",
    "CHANGES",
    "DATA",
    "DEFAULT_WINSIZE",
    "EXIT",
    "Frame",
    "FrameDecoder",
    "GIT_MODES",
    "GUEST_TO_HOST",
    "HEADER_SIZE",
    "HOST_TO_GUEST",
    "JSON_TYPES",
    "MAX_DEPTH",
    "MAX_FILES_READ",
    "MAX_ID_DATA",
    "MAX_OUTPUT_CHUNK",
    "MAX_PAYLOAD",
    "MAX_SAFE_INTEGER",
    "MAX_U32",
    "MAX_WINSIZE",
    "OPS",
    "ProtocolError",
    "REQUEST",
    "RESPONSE",
    "STDERR",
    "STDIN",
    "STDIN_ACK",
    "STDIN_EOF",
    "STDIN_WINDOW",
    "STDOUT",
    "StdinWindow",
    "TYPE_NAMES",
    "decode_stdin_ack",
    "dumps",
    "encode_frame",
    "encode_id_frame",
    "encode_json_frame",
    "encode_stdin_ack",
    "loads_strict",
    "pack_id",
    "split_id",
    "validate_boot",
    "validate_exit",
    "validate_request",
    "validate_response",
]
