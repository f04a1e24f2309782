"""Patches written by the guest's own code (``tkbox_guest.diff.emit_change``) between two small trees.

A tree is a mapping of path to ``TreeEntry`` (a symlink's data is its target). ``guest_patch(old, new)`` writes
both trees into temporary directories and emits one section per change, as ``diff._Walker`` finds them: sorted by
path, a type change (file <-> symlink) as a deletion then an addition, unchanged entries left out.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tkbox_daemon.patch.operations import MODE_EXEC, MODE_LINK, TreeEntry
from tkbox_guest import diff


def write_tree(root: Path, tree: Mapping[bytes, TreeEntry]) -> None:
    for path, entry in tree.items():
        full = os.path.join(os.fsencode(root), path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if entry.mode == MODE_LINK:
            os.symlink(entry.data, full)
        else:
            with open(full, "wb") as handle:
                handle.write(entry.data)
            os.chmod(full, 0o755 if entry.mode == MODE_EXEC else 0o644)


def _side(root: Path, path: bytes, entry: TreeEntry | None) -> diff.Side | None:
    if entry is None:
        return None
    full = os.path.join(os.fsencode(root), path)
    target = entry.data if entry.mode == MODE_LINK else None
    return diff.Side(entry.mode, full, len(entry.data), target)


def guest_patch(old: Mapping[bytes, TreeEntry], new: Mapping[bytes, TreeEntry]) -> bytes:
    """The patch the guest writes for turning ``old`` into ``new``."""
    with tempfile.TemporaryDirectory() as tmp:
        before, after = Path(tmp, "old"), Path(tmp, "new")
        write_tree(before, old)
        write_tree(after, new)
        changes: list[diff.Change] = []
        for path in sorted(set(old) | set(new)):
            was, now = old.get(path), new.get(path)
            if was == now:
                continue
            old_side, new_side = _side(before, path, was), _side(after, path, now)
            if was is not None and now is not None and (was.mode == MODE_LINK) != (now.mode == MODE_LINK):
                changes += [diff.Change(path, old_side, None), diff.Change(path, None, new_side)]
            else:
                changes.append(diff.Change(path, old_side, new_side))
        return b"".join(b"".join(diff.emit_change(change)[0]) for change in changes)


def entry(data: bytes | str, mode: int = 0o100644) -> TreeEntry:
    return TreeEntry(mode, data.encode() if isinstance(data, str) else data)
