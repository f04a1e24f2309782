"""Test helpers for the checkout writer: build a tree from a dict, read one back, and a ``CheckoutFs`` that
records its calls and fails (or runs a callback) at chosen ones."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from tkbox_daemon.patch.checkout_fs import CheckoutFs
from tkbox_daemon.patch.checkout_plan import ABSENT, FileImage, PreImage, SymlinkImage

# A leaf: ("file", content, mode) or ("link", target)
Leaf = tuple
Tree = Mapping[bytes, Leaf]


def build(root: Path, tree: Tree) -> None:
    """Make ``tree`` under ``root`` (directories as needed, modes exact)."""
    for path, leaf in tree.items():
        target = os.path.join(os.fsencode(root), path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if leaf[0] == "file":
            with open(target, "wb") as handle:
                handle.write(leaf[1])
            os.chmod(target, leaf[2])
        else:
            os.symlink(leaf[1], target)


def snapshot(root: Path) -> tuple[dict[bytes, Leaf], set[bytes]]:
    """Every file and symlink under ``root`` (content, exact permission bits; target) and every directory."""
    leaves: dict[bytes, Leaf] = {}
    dirs: set[bytes] = set()
    base = os.fsencode(root)
    for here, subdirs, files in os.walk(base, followlinks=False):
        relative = os.path.relpath(here, base)
        for name in subdirs + files:
            path = name if relative == b"." else relative + b"/" + name
            full = os.path.join(here, name)
            if os.path.islink(full):
                leaves[path] = ("link", os.readlink(full))
            elif os.path.isdir(full):
                dirs.add(path)
            else:
                with open(full, "rb") as handle:
                    leaves[path] = ("file", handle.read(), os.stat(full).st_mode & 0o7777)
    return leaves, dirs


def dirs_of(tree: Tree) -> set[bytes]:
    return {b"/".join(path.split(b"/")[:end]) for path in tree for end in range(1, path.count(b"/") + 1)}


def image(leaf: Leaf | None) -> PreImage:
    if leaf is None:
        return ABSENT
    if leaf[0] == "file":
        return FileImage(leaf[2], hashlib.sha256(leaf[1]).hexdigest())
    return SymlinkImage(leaf[1])


class InjectingFs(CheckoutFs):
    """Counts calls (1-based); raises EIO at the numbers in ``fail_at``; runs ``on_call(number, op, name)`` first."""

    def __init__(self, fail_at: set[int] | frozenset[int] = frozenset(),
                 on_call: Callable[[int, str, bytes | None], None] | None = None) -> None:
        self.fail_at, self.on_call = set(fail_at), on_call
        self.calls: list[tuple[str, bytes | None]] = []

    def before(self, op: str, name: bytes | None) -> None:
        self.calls.append((op, name))
        if self.on_call is not None:
            self.on_call(len(self.calls), op, name)
        if len(self.calls) in self.fail_at:
            raise OSError(errno.EIO, f"injected failure at call {len(self.calls)} ({op})")
