"""The log's Merkle tree as a bundle carries it: the run's own records, and for every stretch of the log between
them, the roots of the perfect subtrees that cover it (``tkbox.bundle.v2``).

A stretch ``[start, end)`` of leaves is covered by its *canonical blocks*: from the left, each block is the largest
perfect subtree that starts where the last one ended, is aligned to its own size (its first leaf's index is a
multiple of it) and fits in the stretch.  These are the maximal aligned blocks of the stretch, so they are unique
and at most two per level.  Folding a bundle's records (as leaves) and these block roots, in position order, into
an RFC 6962 frontier gives the root of the whole tree: comparing that with the signed checkpoint proves every
record is in the tree at its ``seq``, with no per-record proof (``Frontier``).  The writer side folds the leaves
of a stretch as it reads the log and hands out the block roots once the stretch ends (``StretchFolder``); both
sides hold O(log N) hashes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from .merkle import EMPTY_ROOT, LEAF_PREFIX, NODE_PREFIX

_sha256 = hashlib.sha256


def leaf_of(event_hash: bytes) -> bytes:
    """RFC 6962 leaf of a record whose ``hash`` is ``sha256:`` + the hex of these 32 bytes."""
    return _sha256(LEAF_PREFIX + event_hash).digest()


def canonical_blocks(start: int, end: int) -> Iterator[tuple[int, int]]:
    """``(first leaf, height)`` of each canonical block covering ``[start, end)``, left to right."""
    position = start
    while position < end:
        height = (end - position).bit_length() - 1  # the largest power of two that fits
        if position:
            height = min(height, (position & -position).bit_length() - 1)  # aligned to its own size
        yield position, height
        position += 1 << height


def block_count(start: int, end: int) -> int:
    """How many canonical blocks cover ``[start, end)``."""
    return sum(1 for _ in canonical_blocks(start, end))


class Frontier:
    """The roots of the perfect subtrees covering ``[0, size)`` (tallest first): a tree built from the left.

    ``add(node, height)`` appends a perfect subtree of ``2**height`` leaves; it must start at a multiple of its own
    size, which holds for a leaf (height 0) and for every canonical block.
    """

    def __init__(self) -> None:
        self.size = 0
        self._heights: list[int] = []
        self._nodes: list[bytes] = []

    def add(self, node: bytes, height: int = 0) -> None:
        if self.size & ((1 << height) - 1):
            raise ValueError(f"a subtree of height {height} cannot start at leaf {self.size}")
        self.size += 1 << height
        heights, nodes = self._heights, self._nodes
        while heights and heights[-1] == height:
            heights.pop()
            node = _sha256(NODE_PREFIX + nodes.pop() + node).digest()
            height += 1
        heights.append(height)
        nodes.append(node)

    def root(self) -> bytes:
        if not self._nodes:
            return EMPTY_ROOT
        value = self._nodes[-1]
        for left in reversed(self._nodes[:-1]):
            value = _sha256(NODE_PREFIX + left + value).digest()
        return value


class StretchFolder:
    """Folds the leaves of one stretch of the log, starting at ``start``, into its canonical blocks.

    Two adjacent blocks of equal height merge when the left one is aligned to twice its size, so after each leaf
    the stack holds the maximal aligned blocks of the stretch so far; when the stretch ends they are its canonical
    blocks (``take``).  At most two blocks per level are held.
    """

    def __init__(self, start: int = 0) -> None:
        self.start = self.end = start
        self._blocks: list[tuple[int, int, bytes]] = []  # (first leaf, height, root)

    def append(self, leaf: bytes) -> None:
        first, height, node = self.end, 0, leaf
        blocks = self._blocks
        while blocks and blocks[-1][1] == height and not blocks[-1][0] & ((2 << height) - 1):
            left_first, _, left = blocks.pop()
            first, height, node = left_first, height + 1, _sha256(NODE_PREFIX + left + node).digest()
        blocks.append((first, height, node))
        self.end += 1

    def take(self) -> list[tuple[int, bytes]]:
        """``(height, root)`` of the stretch's canonical blocks, left to right; the folder then starts a new
        stretch where this one ended."""
        blocks = [(height, node) for _, height, node in self._blocks]
        self._blocks = []
        self.start = self.end
        return blocks

    def skip(self) -> None:
        """A leaf that is not part of any stretch (a record the bundle carries) comes next."""
        if self._blocks:
            raise ValueError("take() the stretch's blocks before a record")
        self.start = self.end = self.end + 1
