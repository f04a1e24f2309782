"""Published test vectors: RFC 6962 Merkle trees, RFC 8785 canonical JSON, RFC 8032 Ed25519.

The Merkle vectors are the Certificate Transparency / transparency-dev ``merkle``
reference data (eight inputs, roots for sizes 1..8, inclusion proofs); they pin our
tree to the one every other implementation computes.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tkbox_daemon import strictjson
from tkbox_daemon.evidence import merkle
from tkbox_daemon.evidence.verify_inclusion import InclusionChecker, proof_length
from tkbox_daemon.evidence.verify_records import canonical_json

# ---- RFC 6962 (certificate-transparency / transparency-dev merkle testdata) -------------------------------
INPUTS = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f",
)]
ROOTS = [bytes.fromhex(h) for h in (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]
EMPTY_ROOT = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
# (0-based leaf index, tree size, proof); the reference data numbers leaves from 1.
INCLUSION = [
    (0, 1, []),
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]
LEAVES = [merkle.leaf_hash(entry) for entry in INPUTS]


def test_leaf_hash_of_the_empty_entry_is_the_size_one_root() -> None:
    assert merkle.leaf_hash(b"") == ROOTS[0]


def test_node_hash_of_the_first_two_leaves_is_the_size_two_root() -> None:
    assert merkle.node_hash(LEAVES[0], LEAVES[1]) == ROOTS[1]


def test_empty_tree_root() -> None:
    assert merkle.root([]).hex() == EMPTY_ROOT == merkle.EMPTY_ROOT.hex()


@pytest.mark.parametrize("size", range(1, 9))
def test_roots_for_sizes_one_to_eight(size: int) -> None:
    assert merkle.root(LEAVES[:size]) == ROOTS[size - 1]
    compact = merkle.CompactRange()
    for leaf in LEAVES[:size]:
        compact.append(leaf)
    assert compact.root() == ROOTS[size - 1]


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
def test_inclusion_proof_vectors(index: int, size: int, proof: list[str]) -> None:
    nodes = [bytes.fromhex(node) for node in proof]
    levels = merkle.tree_levels(LEAVES[:size])
    assert merkle.inclusion_proof(levels, index) == nodes
    assert merkle.verify_inclusion(LEAVES[index], index, size, nodes, ROOTS[size - 1])
    assert proof_length(index, size) == len(nodes)
    checker = InclusionChecker(size, ROOTS[size - 1])
    texts = [base64.b64encode(node).decode() for node in nodes]
    assert checker.check(index, LEAVES[index], texts) is None


def test_inclusion_vectors_reject_a_wrong_leaf_index_or_root() -> None:
    nodes = [bytes.fromhex(node) for node in INCLUSION[2][2]]
    assert not merkle.verify_inclusion(LEAVES[5], 4, 8, nodes, ROOTS[7])
    assert not merkle.verify_inclusion(LEAVES[5], 5, 8, nodes, ROOTS[6])
    assert not merkle.verify_inclusion(LEAVES[4], 5, 8, nodes, ROOTS[7])


# ---- RFC 8785 canonical JSON ------------------------------------------------------------------------------
def test_rfc8785_key_order_is_by_utf16_code_units() -> None:
    """RFC 8785 §3.2.3: the emoji (UTF-16 D83D…) sorts before U+FB33, unlike code point order."""
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",'
        '"\u20ac":"Euro Sign","\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    ).encode("utf-8")
    assert strictjson.canonical(value) == expected
    assert canonical_json(value) == expected


def test_rfc8785_string_escapes_and_literals() -> None:
    """RFC 8785 §3.2.2 example, without its floats (our events are integers only)."""
    value = {"string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/", "literals": [None, True, False]}
    expected = '{"literals":[null,true,false],"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'.encode()
    assert strictjson.canonical(value) == expected
    assert canonical_json(value) == expected


@pytest.mark.parametrize(("value", "text"), [
    (0, b"0"), (-1, b"-1"), (9007199254740991, b"9007199254740991"), (-9007199254740991, b"-9007199254740991"),
    ({"b": [1, 2], "a": {}}, b'{"a":{},"b":[1,2]}'), ("\u2028\u2029", '"\u2028\u2029"'.encode()),
    ("\x00\x1f\x7f", b'"\\u0000\\u001f\x7f"'), ("\b\t\n\f\r", b'"\\b\\t\\n\\f\\r"'),
])
def test_rfc8785_integers_and_escapes(value: object, text: bytes) -> None:
    assert strictjson.canonical(value) == text
    assert canonical_json(value) == text


def test_rfc8785_refuses_integers_beyond_2_53() -> None:
    with pytest.raises(strictjson.StrictJSONError):
        strictjson.canonical(2**53)


# ---- RFC 8032 Ed25519 -------------------------------------------------------------------------------------
def test_rfc8032_test_1() -> None:
    secret = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    public = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    signature = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    key = Ed25519PrivateKey.from_private_bytes(secret)
    assert key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) == public
    assert key.sign(b"") == signature
    key.public_key().verify(signature, b"")


def test_record_key_id_is_sha256_of_the_spki() -> None:
    from tkbox_daemon.evidence.records import key_id

    key = Ed25519PrivateKey.from_private_bytes(bytes(32)).public_key()
    spki = key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    assert key_id(key) == "sha256:" + hashlib.sha256(spki).hexdigest()
