"""Trust files: built from keys, written atomically, parsed strictly (closed schema, clear errors)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from evidence_factory import fixed_keys, seeded_key

from tkbox_daemon.evidence import note
from tkbox_daemon.evidence import trust as trust_file
from tkbox_daemon.evidence.records import key_id
from tkbox_daemon.evidence.trust import (
    TrustError,
    build_trust,
    load_trust,
    parse_trust,
    trust_bytes,
    write_trust,
)

KEYS = fixed_keys("main")


def document() -> dict[str, Any]:
    return KEYS.trust_document()


def test_build_write_load_round_trip(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "run.trust.json"
    write_trust(path, document())
    loaded = load_trust(path)
    assert loaded.log_vkeys == (KEYS.vkey,)
    assert loaded.algs == ("ed25519",)
    (key,) = loaded.record_keys
    assert key.kid == document()["record_keys"][0]["kid"]
    assert key.public().public_bytes_raw() == KEYS.record_key.public_key().public_bytes_raw()
    assert loaded.log_key_for(KEYS.origin) is not None and loaded.log_key_for("other") is None
    assert loaded.record_key(key.kid) == key and loaded.record_key("sha256:" + "0" * 64) is None
    assert path.read_bytes() == trust_bytes(document())
    assert [p.name for p in path.parent.iterdir()] == ["run.trust.json"]  # no temporary file left


def test_the_exporters_pretty_printed_form_parses() -> None:
    text = json.dumps(document(), indent=2, sort_keys=True) + "\n"
    assert parse_trust(text.encode()).log_vkeys == (KEYS.vkey,)


def test_several_keys() -> None:
    other = fixed_keys("other")
    doc = build_trust(record_key=KEYS.record_key.public_key(), log_vkey=KEYS.vkey,
                      record_keys=[other.record_key.public_key()], log_vkeys=[other.vkey])
    parsed = parse_trust(trust_bytes(doc))
    assert len(parsed.record_keys) == 2 and len(parsed.log_vkeys) == 2
    assert parsed.summary() == "2 log keys, 2 record keys, algs ed25519"


def edited(**changes: Any) -> bytes:
    doc = document()
    doc.update(changes)
    return json.dumps(doc).encode()


def with_record_key(**changes: Any) -> bytes:
    doc = document()
    doc["record_keys"][0].update(changes)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("data", "match"), [
    (b"", "not strict JSON"),
    (b"garbage", "not strict JSON"),
    (b"[]", "not strict JSON|object"),
    (b"\xff\xfe{}", "not strict JSON"),
    (b'{"format":"tkbox.trust.v1","format":"x"}', "duplicate"),
    (b" " * (64 * 1024 + 1), "larger than"),
    (edited(extra=1), "unknown \\['extra'\\]"),
    (json.dumps({k: v for k, v in document().items() if k != "algs"}).encode(), "missing \\['algs'\\]"),
    (edited(format="tkbox.trust.v2"), "format"),
    (edited(algs=[]), "algs must be a list"),
    (edited(algs=["rsa"]), "not supported"),
    (edited(algs=["ed25519", "ed25519"]), "duplicate"),
    (edited(log_vkeys="x"), "log_vkeys must be a list"),
    (edited(log_vkeys=["not-a-vkey"]), "not a valid vkey"),
    (edited(log_vkeys=[KEYS.vkey, KEYS.vkey]), "duplicate"),
    (edited(log_vkeys=[KEYS.vkey, fixed_keys("x").vkey.replace(fixed_keys("x").origin, KEYS.origin)]),
     "not a valid vkey|two keys"),
    (edited(record_keys=[]), "record_keys must be a list"),
    (edited(record_keys=[{"kid": "x"}]), "exactly kid, alg and public_key"),
    (with_record_key(alg="rsa"), "not in algs"),
    (with_record_key(alg=1), "must be strings"),
    (with_record_key(kid="sha256:" + "0" * 64), "kid is not sha256"),
    (with_record_key(public_key="AAAA"), "canonical base64 of 32 bytes"),
    (with_record_key(public_key="!!"), "not base64"),
])
def test_bad_trust_files_are_refused_with_a_clear_error(data: bytes, match: str) -> None:
    with pytest.raises(TrustError, match=match):
        parse_trust(data)


def test_non_canonical_public_key_base64_is_refused() -> None:
    raw = KEYS.record_key.public_key().public_bytes_raw()
    text = base64.b64encode(raw).decode()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    tweaked = text[:-2] + alphabet[alphabet.index(text[-2]) ^ 1] + "="  # 32 bytes leave 2 spare bits
    assert base64.b64decode(tweaked) == raw
    with pytest.raises(TrustError, match="canonical"):
        parse_trust(with_record_key(public_key=tweaked))


def test_duplicate_record_kids_are_refused() -> None:
    doc = document()
    doc["record_keys"].append(dict(doc["record_keys"][0]))
    with pytest.raises(TrustError, match="duplicate kids"):
        parse_trust(json.dumps(doc).encode())


def test_a_missing_file_is_a_trust_error(tmp_path: Path) -> None:
    with pytest.raises(TrustError, match="cannot read"):
        load_trust(tmp_path / "absent.json")


def test_build_refuses_an_invalid_vkey() -> None:
    with pytest.raises(TrustError):
        build_trust(record_key=seeded_key("r").public_key(), log_vkey="nope")


def test_module_constants() -> None:
    assert trust_file.TRUST_FORMAT == "tkbox.trust.v1"


SMALL_ORDER_KEYS = [bytes([1]) + bytes(31),  # the neutral point
                    bytes(32),  # a point of order 4
                    bytes.fromhex("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")]  # order 2


@pytest.mark.parametrize("raw", SMALL_ORDER_KEYS)
def test_a_pinned_record_key_of_small_order_is_refused(raw: bytes) -> None:
    kid = key_id(Ed25519PublicKey.from_public_bytes(raw))  # OpenSSL loads such a key without a word
    data = with_record_key(public_key=base64.b64encode(raw).decode(), kid=kid)
    with pytest.raises(TrustError, match=r"record_keys\[0\]: public_key is not a point of Ed25519's prime-order "
                                         r"group .* tkbox signer trust"):
        parse_trust(data)


@pytest.mark.parametrize("raw", SMALL_ORDER_KEYS)
def test_a_pinned_log_key_of_small_order_is_refused(raw: bytes) -> None:
    doc = document()
    doc["log_vkeys"] = [note.vkey_for(KEYS.origin, Ed25519PublicKey.from_public_bytes(raw))]
    with pytest.raises(TrustError, match="is not a point of Ed25519's prime-order group"):
        parse_trust(json.dumps(doc).encode())
