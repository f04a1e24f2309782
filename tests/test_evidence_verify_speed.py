"""verify's inclusion fast paths give exactly the verdicts of the plain checks they stand in for.

- Proofs checked against one shared computation of the tree (``verify_tree``, ``InclusionRun``)
  against the plain RFC 9162 per-proof ``merkle.verify_inclusion``, on random trees, random sets
  of records (gaps, duplicates, records outside the tree, missing and extra proofs), random
  corruptions of proofs and random chunking and order.
- proofs.json's per-proof checks, done at once, against the loop they replace.
"""

from __future__ import annotations

import base64
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon import strictjson
from tkbox_daemon.evidence import merkle
from tkbox_daemon.evidence.verify_inclusion import (
    MAX_PROOF_NODES,
    InclusionChecker,
    InclusionRun,
    ProofsError,
    ProofsFile,
    parse_proofs,
    proof_length,
)
from tkbox_daemon.evidence.verify_tree import accepted_in_range

CORRUPTIONS = ["node", "drop", "extra", "swap", "noncanonical", "not-a-string", "empty", "leaf"]


def b64(node: bytes) -> str:
    return base64.b64encode(node).decode()


def plain_valid(seq: int, leaf: bytes, proof: object, size: int, root: bytes) -> bool:
    """The reference: every node canonical base64 of 32 bytes, and RFC 9162 verification."""
    if not 0 <= seq < size or type(proof) is not list:
        return False
    nodes = []
    for text in proof:
        try:
            nodes.append(InclusionChecker(size, root).decode(text))
        except ProofsError:
            return False
    return merkle.verify_inclusion(leaf, seq, size, nodes, root)


def corrupt(rng: random.Random, proof: list[object], kind: str) -> list[object]:
    proof = list(proof)
    if kind == "node" and proof:
        proof[rng.randrange(len(proof))] = b64(rng.randbytes(32))
    elif kind == "drop" and proof:
        del proof[rng.randrange(len(proof))]
    elif kind == "extra":
        proof.insert(rng.randint(0, len(proof)), b64(rng.randbytes(32)))
    elif kind == "swap" and len(proof) > 1:
        i, j = rng.sample(range(len(proof)), 2)
        proof[i], proof[j] = proof[j], proof[i]
    elif kind == "noncanonical" and proof:
        index = rng.randrange(len(proof))
        text = proof[index]
        if type(text) is str and len(text) == 44:  # set a padding bit, or add a newline
            proof[index] = text[:42] + "B=" if text[42] == "A" else text + "\n"
    elif kind == "not-a-string" and proof:
        proof[rng.randrange(len(proof))] = rng.choice([None, 7, ["x"], {"a": 1}])
    elif kind == "empty":
        proof = []
    return proof


def tree(rng: random.Random, size: int) -> tuple[list[bytes], list[bytes], list[list[bytes]], bytes]:
    """Event hashes, leaves, levels and root of a random tree."""
    hashes = [rng.randbytes(32) for _ in range(size)]
    leaves = [merkle.leaf_hash(value) for value in hashes]
    levels = merkle.tree_levels(leaves)
    return hashes, leaves, levels, merkle.root_from_levels(levels)


# ---- one shared computation for a range of leaves ----------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 300), seed=st.integers(0, 2**32), corrupted=st.integers(0, 4),
       kinds=st.lists(st.sampled_from(CORRUPTIONS), min_size=1, max_size=4))
