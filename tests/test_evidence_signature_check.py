"""verify's record signature check (libsodium) against the RFC 8032 vectors and against cryptography (OpenSSL).

It must accept what an honest signer makes, refuse every damaged signature OpenSSL refuses,
and may only be stricter than OpenSSL, never more lenient.
"""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.evidence.signature_check import RecordKey

# RFC 8032 section 7.1, tests 1 to 3: secret key, public key, message, signature.
RFC8032 = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
]
GROUP_ORDER = 2**252 + 27742317777372353535851937790883648493


def openssl_verifies(public: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except InvalidSignature:
        return False
    return True


@pytest.mark.parametrize(("secret", "public", "message", "signature"), RFC8032)
def test_rfc8032_vectors_verify_and_a_flipped_bit_does_not(secret: str, public: str, message: str, signature: str) -> None:
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
    assert key.sign(bytes.fromhex(message)) == bytes.fromhex(signature)  # the vector, through cryptography
    record_key = RecordKey(bytes.fromhex(public))
    assert record_key.verifies(bytes.fromhex(signature), bytes.fromhex(message))
    damaged = bytearray.fromhex(signature)
    damaged[10] ^= 0x01
    assert not record_key.verifies(bytes(damaged), bytes.fromhex(message))
    assert not record_key.verifies(bytes.fromhex(signature), bytes.fromhex(message) + b"\0")


@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=300),
       where=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255),
       target=st.sampled_from(["signature", "message", "key", "none"]))
def test_same_verdict_as_openssl_on_signatures_and_damaged_ones(seed: bytes, message: bytes, where: int, flip: int,
                                                                target: str) -> None:
    private = Ed25519PrivateKey.from_private_bytes(seed)
    public = private.public_key().public_bytes_raw()
    signature = private.sign(message)
    if target == "signature":
        signature = _flip(signature, where, flip)
    elif target == "message" and message:
        message = _flip(message, where, flip)
    elif target == "key":
        public = _flip(public, where, flip)
    try:
        expected = openssl_verifies(public, signature, message)
    except ValueError:  # OpenSSL cannot even load the damaged key: then libsodium must refuse it too
        expected = False
    assert RecordKey(public).verifies(signature, message) is expected
    assert expected or target != "none"


def _flip(data: bytes, where: int, flip: int) -> bytes:
    damaged = bytearray(data)
    damaged[where % len(damaged)] ^= flip
    return bytes(damaged)


def test_a_non_canonical_s_is_refused_by_both() -> None:
    private = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    public = private.public_key().public_bytes_raw()
    signature = private.sign(b"record")
    s_plus_order = (int.from_bytes(signature[32:], "little") + GROUP_ORDER).to_bytes(32, "little")
    malleable = signature[:32] + s_plus_order
    assert not openssl_verifies(public, malleable, b"record")
    assert not RecordKey(public).verifies(malleable, b"record")


def test_a_small_order_key_that_openssl_accepts_for_any_message_is_refused() -> None:
    identity = bytes([1]) + bytes(31)  # the neutral point: [k]A vanishes, so R = [S]B verifies any message
    base_point = bytes.fromhex("58" + "66" * 31)
    forged = base_point + (1).to_bytes(32, "little")
    assert openssl_verifies(identity, forged, b"any message at all")
    assert not RecordKey(identity).verifies(forged, b"any message at all")


@pytest.mark.parametrize("raw", [b"", bytes(31), bytes(33), "0" * 32, bytearray(32)])
def test_a_key_of_the_wrong_size_or_type_is_refused(raw: object) -> None:
    with pytest.raises(ValueError, match="32 raw bytes"):
        RecordKey(raw)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 63, 65, 128])
def test_a_signature_of_the_wrong_size_does_not_verify(size: int) -> None:
    private = Ed25519PrivateKey.from_private_bytes(bytes(32))
    signature = private.sign(b"m")
    padded = (signature * 2)[:size]
    assert not RecordKey(private.public_key().public_bytes_raw()).verifies(padded, b"m")
