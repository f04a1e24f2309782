"""The signer's keys: created on first use (0600), loaded strictly, never leaving the signer process.

record.key   Ed25519, signs every record
log.key      Ed25519, signs checkpoints (C2SP notes) only
run_token.key  32 random bytes, HMAC key for run tokens
salt.key     32 random bytes, HMAC key that derives commitment salts
log_id       32 hex, the log's identity (not secret)
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..evidence import note
from ..evidence.records import key_id
from .mac import HmacSha256

KEY_BYTES = 32


class KeyFileError(RuntimeError):
    """A key file is unsafe or damaged; the message names the file and the fix."""


@dataclass(frozen=True)
class SignerKeys:
    record_key: Ed25519PrivateKey
    log_key: Ed25519PrivateKey
    run_token_key: bytes
    salt_key: bytes
    log_id: str
    salt_mac: HmacSha256 = field(init=False, repr=False, compare=False)  # salt_key's HMAC, set up once

    def __post_init__(self) -> None:
        object.__setattr__(self, "salt_mac", HmacSha256(self.salt_key))

    @property
    def record_kid(self) -> str:
        return key_id(self.record_key.public_key())

    @property
    def origin(self) -> str:
        return f"tkbox.local/{self.log_id}"

    @property
    def log_vkey(self) -> str:
        return note.vkey_for(self.origin, self.log_key.public_key())

    def salt(self, label: str) -> bytes:
        return self.salt_mac.digest(label.encode())


def _read_or_create_secret(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return _read_secret(path)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise KeyFileError(f"cannot open key {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
            raise KeyFileError(f"key {path} must be owned by uid {os.getuid()} with mode 0600: run chmod 600 {path}")
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise KeyFileError(f"key {path} is {len(data)} bytes, not {KEY_BYTES}; it is damaged (restore it from a backup)")
    return data


def load_or_create(keys_dir: Path) -> SignerKeys:
    """Load the four keys and the log id from ``keys_dir``, creating any that are missing."""
    record_seed = _read_or_create_secret(keys_dir / "record.key")
    log_seed = _read_or_create_secret(keys_dir / "log.key")
    run_token_key = _read_or_create_secret(keys_dir / "run_token.key")
    salt_key = _read_or_create_secret(keys_dir / "salt.key")
    log_id = _read_or_create_secret(keys_dir / "log_id")[:16].hex()
    return SignerKeys(
        record_key=Ed25519PrivateKey.from_private_bytes(record_seed),
        log_key=Ed25519PrivateKey.from_private_bytes(log_seed),
        run_token_key=run_token_key,
        salt_key=salt_key,
        log_id=log_id,
    )
