"""Ed25519 checks of record signatures for verify, through libsodium (PyNaCl).

One Ed25519 verification is most of what a record costs verify.  libsodium's is 1.6x
faster than OpenSSL's (which ``cryptography`` uses) on the measured machine: about 40 µs
against 64 µs a signature (docs/performance.md).  So verify's per-record check uses it;
signing, the checkpoint note and the trust file's keys stay with ``cryptography``, which
also makes the verifier an implementation independent of the signer's.

Both check the same cofactorless equation ``[S]B = R + [k]A`` against the encodings in
the signature.  libsodium refuses more: small-order and non-canonical encodings of the
key and of R, which an honest signer never makes.  Either way nothing passes here that
OpenSSL would refuse; ``tests/test_evidence_signature_check.py`` holds both to the RFC 8032
vectors and to the same verdict on damaged signatures, and shows the stricter refusals.  ``is_signing_key``
is what the trust file asks of every key it pins.
"""

from __future__ import annotations

from nacl.bindings import (
    crypto_core_ed25519_is_valid_point,
    crypto_sign_BYTES,
    crypto_sign_open,
    crypto_sign_PUBLICKEYBYTES,
)
from nacl.exceptions import BadSignatureError


class RecordKey:
    """A pinned Ed25519 public key (its 32 raw bytes) that checks signatures."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        if type(raw) is not bytes or len(raw) != crypto_sign_PUBLICKEYBYTES:
            raise ValueError(f"an Ed25519 public key is {crypto_sign_PUBLICKEYBYTES} raw bytes")
        self.raw = raw

    def verifies(self, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` (64 bytes) is this key's signature of ``message``."""
        if len(signature) != crypto_sign_BYTES:
            return False
        try:
            crypto_sign_open(signature + message, self.raw)
        except BadSignatureError:
            return False
        return True

    def __repr__(self) -> str:
        return f"RecordKey({self.raw.hex()})"


def is_signing_key(raw: bytes) -> bool:
    """Whether ``raw`` can be an honest Ed25519 public key: a canonical encoding of a point of the prime-order
    group (every key made from a private key is one).  A small-order point is not: with it, OpenSSL accepts a
    signature made without any private key for any message (``tests/test_evidence_signature_check.py``)."""
    return (type(raw) is bytes and len(raw) == crypto_sign_PUBLICKEYBYTES
            and crypto_core_ed25519_is_valid_point(raw))
