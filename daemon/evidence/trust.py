"""The trust file (``tkbox.trust.v1``): the keys a verifier pins, built from the signer's keys and parsed strictly.

``{"format":"tkbox.trust.v1","log_vkeys":[<vkey>],"record_keys":[{"kid","alg","public_key"}],"algs":["ed25519"]}``

The schema is closed: an unknown field, a missing one, a duplicate key, a kid that is
not the hash of its key or a vkey that does not parse is a ``TrustError`` naming the
field.  The trust file pins keys only; everything else is proved by the bundle.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .. import strictjson
from ..fsutil import write_atomically
from . import note
from .records import key_id, public_raw
from .signature_check import is_signing_key

TRUST_FORMAT = "tkbox.trust.v1"
SUPPORTED_ALGS = ("ed25519",)
MAX_TRUST_BYTES = 64 * 1024
MAX_KEYS = 16
TRUST_FIELDS = frozenset({"format", "log_vkeys", "record_keys", "algs"})
RECORD_KEY_FIELDS = frozenset({"kid", "alg", "public_key"})


class TrustError(ValueError):
    """The trust file is unusable; the message says which field is wrong."""


@dataclass(frozen=True)
class PinnedRecordKey:
    """A record-signing key the verifier accepts: its kid, algorithm and raw 32-byte public key."""

    kid: str
    alg: str
    public_key: bytes

    def public(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.public_key)

    def public_b64(self) -> str:
        return base64.b64encode(self.public_key).decode()


@dataclass(frozen=True)
class Trust:
    """A parsed trust file: pinned checkpoint (log) keys, pinned record keys and allowed algorithms."""

    log_vkeys: tuple[str, ...]
    record_keys: tuple[PinnedRecordKey, ...]
    algs: tuple[str, ...]

    def log_key_for(self, origin: str) -> note.VerifierKey | None:
        """The pinned log key whose name is ``origin`` (a checkpoint's key name is its origin)."""
        for vkey in self.log_vkeys:
            parsed = note.VerifierKey.parse(vkey)
            if parsed.name == origin:
                return parsed
        return None

    def record_key(self, kid: str) -> PinnedRecordKey | None:
        for key in self.record_keys:
            if key.kid == kid:
                return key
        return None

    def summary(self) -> str:
        logs = len(self.log_vkeys)
        records = len(self.record_keys)
        return (
            f"{logs} log key{'s' * (logs != 1)}, {records} record key{'s' * (records != 1)}, "
            f"algs {', '.join(self.algs)}"
        )


def build_trust(
    *,
    record_key: Ed25519PublicKey | None = None,
    log_vkey: str | None = None,
    record_keys: Iterable[Ed25519PublicKey] = (),
    log_vkeys: Iterable[str] = (),
) -> dict[str, Any]:
    """The trust document pinning the given record key(s) and log vkey(s), ready to serialise."""
    publics = ([record_key] if record_key is not None else []) + list(record_keys)
    vkeys = ([log_vkey] if log_vkey is not None else []) + list(log_vkeys)
    document = {
        "format": TRUST_FORMAT,
        "log_vkeys": vkeys,
        "record_keys": [
            {"kid": key_id(key), "alg": "ed25519", "public_key": base64.b64encode(public_raw(key)).decode()}
            for key in publics
        ],
        "algs": list(SUPPORTED_ALGS),
    }
    parse_trust_document(document)  # what we write must be what we accept
    return document


def trust_bytes(document: dict[str, Any]) -> bytes:
    """The file bytes of a trust document: canonical JSON plus a newline."""
    return strictjson.canonical(document) + b"\n"


def write_trust(path: str | os.PathLike[str], document: dict[str, Any]) -> None:
    """Write a trust document atomically (temporary file, fsync, rename)."""
    write_atomically(Path(path), trust_bytes(document))


def load_trust(path: str | os.PathLike[str]) -> Trust:
    """Read and strictly parse a trust file (at most 64 KiB)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_TRUST_BYTES + 1)
    except OSError as exc:
        raise TrustError(f"cannot read the trust file {os.fspath(path)!r}: {exc.strerror or exc}") from None
    return parse_trust(data)


def parse_trust(data: bytes) -> Trust:
    """Strictly parse trust file bytes."""
    if len(data) > MAX_TRUST_BYTES:
        raise TrustError(f"the trust file is larger than {MAX_TRUST_BYTES} bytes")
    try:
        document = strictjson.loads_object(data, max_bytes=MAX_TRUST_BYTES, max_depth=4)
    except strictjson.StrictJSONError as exc:
        raise TrustError(f"the trust file is not strict JSON: {exc}") from None
    return parse_trust_document(document)


def parse_trust_document(document: Any) -> Trust:
    """Check a trust document against the closed schema and return the pinned keys."""
    if not isinstance(document, dict):
        raise TrustError("the trust file is not a JSON object")
    if set(document) != TRUST_FIELDS:
        unknown = sorted(set(document) - TRUST_FIELDS)
        missing = sorted(TRUST_FIELDS - set(document))
        raise TrustError(f"trust file fields are wrong (unknown {unknown}, missing {missing})")
    if document["format"] != TRUST_FORMAT:
        raise TrustError(f"trust file format is {document['format']!r}, not {TRUST_FORMAT!r}")
    algs = _parse_algs(document["algs"])
    vkeys = _parse_log_vkeys(document["log_vkeys"])
    record_keys = _parse_record_keys(document["record_keys"], algs)
    return Trust(vkeys, record_keys, algs)


def _string_list(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not value or len(value) > MAX_KEYS:
        raise TrustError(f"{field} must be a list of 1 to {MAX_KEYS} entries")
    if not all(isinstance(item, str) for item in value):
        raise TrustError(f"{field} entries must be strings")
    if len(set(value)) != len(value):
        raise TrustError(f"{field} has duplicate entries")
    return value


def _parse_algs(value: Any) -> tuple[str, ...]:
    algs = _string_list(value, "algs")
    for alg in algs:
        if alg not in SUPPORTED_ALGS:
            raise TrustError(f"algs: {alg!r} is not supported (supported: {', '.join(SUPPORTED_ALGS)})")
    return tuple(algs)


def _parse_log_vkeys(value: Any) -> tuple[str, ...]:
    vkeys = _string_list(value, "log_vkeys")
    names = set()
    for vkey in vkeys:
        try:
            parsed = note.VerifierKey.parse(vkey)
        except (note.NoteError, ValueError) as exc:
            raise TrustError(f"log_vkeys: {vkey[:80]!r} is not a valid vkey: {exc}") from None
        if note.vkey_for(parsed.name, parsed.public) != vkey:
            raise TrustError(f"log_vkeys: {vkey[:80]!r} is not in canonical form")
        _require_signing_key(parsed.public.public_bytes_raw(), f"log_vkeys: {parsed.name!r}")
        if parsed.name in names:
            raise TrustError(f"log_vkeys: two keys are named {parsed.name!r}")
        names.add(parsed.name)
    return tuple(vkeys)


def _parse_record_keys(value: Any, algs: tuple[str, ...]) -> tuple[PinnedRecordKey, ...]:
    if not isinstance(value, list) or not value or len(value) > MAX_KEYS:
        raise TrustError(f"record_keys must be a list of 1 to {MAX_KEYS} keys")
    keys: list[PinnedRecordKey] = []
    for index, entry in enumerate(value):
        where = f"record_keys[{index}]"
        if not isinstance(entry, dict) or set(entry) != RECORD_KEY_FIELDS:
            raise TrustError(f"{where} must have exactly kid, alg and public_key")
        if not all(isinstance(entry[name], str) for name in RECORD_KEY_FIELDS):
            raise TrustError(f"{where}: kid, alg and public_key must be strings")
        if entry["alg"] not in algs:
            raise TrustError(f"{where}: alg {entry['alg']!r} is not in algs")
        raw = decode_public_key(entry["public_key"], where)
        _require_signing_key(raw, f"{where}: public_key")
        try:
            public = Ed25519PublicKey.from_public_bytes(raw)
        except ValueError:
            raise TrustError(f"{where}: public_key is not an Ed25519 key") from None
        if key_id(public) != entry["kid"]:
            raise TrustError(f"{where}: kid is not sha256 of the key's SubjectPublicKeyInfo")
        keys.append(PinnedRecordKey(entry["kid"], entry["alg"], raw))
    if len({key.kid for key in keys}) != len(keys):
        raise TrustError("record_keys has duplicate kids")
    return tuple(keys)


def _require_signing_key(raw: bytes, what: str) -> None:
    """TrustError unless ``raw`` is a key a signer can have (``signature_check.is_signing_key``)."""
    if not is_signing_key(raw):
        raise TrustError(f"{what} is not a point of Ed25519's prime-order group (a small-order key verifies forged "
                         "signatures): this trust file is corrupt or forged; export it again from the signer with: "
                         "tkbox signer trust -o run.trust.json")


def decode_public_key(text: str, where: str) -> bytes:
    """Raw 32-byte Ed25519 public key from canonical base64, or TrustError naming ``where``."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise TrustError(f"{where}: public_key is not base64") from None
    if len(raw) != 32 or base64.b64encode(raw).decode() != text:
        raise TrustError(f"{where}: public_key is not canonical base64 of 32 bytes")
    return raw
