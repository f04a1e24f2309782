"""Signed records: the event schema, its hash, the record signature and both hash chains.

A record is one JSONL line ``{"v":1,"event":{…},"hash":…,"alg":"ed25519","kid":…,"sig":…}``.
``hash`` is ``sha256:`` + SHA-256 of the event's RFC 8785 bytes.  ``sig`` is Ed25519
over the canonical bytes of the *signed header* (tag, alg, kid, log id, both chain
positions and the event hash), so chains are bound into every signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .. import strictjson
from . import merkle

RECORD_VERSION = 1
EVENT_SCHEMA = "tkbox.event.v1"
SIGNED_TAG = "tkbox.record.v1"
ALG = "ed25519"
ZERO_HASH = "sha256:" + "0" * 64
SIGNER_RUN_ID = "tkbox/signer"
MAX_RECORD_BYTES = 1 << 20
MAX_SEQ = 2**53 - 1

EVENT_KEYS = frozenset(
    {"schema", "id", "log_id", "seq", "prev_hash", "run_id", "run_seq", "run_prev_hash", "ts", "type", "identity", "data"}
)
OPTIONAL_EVENT_KEYS = frozenset({"request_id"})
RECORD_KEYS = frozenset({"v", "event", "hash", "alg", "kid", "sig"})

# Patterns are used with fullmatch and re.ASCII: ``$`` would accept a trailing newline and
# ``\d`` any Unicode digit.
_HASH = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)
_HEX32 = re.compile(r"[0-9a-f]{32}", re.ASCII)
_RUN_ID = re.compile(r"[A-Za-z0-9._:/-]{1,128}", re.ASCII)
_TYPE = re.compile(r"[a-z][a-z0-9_.]{0,63}", re.ASCII)
_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", re.ASCII)
_IDENTITY = re.compile(r"uid:\d{1,10}|signer", re.ASCII)
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}", re.ASCII)
_UNESCAPED_ASCII = re.compile(r'[ !#-\[\]-~]*', re.ASCII)  # printable ASCII but '"' and '\\': JSON keeps it as is


class RecordError(ValueError):
    """A record is malformed or does not verify; the message names the first problem."""


def sha256_text(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hash_bytes(text: str) -> bytes:
    """The 32 bytes behind a ``sha256:<hex>`` string."""
    return bytes.fromhex(text[7:])


def public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    """``sha256:`` of the DER SubjectPublicKeyInfo, as in Tracekit."""
    return sha256_text(key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo))


def signed_header(event: dict[str, Any], event_hash: str, kid: str) -> bytes:
    """Canonical bytes of the header that the record signature covers."""
    seq, run_seq = event["seq"], event["run_seq"]
    try:
        strings = "".join((kid, event["log_id"], event["prev_hash"], event["run_id"], event["run_prev_hash"], event_hash))
    except TypeError:  # a field that is not a string: the reference encoder says what is wrong
        strings = None
    if strings is not None and _UNESCAPED_ASCII.fullmatch(strings) and _is_seq(seq) and _is_seq(run_seq):
        # Canonical JSON spelled out (keys sorted, no escapes needed, integers in range), the same
        # bytes as the reference encoding below; a property test holds the two equal.
        return (
            f'{{"alg":"{ALG}","hash":"{event_hash}","kid":"{kid}","log_id":"{event["log_id"]}",'
            f'"prev_hash":"{event["prev_hash"]}","run_id":"{event["run_id"]}",'
            f'"run_prev_hash":"{event["run_prev_hash"]}","run_seq":{run_seq},"seq":{seq},"t":"{SIGNED_TAG}"}}'
        ).encode("ascii")
    return strictjson.canonical(
        {
            "t": SIGNED_TAG,
            "alg": ALG,
            "kid": kid,
            "log_id": event["log_id"],
            "seq": event["seq"],
            "prev_hash": event["prev_hash"],
            "run_id": event["run_id"],
            "run_seq": event["run_seq"],
            "run_prev_hash": event["run_prev_hash"],
            "hash": event_hash,
        }
    )


@dataclass(frozen=True)
class Record:
    """One signed record; ``line`` is exactly what is stored and exported."""

    event: dict[str, Any]
    hash: str
    kid: str
    sig: str
    line: bytes

    @property
    def seq(self) -> int:
        return self.event["seq"]

    @property
    def run_id(self) -> str:
        return self.event["run_id"]

    @property
    def run_seq(self) -> int:
        return self.event["run_seq"]

    @property
    def type(self) -> str:
        return self.event["type"]

    def leaf(self) -> bytes:
        """The RFC 6962 leaf hash of this record (over its event hash's 32 bytes); kept once computed (the
        signer's two trees, signed and durable, both take it)."""
        leaf = self.__dict__.get("_leaf")
        if leaf is None:
            leaf = merkle.leaf_hash(hash_bytes(self.hash))
            object.__setattr__(self, "_leaf", leaf)
        return leaf


def sign_event(event: dict[str, Any], key: Ed25519PrivateKey, kid: str) -> Record:
    """Hash and sign a complete event into a record."""
    event_bytes, event_is_compact = strictjson.canonical_and_compact(event)
    event_hash = sha256_text(event_bytes)
    signature = key.sign(signed_header(event, event_hash, kid))
    sig = base64.b64encode(signature).decode()
    if event_is_compact and _HASH.fullmatch(kid):
        # The line is compact(body) spelled out: keys in sorted order, and every value but the
        # event is ASCII that JSON does not escape (hex, base64, the constants), so the event's
        # bytes are reused instead of encoding it again.  A property test holds the two equal.
        line = b"".join((
            _LINE_HEAD, event_bytes, b',"hash":"', event_hash.encode(), b'","kid":"', kid.encode(),
            b'","sig":"', sig.encode(), _LINE_TAIL,
        ))
    else:
        body = {"v": RECORD_VERSION, "event": event, "hash": event_hash, "alg": ALG, "kid": kid, "sig": sig}
        line = strictjson.compact(body) + b"\n"
    return Record(event, event_hash, kid, sig, line)


_LINE_HEAD = b'{"alg":"' + ALG.encode() + b'","event":'
_LINE_TAIL = b'","v":' + str(RECORD_VERSION).encode() + b"}\n"


def parse_record(line: bytes) -> Record:
    """Strictly parse one stored line (with or without its newline) into a Record; signatures are not checked."""
    raw = line[:-1] if line.endswith(b"\n") else line
    try:
        body = strictjson.loads_object(raw, max_bytes=MAX_RECORD_BYTES)
    except strictjson.StrictJSONError as exc:
        raise RecordError(f"record is not strict JSON: {exc}") from None
    if set(body) != RECORD_KEYS:
        raise RecordError("record keys are not exactly v, event, hash, alg, kid, sig")
    if type(body["v"]) is not int or body["v"] != RECORD_VERSION or body["alg"] != ALG:
        raise RecordError("unsupported record version or algorithm")
    for name in ("hash", "kid"):
        if not isinstance(body[name], str) or not _HASH.fullmatch(body[name]):
            raise RecordError(f"record {name} is not sha256:<64 hex>")
    if not isinstance(body["sig"], str):
        raise RecordError("record sig is not a string")
    event = body["event"]
    check_event_shape(event)
    return Record(event, body["hash"], body["kid"], body["sig"], raw + b"\n")


def _matches(pattern: re.Pattern[str]) -> Any:
    return lambda value: isinstance(value, str) and pattern.fullmatch(value) is not None


def _is_seq(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_SEQ


# Built once (not per call): the verifier checks every record of a bundle with it.
_FIELD_CHECKS: tuple[tuple[str, Any], ...] = (
    ("schema", lambda value: value == EVENT_SCHEMA),
    ("id", _matches(_HEX32)),
    ("log_id", _matches(_HEX32)),
    ("seq", _is_seq),
    ("run_seq", _is_seq),
    ("prev_hash", _matches(_HASH)),
    ("run_prev_hash", _matches(_HASH)),
    ("run_id", _matches(_RUN_ID)),
    ("ts", _matches(_TS)),
    ("type", _matches(_TYPE)),
    ("identity", _matches(_IDENTITY)),
    ("data", lambda value: isinstance(value, dict)),
    ("request_id", _matches(_REQUEST_ID)),
)


# All string fields at once, for the common case (one regex call instead of nine); the
# per-field checks above then only run to name the field of an invalid event.
_STRING_FIELDS = ("id", "log_id", "prev_hash", "run_prev_hash", "run_id", "ts", "type", "identity")
_ALL_STRINGS = re.compile(
    "\n".join(p.pattern for p in (_HEX32, _HEX32, _HASH, _HASH, _RUN_ID, _TS, _TYPE)) + f"\n(?:{_IDENTITY.pattern})",
    re.ASCII,
)


def _fast_shape_ok(event: dict[str, Any]) -> bool:
    try:
        strings = [event[name] for name in _STRING_FIELDS]
        joined = "\n".join(strings)
    except TypeError:  # a field that is not a string
        return False
    return (
        _ALL_STRINGS.fullmatch(joined) is not None
        and event["schema"] == EVENT_SCHEMA
        and _is_seq(event["seq"])
        and _is_seq(event["run_seq"])
        and isinstance(event["data"], dict)
        and ("request_id" not in event or _FIELD_CHECKS[-1][1](event["request_id"]))
    )


def check_event_shape(event: Any) -> None:
    """Closed schema of the common event fields (``data`` is type-specific and checked elsewhere)."""
    if not isinstance(event, dict):
        raise RecordError("event is not an object")
    # All required fields, and at most the optional ones besides (counting avoids two set differences).
    extra = len(event) - len(EVENT_KEYS)
    if not EVENT_KEYS <= event.keys() or extra > sum(1 for name in OPTIONAL_EVENT_KEYS if name in event):
        raise RecordError("event fields are not the closed set of tkbox.event.v1")
    if _fast_shape_ok(event):
        return
    for name, ok in _FIELD_CHECKS:
        if name in event and not ok(event[name]):
            raise RecordError(f"event field {name!r} is invalid")
    raise RecordError("event fields are invalid")  # unreachable: the checks agree


def verify_record(record: Record, key: Ed25519PublicKey, kid: str) -> None:
    """Check the event hash and the signature; raise RecordError naming what failed."""
    if record.kid != kid:
        raise RecordError("record is signed by a key that is not pinned")
    if sha256_text(strictjson.canonical(record.event)) != record.hash:
        raise RecordError("event hash does not match the event")
    signature = decode_signature(record.sig)
    try:
        key.verify(signature, signed_header(record.event, record.hash, kid))
    except InvalidSignature:
        raise RecordError("signature does not verify") from None


def decode_signature(sig: str) -> bytes:
    """The 64 signature bytes of canonical standard base64 (padded, zero trailing bits).

    Non-canonical trailing bits decode to the same bytes, so the text is re-encoded and
    compared: otherwise a changed byte in ``sig`` could leave the record verifying.
    """
    try:
        signature = base64.b64decode(sig, validate=True)
    except (binascii.Error, ValueError):
        raise RecordError("signature is not base64") from None
    if len(signature) != 64:
        raise RecordError("signature is not 64 bytes")
    if base64.b64encode(signature).decode() != sig:
        raise RecordError("signature is not canonical base64")
    return signature
