"""C2SP signed notes carrying tlog checkpoints, signed with an Ed25519 log key.

A checkpoint body is three lines: origin, tree size, base64 root hash.  A signature
line is ``— <name> <base64(key id ‖ signature)>`` where the key id is the first four
bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key).  A verifier key (vkey) is
``<name>+<hex key id>+<base64(0x01 ‖ public key)>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ED25519_TYPE = b"\x01"
MAX_NOTE_BYTES = 1 << 20
MAX_SIGNATURE_LINES = 64
SIGNATURE_PREFIX = "\u2014 "
_KEY_NAME = re.compile(r"[\x21-\x2a\x2c-\x7e]+")  # printable, no spaces, no '+' (fullmatch)
_ORIGIN = re.compile(r"[\x21-\x7e][\x20-\x7e]{0,254}")  # fullmatch: ``$`` would allow a trailing newline


class NoteError(ValueError):
    """A note or vkey is malformed or does not verify; the message says which."""


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes

    def body(self) -> bytes:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n".encode()


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(name: str, public_raw: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + ED25519_TYPE + public_raw).digest()[:4]


def vkey_for(name: str, key: Ed25519PublicKey) -> str:
    if not _KEY_NAME.fullmatch(name):
        raise NoteError(f"invalid key name {name!r}")
    raw = _raw_public(key)
    return f"{name}+{key_id(name, raw).hex()}+{base64.b64encode(ED25519_TYPE + raw).decode()}"


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_id: bytes
    public: Ed25519PublicKey

    @classmethod
    def parse(cls, vkey: str) -> VerifierKey:
        parts = vkey.split("+", 2)  # the base64 key itself may contain '+'; names cannot
        if len(parts) != 3:
            raise NoteError("a vkey is name+hexid+base64key")
        name, hex_id, encoded = parts
        if not _KEY_NAME.fullmatch(name):
            raise NoteError(f"invalid key name {name!r}")
        try:
            wanted_id = bytes.fromhex(hex_id)
            typed = base64.b64decode(encoded, validate=True)
        except (ValueError, binascii.Error):
            raise NoteError("vkey id or key is not valid hex/base64") from None
        if len(wanted_id) != 4 or len(typed) != 33 or typed[:1] != ED25519_TYPE:
            raise NoteError("vkey is not an Ed25519 (type 0x01) key")
        if key_id(name, typed[1:]) != wanted_id:
            raise NoteError("vkey id does not match its key")
        return cls(name, wanted_id, Ed25519PublicKey.from_public_bytes(typed[1:]))


def sign_checkpoint(checkpoint: Checkpoint, name: str, key: Ed25519PrivateKey) -> bytes:
    """The signed note text for ``checkpoint``."""
    body = checkpoint.body()
    signature = key.sign(body)
    kid = key_id(name, _raw_public(key.public_key()))
    line = f"{SIGNATURE_PREFIX}{name} {base64.b64encode(kid + signature).decode()}\n"
    return body + b"\n" + line.encode()


def open_checkpoint(note: bytes, pinned: VerifierKey) -> Checkpoint:
    """Verify ``note`` against the pinned key and parse its checkpoint body.

    Unknown signers' lines are ignored; a pinned key that fails, signs twice, or
    is absent is an error.
    """
    if len(note) > MAX_NOTE_BYTES:
        raise NoteError("note is larger than 1 MiB")
    try:
        text = note.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError("note is not UTF-8") from None
    if "\r" in text or not text.endswith("\n"):
        raise NoteError("note must use \\n line endings and end with a newline")
    body_text, sep, signatures = text.partition("\n\n")
    if not sep:
        raise NoteError("note has no blank line before its signatures")
    body = (body_text + "\n").encode()
    lines = signatures.split("\n")[:-1]
    if not lines or len(lines) > MAX_SIGNATURE_LINES:
        raise NoteError("note must have between 1 and 64 signature lines")
    found = 0
    for line in lines:
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError("malformed signature line")
        name, _, encoded = line[len(SIGNATURE_PREFIX):].partition(" ")
        try:
            blob = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise NoteError("signature is not base64") from None
        if base64.b64encode(blob).decode() != encoded:
            raise NoteError("signature is not canonical base64")  # else flipped padding bits still verify
        if len(blob) < 5:
            raise NoteError("signature too short")
        if name != pinned.name or blob[:4] != pinned.key_id:
            continue
        found += 1
        try:
            pinned.public.verify(blob[4:], body)
        except InvalidSignature:
            raise NoteError("the pinned log key's signature does not verify") from None
    if found != 1:
        raise NoteError("the note is not signed exactly once by the pinned log key")
    return _parse_body(body_text, pinned.name)


def _parse_body(body_text: str, expected_origin: str) -> Checkpoint:
    lines = body_text.split("\n")
    if len(lines) < 3:
        raise NoteError("checkpoint body needs origin, size and root")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    if not _ORIGIN.fullmatch(origin) or origin != expected_origin:
        raise NoteError(f"checkpoint origin {origin!r} is not the pinned {expected_origin!r}")
    if not (size_text.isascii() and size_text.isdigit()) or (len(size_text) > 1 and size_text[0] == "0") or len(size_text) > 19:
        raise NoteError("checkpoint size is not a decimal number")
    try:
        root = base64.b64decode(root_text, validate=True)
    except binascii.Error:
        raise NoteError("checkpoint root is not base64") from None
    if len(root) != 32:
        raise NoteError("checkpoint root is not 32 bytes")
    return Checkpoint(origin, int(size_text), root)
