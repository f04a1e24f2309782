"""RFC 6962 / RFC 9162 Merkle trees: leaf and node hashes, roots, inclusion proofs and their verification."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
HASH_SIZE = 32


def leaf_hash(entry: bytes) -> bytes:
    """MTH of a one-entry list: SHA-256(0x00 || entry)."""
    return hashlib.sha256(LEAF_PREFIX + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Interior node: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


def tree_levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """All levels of the tree, leaves first.

    An RFC 6962 tree splits at the largest power of two below n, which is the same
    as pairing nodes level by level and carrying an odd last node up unchanged.
    """
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        below = levels[-1]
        above = [node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
        if len(below) % 2:
            above.append(below[-1])
        levels.append(above)
    return levels


def root_from_levels(levels: list[list[bytes]]) -> bytes:
    return levels[-1][0] if levels[0] else EMPTY_ROOT


def root(leaves: Sequence[bytes]) -> bytes:
    """Merkle tree hash of a list of leaf hashes."""
    return root_from_levels(tree_levels(leaves))


def inclusion_proof(levels: list[list[bytes]], index: int) -> list[bytes]:
    """Audit path for leaf ``index`` in the tree whose levels are given."""
    if not 0 <= index < len(levels[0]):
        raise IndexError(f"leaf {index} is outside a tree of {len(levels[0])}")
    proof = []
    for level in levels[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            proof.append(level[sibling])
        index //= 2
    return proof


class CompactRange:
    """Incremental tree state: the roots of the perfect subtrees covering [0, size).

    Appending costs O(log n) amortised and the root is computable at any size, so
    the signer can checkpoint without re-reading the log.
    """

    def __init__(self) -> None:
        self.size = 0
        self._subtrees: list[tuple[int, bytes]] = []  # (height, hash), tallest first

    def append(self, leaf: bytes) -> None:
        height, value = 0, leaf
        while self._subtrees and self._subtrees[-1][0] == height:
            _, left = self._subtrees.pop()
            value = node_hash(left, value)
            height += 1
        self._subtrees.append((height, value))
        self.size += 1

    def root(self) -> bytes:
        if not self._subtrees:
            return EMPTY_ROOT
        value = self._subtrees[-1][1]
        for _, left in reversed(self._subtrees[:-1]):
            value = node_hash(left, value)
        return value


def verify_inclusion(leaf: bytes, index: int, tree_size: int, proof: Sequence[bytes], expected_root: bytes) -> bool:
    """RFC 9162 §2.1.3.2: does ``proof`` place ``leaf`` at ``index`` of a tree with ``expected_root``?"""
    if not 0 <= index < tree_size:
        return False
    if any(len(node) != HASH_SIZE for node in proof):
        return False
    fn, sn = index, tree_size - 1
    value = leaf
    for node in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            value = node_hash(node, value)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            value = node_hash(value, node)
        fn >>= 1
        sn >>= 1
    return sn == 0 and value == expected_root
