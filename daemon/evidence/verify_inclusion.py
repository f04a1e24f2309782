"""Inclusion proofs for verify: strict parsing of ``proofs.json`` and proof checking.

Every record of a bundle is proven against the checkpoint's root.  Records of consecutive
seqs are checked together against one computation of their part of the tree
(``verify_tree``: no proof is walked on its own, and only the nodes the records' leaves do not
determine are decoded).  What that does not accept, and records in short runs, are checked
proof by proof by ``InclusionChecker``: proofs of nearby leaves share most of their nodes, so
nodes already proven to lie on a path to the root are kept by position ``(level, index)``: a
new proof is hashed only up to the first node that is already known, and its remaining nodes
must then *equal* the known siblings (so no byte of any proof goes unchecked).  Positions
follow ``merkle.tree_levels``: a level's odd last node is carried up unchanged.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from operator import itemgetter

from .. import strictjson
from . import merkle
from .records import MAX_SEQ
from .verify_tree import accepted_in_range

MAX_PROOFS_BYTES = 64 << 20
MAX_PROOF_NODES = 64
MAX_PROOFS = 500_000  # two files of at most 250,000 records
MIN_SHARED_RUN = 16  # shorter runs of consecutive seqs are cheaper to check proof by proof, with the cache
_SEQ_KEY = re.compile(r"0|[1-9][0-9]{0,15}", re.ASCII)
_SEQ_KEYS = re.compile(r"(?:0|[1-9][0-9]{0,15})(?:\n(?:0|[1-9][0-9]{0,15}))*", re.ASCII)  # keys joined by newlines


class ProofsError(ValueError):
    """``proofs.json`` is malformed; the message says where."""


@dataclass(frozen=True)
class ProofsFile:
    tree_size: int
    proofs: dict[int, list[str]]  # seq -> base64 nodes, decoded on use


def parse_proofs(data: bytes) -> ProofsFile:
    """Strictly parse ``{"proofs":{"<seq>":[b64,…]},"tree_size":N}``, which must be in canonical form.

    For this schema canonical form (RFC 8785) means: no whitespace, no escapes, object keys
    unique and sorted.  Checking exactly that is several times faster than re-serialising
    a file of this size.  Node texts are type-checked and decoded when a proof is checked.
    """
    if len(data) > MAX_PROOFS_BYTES:
        raise ProofsError(f"proofs.json is larger than {MAX_PROOFS_BYTES} bytes")
    if any(byte in data for byte in _NOT_IN_CANONICAL):
        raise ProofsError("proofs.json is not in canonical form (RFC 8785): whitespace or escapes")
    # A node takes 47 bytes; bound the strings before parsing, as millions of tiny ones would cost gigabytes.
    if data.count(b'"') > len(data) // 16 + 16 or data.count(b"[") > 2 * MAX_PROOFS + 16:
        raise ProofsError("proofs.json holds implausibly many proofs or strings")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProofsError(f"proofs.json is not UTF-8 (byte {exc.start})") from None
    try:
        document = _PROOFS_DECODER.decode(text)
    except (strictjson.StrictJSONError, ValueError, RecursionError) as exc:
        raise ProofsError(f"proofs.json is not strict canonical JSON: {str(exc)[:200]}") from None
    if not isinstance(document, dict) or list(document) != ["proofs", "tree_size"]:
        raise ProofsError("proofs.json fields are not exactly proofs and tree_size")
    tree_size, proofs = document["tree_size"], document["proofs"]
    if type(tree_size) is not int or not 1 <= tree_size <= MAX_SEQ:
        raise ProofsError("proofs.json tree_size is not a positive integer")
    if not isinstance(proofs, dict):
        raise ProofsError("proofs.json proofs is not an object")
    keys, lists = list(proofs), list(proofs.values())
    if (keys and _SEQ_KEYS.fullmatch("\n".join(keys)) and set(map(type, lists)) == {list}
            and max(map(len, lists)) <= MAX_PROOF_NODES):  # all well-formed: convert them at once
        return ProofsFile(tree_size, dict(zip(map(int, keys), lists, strict=True)))
    parsed: dict[int, list[str]] = {}
    for key, nodes in proofs.items():
        if not _SEQ_KEY.fullmatch(key):
            raise ProofsError(f"proofs.json key {key[:40]!r} is not a decimal seq")
        if type(nodes) is not list or len(nodes) > MAX_PROOF_NODES:
            raise ProofsError(f"proofs.json proof for seq {key} is not a list of at most {MAX_PROOF_NODES} nodes")
        parsed[int(key)] = nodes
    return ProofsFile(tree_size, parsed)


def _sorted_unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        raise strictjson.StrictJSONError("object keys are not unique and sorted (RFC 8785)")
    return dict(pairs)


def _refuse(text: str) -> object:
    raise strictjson.StrictJSONError(f"{text} is not allowed (integers only)")


# Canonical proofs.json has no whitespace and no escapes (base64 and digits need none).
_NOT_IN_CANONICAL = (b" ", b"\n", b"\r", b"\t", b"\\")
_PROOFS_DECODER = json.JSONDecoder(object_pairs_hook=_sorted_unique_object, parse_float=_refuse,
                                   parse_constant=_refuse)


def proof_length(index: int, tree_size: int) -> int:
    """How many nodes the inclusion proof of leaf ``index`` has in a tree of ``tree_size`` leaves."""
    length, width = 0, tree_size
    while width > 1:
        if index & 1 or index + 1 < width:
            length += 1
        index >>= 1
        width = (width + 1) >> 1
    return length


class InclusionChecker:
    """Checks inclusion proofs against one trusted root, remembering every node it has proven.

    For each proven position it keeps the node and the proof texts that lead from it to
    the root (its sibling first).  A new proof is hashed up to the first proven position;
    the node computed there must equal the proven one and the rest of the proof must be
    exactly the proven texts, so the rest needs no hashing and no byte goes unchecked.
    """

    def __init__(self, tree_size: int, root: bytes) -> None:
        self.tree_size = tree_size
        top, width = 0, tree_size
        while width > 1:
            top, width = top + 1, (width + 1) >> 1
        # position -> (node, text of the sibling if not in the list, texts, where in texts the path continues)
        self._known: dict[tuple[int, int], tuple[bytes, str | None, list[str], int]] = {(top, 0): (root, None, [], 0)}
        self._decoded: dict[str, bytes] = {}

    def decode(self, text: str) -> bytes:
        """A proof node from canonical base64 of 32 bytes (each distinct text decoded once)."""
        node = self._decoded.get(text) if type(text) is str else None
        if node is None:
            if type(text) is not str:
                raise ProofsError("a proof node is not a string")
            try:
                node = binascii.a2b_base64(text, strict_mode=True)
            except (binascii.Error, ValueError):
                raise ProofsError("a proof node is not base64") from None
            if len(node) != merkle.HASH_SIZE or binascii.b2a_base64(node, newline=False).decode() != text:
                raise ProofsError("a proof node is not canonical base64 of 32 bytes")
            self._decoded[text] = node
        return node

    def check(self, index: int, leaf: bytes, proof: list[str]) -> str | None:
        """None if ``proof`` places ``leaf`` at ``index`` under the root, else the reason it does not."""
        if not 0 <= index < self.tree_size:
            return f"seq {index} is outside the checkpoint's tree of size {self.tree_size}"
        known = self._known
        path: list[tuple[tuple[int, int], bytes, int, bool]] = []  # position, node, where its texts start, has sibling
        level, position, width, value, used = 0, index, self.tree_size, leaf, 0
        while True:
            proven = known.get((level, position))
            if proven is not None:
                node, first, texts, start = proven
                if node != value:
                    return "the proof does not lead to the checkpoint's root"
                if first is None:
                    same = proof[used:] == texts[start:]
                else:
                    same = used < len(proof) and proof[used] == first and proof[used + 1:] == texts[start:]
                if not same:
                    return f"the proof differs from proven nodes from level {level} up (wrong or extra nodes)"
                break
            has_sibling = bool(position & 1) or position + 1 < width
            path.append(((level, position), value, used, has_sibling))
            if has_sibling:
                if used >= len(proof):
                    return "the proof is too short"
                try:
                    sibling = self.decode(proof[used])
                except ProofsError as exc:
                    return str(exc)
                used += 1
                value = merkle.node_hash(sibling, value) if position & 1 else merkle.node_hash(value, sibling)
            level, position, width = level + 1, position >> 1, (width + 1) >> 1
        for (level, position), node, start, has_sibling in path:
            known[(level, position)] = (node, None, proof, start)
            if has_sibling and (level, position ^ 1) not in known:
                # The sibling's path starts with this node, then continues as this node's does.
                text = binascii.b2a_base64(node, newline=False).decode()
                known[(level, position ^ 1)] = (self._decoded[proof[start]], text, proof, start + 1)
        return None


_sha256 = hashlib.sha256
_LEAF_PREFIX = merkle.LEAF_PREFIX
_FIRST = itemgetter(0)


def _leaf_or_empty(event_hash: str) -> bytes:
    try:
        return merkle.leaf_hash(bytes.fromhex(event_hash[7:]))
    except ValueError:
        return b""


class InclusionRun:
    """Inclusion of many records, fed chunk by chunk in any order (as a pool finishes them).

    Which records fail does not depend on the order (a proven node is a true node), and
    the reason reported is recomputed for the first failing record without the cache, so
    the verdict is the same whatever order the chunks arrive in.

    It consumes ``proofs.proofs``: a proof accepted for a record is dropped from it (freeing
    its memory while the pool still works) and only its record's hash is kept, for a later
    record with the same seq (same leaf: included; another leaf: that proof cannot place it).
    """

    def __init__(self, proofs: ProofsFile, tree_size: int, root: bytes) -> None:
        self.proofs = proofs
        self.tree_size, self.root = tree_size, root
        self._checker = InclusionChecker(tree_size, root)
        self._seen: set[int] = set()
        self._missing: list[int] = []
        self._failed: list[int] = []
        self._leaves: dict[int, bytes] = {}
        self._consumed: dict[int, str] = {}  # seq -> the record's hash, for proofs accepted and dropped

    def add(self, positions: list[tuple[int, str]]) -> None:
        """Check ``(seq, "sha256:<hex>")`` positions.

        Runs of consecutive seqs are checked together against one computation of their part of
        the tree (``verify_tree``); what that does not accept is checked proof by proof.
        """
        proofs, consumed = self.proofs.proofs, self._consumed
        seqs = list(map(_FIRST, positions))
        self._seen.update(seqs)
        if not all(seq in proofs for seq in seqs):
            self._missing.extend(seq for seq in seqs if seq not in proofs and seq not in consumed)
            for seq, event_hash in positions:
                if seq in consumed and _leaf_or_empty(event_hash) != _leaf_or_empty(consumed[seq]):
                    self._failed.append(seq)
            positions = [position for position in positions if position[0] in proofs]
        try:
            leaves = [_sha256(_LEAF_PREFIX + bytes.fromhex(event_hash[7:])).digest() for _, event_hash in positions]
        except ValueError:  # not hex: such a record is checked (and fails) on its own
            leaves = [_leaf_or_empty(event_hash) for _, event_hash in positions]
        seqs = list(map(_FIRST, positions))
        if seqs != sorted(seqs):
            order = sorted(range(len(seqs)), key=seqs.__getitem__)
            seqs, leaves, positions = ([items[index] for index in order] for items in (seqs, leaves, positions))
        breaks = [index for index in range(1, len(seqs)) if seqs[index] != seqs[index - 1] + 1]
        accepted_all: list[int] = []
        for start, end in zip([0, *breaks], [*breaks, len(seqs)], strict=True):
            if end - start >= MIN_SHARED_RUN:
                accepted = accepted_in_range(seqs[start], leaves[start:end], [proofs[seq] for seq in seqs[start:end]],
                                             self.tree_size, self.root)
                accepted_all += [start + index for index, ok in enumerate(accepted) if ok]
                unproven = [start + index for index, ok in enumerate(accepted) if not ok]
            else:
                unproven = list(range(start, end))
            for index in unproven:
                self._check_one(seqs[index], leaves[index])
        for index in accepted_all:  # last: a record with the same seq above may still have needed the proof
            seq = seqs[index]
            if proofs.pop(seq, None) is not None:
                consumed[seq] = positions[index][1]

    def _check_one(self, seq: int, leaf: bytes) -> None:
        if len(leaf) != merkle.HASH_SIZE or self._checker.check(seq, leaf, self.proofs.proofs[seq]) is not None:
            self._failed.append(seq)
            self._leaves[seq] = leaf

    def problem(self) -> tuple[int | None, str] | None:
        """None if every record added has exactly one proof placing it under the root, else (seq, reason)."""
        if self.proofs.tree_size != self.tree_size:
            return None, f"proofs.json is for tree size {self.proofs.tree_size}, not {self.tree_size}"
        if self._missing:
            return min(self._missing), "proofs.json has no inclusion proof for this record"
        # Every seq seen has a proof (none is missing), so there is no other proof iff the counts agree.
        extra = [seq for seq in self.proofs.proofs if seq not in self._seen] \
            if len(self._seen) != len(self.proofs.proofs) + len(self._consumed) else []
        if extra:
            return None, f"proofs.json has a proof for seq {min(extra)}, which is in neither records file"
        if self._failed:
            seq = min(self._failed)
            return seq, self._explain(seq)
        return None

    def _explain(self, seq: int) -> str:
        """The reason a proof fails, from scratch (no cache), so it does not depend on checking order."""
        if not 0 <= seq < self.tree_size:
            return f"seq {seq} is outside the checkpoint's tree of size {self.tree_size}"
        if seq not in self.proofs.proofs:  # consumed: a valid proof, of another record's leaf
            return "the proof does not lead to the checkpoint's root"
        try:
            nodes = [InclusionChecker(self.tree_size, self.root).decode(text) for text in self.proofs.proofs[seq]]
        except ProofsError as exc:
            return str(exc)
        if len(nodes) != proof_length(seq, self.tree_size):
            return f"the proof has {len(nodes)} nodes, not {proof_length(seq, self.tree_size)}"
        return "the proof does not lead to the checkpoint's root"