def test_a_proof_accepted_for_a_range_is_a_valid_audit_path(size: int, seed: int, corrupted: int,
                                                          kinds: list[str]) -> None:
    rng = random.Random(seed)
    _, leaves, levels, root = tree(rng, size)
    first = rng.randrange(size)
    count = rng.randint(1, size - first)
    seqs = list(range(first, first + count))
    claimed = [leaves[seq] for seq in seqs]
    proofs: list[object] = [[b64(node) for node in merkle.inclusion_proof(levels, seq)] for seq in seqs]
    assert accepted_in_range(first, claimed, proofs, size, root) == [True] * count  # all good: all accepted
    for _ in range(corrupted):
        index, kind = rng.randrange(count), rng.choice(kinds)
        if kind == "leaf":
            claimed[index] = rng.randbytes(32)
        else:
            proofs[index] = corrupt(rng, proofs[index], kind)  # type: ignore[arg-type]
    for seq, leaf, proof, accepted in zip(seqs, claimed, proofs, accepted_in_range(first, claimed, proofs, size, root),
                                          strict=True):
        if accepted:
            assert plain_valid(seq, leaf, proof, size, root)


def test_a_range_beyond_the_tree_is_not_accepted() -> None:
    rng = random.Random(1)
    _, leaves, levels, root = tree(rng, 8)
    proofs = [[b64(node) for node in merkle.inclusion_proof(levels, seq)] for seq in range(8)]
    assert accepted_in_range(4, leaves[4:], proofs[4:], 7, root) == [False] * 4
    assert accepted_in_range(-1, leaves[:2], proofs[:2], 8, root) == [False] * 2
    assert accepted_in_range(0, [], [], 8, root) == []


# ---- inclusion of a whole bundle's records, fed in chunks ---------------------------------------------------
def reference_problem(positions: list[tuple[int, str]], proofs: dict[int, list[object]], proofs_size: int,
                      size: int, root: bytes) -> tuple[int | None, str] | None:
    """InclusionRun.problem() as a plain loop over independently checked proofs."""
    if proofs_size != size:
        return None, f"proofs.json is for tree size {proofs_size}, not {size}"
    missing = [seq for seq, _ in positions if seq not in proofs]
    if missing:
        return min(missing), "proofs.json has no inclusion proof for this record"
    seen = {seq for seq, _ in positions}
    extra = [seq for seq in proofs if seq not in seen]
    if extra:
        return None, f"proofs.json has a proof for seq {min(extra)}, which is in neither records file"
    failed = [seq for seq, event_hash in positions
              if not plain_valid(seq, merkle.leaf_hash(bytes.fromhex(event_hash[7:])), proofs[seq], size, root)]
    if not failed:
        return None
    seq = min(failed)
    if not 0 <= seq < size:
        return seq, f"seq {seq} is outside the checkpoint's tree of size {size}"
    try:
        nodes = [InclusionChecker(size, root).decode(text) for text in proofs[seq]]
    except ProofsError as exc:
        return seq, str(exc)
    if len(nodes) != proof_length(seq, size):
        return seq, f"the proof has {len(nodes)} nodes, not {proof_length(seq, size)}"
    return seq, "the proof does not lead to the checkpoint's root"


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 400), seed=st.integers(0, 2**32), corrupted=st.integers(0, 3),
       kinds=st.lists(st.sampled_from([*CORRUPTIONS, "duplicate", "missing", "outside", "extra-proof"]),
                      min_size=1, max_size=4),
       layout=st.sampled_from(["contiguous", "gaps", "sparse"]))
