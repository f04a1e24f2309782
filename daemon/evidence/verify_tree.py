"""Inclusion of a contiguous range of leaves, checked against ONE bottom-up computation of the tree.

The leaves at seqs ``first .. first + m - 1`` determine every node all of whose leaves lie in
that range, and a valid proof's sibling at such a node *is* that node.  So the nodes above
the range are computed once, level by level from the leaves (a level's odd last node carried
up, as in ``merkle.tree_levels``).  Where the range does not determine a sibling (at most one
on each side of each level) it is taken from the proof of the range's first or last leaf.

A record's proof is then *accepted* when it is, text for text, the list of siblings of this
one computation along its leaf's path, and the computation ends at the root.  Each node text
of an accepted proof is canonical base64 of the very node the computation hashed at that
step, so hashing the proof from the leaf retraces the computation: it is a valid RFC 9162
audit path for the leaf's index and the tree size.  A proof that is not accepted need not be
invalid (one wrong leaf or edge sibling spoils the computation for the whole range), so the
caller checks those one by one.  Comparing texts avoids decoding the ~15 nodes of every proof.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Sequence
from typing import Any

HASH_SIZE = 32
_NODE_PREFIX = b"\x01"
_sha256 = hashlib.sha256
_b2a = binascii.b2a_base64


class _Spoilt(Exception):
    """The shared computation cannot vouch for any proof of the range."""


def node_from_text(text: Any) -> bytes | None:
    """The 32-byte node a proof text stands for, if it is canonical base64 of 32 bytes, else None."""
    if type(text) is not str:
        return None
    try:
        node = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    if len(node) != HASH_SIZE or _b2a(node, newline=False).decode("ascii") != text:
        return None
    return node


def accepted_in_range(first: int, leaves: Sequence[bytes], proofs: Sequence[Any], tree_size: int,
                      root: bytes) -> list[bool]:
    """For leaves at seqs ``first, first + 1, …`` and their proofs (lists of base64 node texts): which
    proofs are accepted, i.e. provably valid audit paths to ``root`` in a tree of ``tree_size``.

    ``False`` means "not shown here", not "invalid": check those proofs on their own.
    """
    count = len(leaves)
    if not count or first < 0 or first + count > tree_size or any(len(leaf) != HASH_SIZE for leaf in leaves):
        return [False] * count
    try:
        levels = _siblings(first, list(leaves), proofs[0], proofs[-1], tree_size, root)
    except _Spoilt:
        return [False] * count
    # Top down: the expected proof of each position is its sibling's text, then its parent's.
    tails: list[list[str]] = [[]]
    for low, siblings in reversed(levels):
        odd = low & 1
        tails = [tails[(index + odd) >> 1] if text is None else [text, *tails[(index + odd) >> 1]]
                 for index, text in enumerate(siblings)]
    return [proof == tail for proof, tail in zip(proofs, tails, strict=True)]


def _siblings(first: int, values: list[bytes], left_proof: Any, right_proof: Any, tree_size: int,
              root: bytes) -> list[tuple[int, list[str | None]]]:
    """Bottom up: per level, the range's first position and the text of each position's sibling (None: none)."""
    levels: list[tuple[int, list[str | None]]] = []
    low, width = first, tree_size
    left_used = right_used = 0  # nodes of the first / last leaf's proof used so far
    while width > 1:
        count = len(values)
        texts = _texts(values)
        siblings: list[str | None] = [None] * count
        start = low & 1  # the first position that is a left child
        stop = count - ((count - start) & 1)  # pairs of positions both in the range: [start, stop)
        siblings[start:stop:2] = texts[start + 1:stop:2]
        siblings[start + 1:stop:2] = texts[start:stop:2]
        parents = [_sha256(_NODE_PREFIX + left + right).digest()
                   for left, right in zip(values[start:stop:2], values[start + 1:stop:2], strict=True)]
        if start:  # the first position is a right child; its left sibling is outside the range
            text, node = _claim(left_proof, left_used)
            siblings[0] = text
            parents.insert(0, _sha256(_NODE_PREFIX + node + values[0]).digest())
        if stop < count:  # the last position is a left child
            if low + count < width:  # its right sibling is outside the range
                text, node = _claim(right_proof, right_used)
                siblings[-1] = text
                parents.append(_sha256(_NODE_PREFIX + values[-1] + node).digest())
            else:  # the level's odd last node, carried up unchanged
                parents.append(values[-1])
        left_used += siblings[0] is not None
        right_used += siblings[-1] is not None
        levels.append((low, siblings))
        low, values, width = low >> 1, parents, (width + 1) >> 1
    if values[0] != root:
        raise _Spoilt
    return levels


def _texts(values: list[bytes]) -> list[str]:
    """Canonical base64 of each 32-byte value, encoded in one call.

    Each value with a zero byte appended is 33 bytes, a whole number of base64 groups, so the
    values encode independently: 44 characters each, the first 43 of them those of the value
    alone, whose own 44th is the padding "=".
    """
    if len(values) < 8:
        return [_b2a(value, newline=False).decode("ascii") for value in values]
    joined = _b2a(b"\0".join(values) + b"\0", newline=False).decode("ascii")
    return [joined[at:at + 43] + "=" for at in range(0, len(joined), 44)]


def _claim(proof: Any, index: int) -> tuple[str, bytes]:
    """Node ``index`` of a proof, as its text and its bytes."""
    if type(proof) is not list or index >= len(proof):
        raise _Spoilt
    text = proof[index]
    node = node_from_text(text)
    if node is None:
        raise _Spoilt
    return text, node