def test_inclusion_run_agrees_with_per_proof_verification(size: int, seed: int, corrupted: int, kinds: list[str],
                                                          layout: str) -> None:
    rng = random.Random(seed)
    hashes, _, levels, root = tree(rng, size)
    if layout == "contiguous":
        first = rng.randrange(size)
        seqs = list(range(first, rng.randint(first + 1, size)))
    elif layout == "gaps":
        seqs = sorted(rng.sample(range(size), k=rng.randint(1, size)))
    else:
        seqs = sorted(rng.sample(range(size), k=min(size, rng.randint(1, 12))))
    positions = [(seq, "sha256:" + hashes[seq].hex()) for seq in seqs]
    proofs: dict[int, list[object]] = {seq: [b64(node) for node in merkle.inclusion_proof(levels, seq)] for seq in seqs}
    for _ in range(corrupted):
        kind, seq = rng.choice(kinds), rng.choice(seqs)
        if kind == "leaf":
            positions[seqs.index(seq)] = (seq, "sha256:" + rng.randbytes(32).hex())
        elif kind == "duplicate":  # a second record at the same seq, with its own or another leaf
            twin = hashes[seq] if rng.random() < 0.5 else rng.randbytes(32)
            positions.insert(rng.randint(0, len(positions)), (seq, "sha256:" + twin.hex()))
        elif kind == "missing":
            proofs.pop(seq, None)
        elif kind == "outside":
            positions.append((size + rng.randint(0, 3), "sha256:" + rng.randbytes(32).hex()))
            proofs[positions[-1][0]] = list(proofs.get(seq, []))
        elif kind == "extra-proof":
            proofs[size + 10] = []
        elif seq in proofs:
            proofs[seq] = corrupt(rng, proofs[seq], kind)
    expected = reference_problem(positions, proofs, size, size, root)
    # Fed in random chunks, in random order (as a pool finishes them), to a run that consumes its copy.
    cuts = sorted(rng.sample(range(1, len(positions)), k=min(len(positions) - 1, rng.randint(0, 6))))
    chunks = [positions[start:end] for start, end in zip([0, *cuts], [*cuts, len(positions)], strict=True)]
    rng.shuffle(chunks)
    run = InclusionRun(ProofsFile(size, {seq: list(proof) for seq, proof in proofs.items()}), size, root)
    for chunk in chunks:
        run.add(chunk)
    assert run.problem() == expected


@pytest.mark.parametrize("twin", ["same leaf", "other leaf"])
def test_a_record_repeating_the_seq_of_an_accepted_one_is_checked_against_its_proof(twin: str) -> None:
    rng = random.Random(7)
    hashes, _, levels, root = tree(rng, 64)
    positions = [(seq, "sha256:" + hashes[seq].hex()) for seq in range(64)]
    proofs: dict[int, list[object]] = {seq: [b64(node) for node in merkle.inclusion_proof(levels, seq)] for seq in range(64)}
    repeat = (40, "sha256:" + (hashes[40] if twin == "same leaf" else rng.randbytes(32)).hex())
    expected = reference_problem([*positions, repeat], proofs, 64, 64, root)
    assert (expected is None) == (twin == "same leaf")
    run = InclusionRun(ProofsFile(64, dict(proofs)), 64, root)
    run.add(positions)  # all accepted together, and their proofs dropped
    assert 40 not in run.proofs.proofs
    run.add([repeat])
    assert run.problem() == expected


# ---- proofs.json: the per-proof checks, done at once when all pass ------------------------------------------
def reference_proofs(proofs: dict[str, object]) -> dict[int, object] | str:
    """parse_proofs' checks of each proof, one by one as they were: the parsed proofs or the error."""
    parsed: dict[int, object] = {}
    for key, nodes in proofs.items():
        if not re.fullmatch(r"0|[1-9][0-9]{0,15}", key, re.ASCII):
            return f"proofs.json key {key[:40]!r} is not a decimal seq"
        if type(nodes) is not list or len(nodes) > MAX_PROOF_NODES:
            return f"proofs.json proof for seq {key} is not a list of at most {MAX_PROOF_NODES} nodes"
        parsed[int(key)] = nodes
    return parsed


KEYS = st.one_of(st.integers(0, 10**17).map(str), st.sampled_from(["01", "-1", "", "1a", "x", "00", "١"]))
NODES = st.one_of(st.integers(0, 70).map(lambda count: ["A" * 43 + "="] * count), st.sampled_from(["x", 7, None, {}]))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, NODES, max_size=6))
def test_proofs_are_checked_as_one_by_one(proofs: dict[str, object]) -> None:
    proofs["9" * 16] = ["A" * 43 + "="] * 64  # a long proof: the document is not refused for its many short strings
    data = strictjson.canonical({"proofs": proofs, "tree_size": 5})
    expected = reference_proofs(dict(sorted(proofs.items())))
    try:
        assert parse_proofs(data).proofs == expected
    except ProofsError as exc:
        assert str(exc) == expected
