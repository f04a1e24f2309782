"""The workspace patch: what the job changed, read from the overlay's upper layer and compared with the lower.

The upper layer holds every change in full (the box mounts with ``redirect_dir=off,metacopy=off``): new and
copied-up files and symlinks, directories, whiteouts (character devices 0/0) for deletions, and opaque
directories for a directory deleted and made again. An entry in the upper layer is a change only if it differs
from the lower one in what git records (content, the owner's execute bit, symlink target, file type), so a bare
``chmod`` or ``touch`` that copied a file up without changing any of those gives nothing.

An opaque directory hides every lower entry not in the upper one. Its ``trusted.overlay.opaque`` xattr is readable
only with CAP_SYS_ADMIN, so when ``merged`` (the mounted ``/workspace``) is given, a lower entry that is in neither
the upper directory nor the merged view counts as deleted, whatever the xattrs say; ``trusted.overlay.opaque`` and
``user.overlay.opaque`` are also honoured when readable. Without ``merged`` (after unmounting) only the xattrs can
tell, which needs the reader to see them (root, or a ``userxattr`` mount).

Fifos, sockets and device files are not something git records: in the upper layer they count as "no file", in
the lower as "nothing there". Empty directories are invisible, as in git.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import gitpatch
from .gitpatch import MODE_EXEC, MODE_FILE, MODE_LINK, ZERO_OID

TEXT_LIMIT = 8 << 20  # bigger files are written as binary literals, streamed, never held in memory
READ_CHUNK = 1 << 20
_OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")


class DiffError(Exception):
    """The patch cannot be made (a file changed or vanished while being read, an unreadable directory...)."""


@dataclass(frozen=True)
class Side:
    """One side of a change: a regular file (read from ``path`` when needed) or a symlink (its ``target``)."""

    mode: int
    path: bytes
    size: int
    target: bytes | None = None

    @property
    def is_link(self) -> bool:
        return self.mode == MODE_LINK


@dataclass(frozen=True)
class Change:
    path: bytes  # relative to the workspace root
    old: Side | None
    new: Side | None


def _join(root: bytes, rel: bytes) -> bytes:
    return os.path.join(root, rel) if rel else root


def _lstat(path: bytes) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _side(path: bytes, st: os.stat_result | None) -> Side | None:
    if st is None:
        return None
    if stat.S_ISREG(st.st_mode):
        return Side(MODE_EXEC if st.st_mode & stat.S_IXUSR else MODE_FILE, path, st.st_size)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        return Side(MODE_LINK, path, len(target), target)
    return None


def _xattr_opaque(path: bytes) -> bool:
    for name in _OPAQUE_XATTRS:
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


class _Walker:
    def __init__(self, upper: bytes, lower: bytes, merged: bytes | None) -> None:
        self.upper, self.lower, self.merged = upper, lower, merged
        self.changes: list[Change] = []

    def walk_dir(self, rel: bytes, opaque_above: bool = False) -> None:
        """A directory present in the upper layer (the root, or one whose lower counterpart is a directory).

        Below an opaque directory nothing of the lower layer shows through, whatever the subdirectories' xattrs
        say, so opacity is inherited.
        """
        up_dir = _join(self.upper, rel)
        up_names = set(os.listdir(up_dir))
        low_st = _lstat(_join(self.lower, rel))
        hidden: set[bytes] = set()
        opaque = opaque_above or _xattr_opaque(up_dir)
        if low_st is not None and stat.S_ISDIR(low_st.st_mode):
            absent = set(os.listdir(_join(self.lower, rel))) - up_names
            if absent and opaque:
                hidden = absent
            elif absent and self.merged is not None:
                merged_dir = _join(self.merged, rel)
                hidden = {name for name in absent if _lstat(os.path.join(merged_dir, name)) is None}
        for name in sorted(up_names | hidden):
            child = os.path.join(rel, name) if rel else name
            if name in hidden:
                self.delete(child)
            else:
                self.entry(child, opaque)

    def entry(self, rel: bytes, opaque_above: bool) -> None:
        up_path, low_path = _join(self.upper, rel), _join(self.lower, rel)
        up_st, low_st = os.lstat(up_path), _lstat(low_path)
        low_is_dir = low_st is not None and stat.S_ISDIR(low_st.st_mode)
        if stat.S_ISDIR(up_st.st_mode):
            if low_is_dir:
                self.walk_dir(rel, opaque_above)
                return
            self.delete(rel)
            self.add_tree(rel)
            return
        new = None if _is_whiteout(up_st) else _side(up_path, up_st)
        if low_is_dir:
            self.delete(rel)
            old = None
        else:
            old = _side(low_path, low_st)
        self.compare(rel, old, new)

    def compare(self, rel: bytes, old: Side | None, new: Side | None) -> None:
        if old is None and new is None:
            return
        if old is not None and new is not None and old.is_link != new.is_link:
            self.changes.append(Change(rel, old, None))
            self.changes.append(Change(rel, None, new))
            return
        if old is not None and new is not None and old.mode == new.mode and _same_content(old, new):
            return
        self.changes.append(Change(rel, old, new))

    def delete(self, rel: bytes) -> None:
        """Everything git sees at ``rel`` in the lower layer is gone."""
        path = _join(self.lower, rel)
        st = _lstat(path)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            for name in sorted(os.listdir(path)):
                self.delete(os.path.join(rel, name))
            return
        old = _side(path, st)
        if old is not None:
            self.changes.append(Change(rel, old, None))

    def add_tree(self, rel: bytes) -> None:
        """Everything git would see at ``rel`` in the upper layer is new (nothing of the lower shows through)."""
        path = _join(self.upper, rel)
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            for name in sorted(os.listdir(path)):
                self.add_tree(os.path.join(rel, name))
            return
        new = None if _is_whiteout(st) else _side(path, st)
        if new is not None:
            self.changes.append(Change(rel, None, new))


def _chunks(side: Side) -> Iterator[bytes]:
    """The side's exact content, checked against the size seen when the change was found."""
    if side.is_link:
        assert side.target is not None
        yield side.target
        return
    try:
        fd = os.open(side.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise DiffError(f"cannot open {os.fsdecode(side.path)}: {exc.strerror}") from None
    try:
        left = side.size
        while left > 0:
            chunk = os.read(fd, min(READ_CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
        if left or os.read(fd, 1):
            raise DiffError(f"{os.fsdecode(side.path)} changed size while the patch was made")
    finally:
        os.close(fd)


def _content(side: Side) -> bytes:
    return b"".join(_chunks(side))


def _same_content(old: Side, new: Side) -> bool:
    if old.size != new.size:
        return False
    if old.is_link:
        return old.target == new.target
    digests = []
    for side in (old, new):
        digest = hashlib.sha256()
        for chunk in _chunks(side):
            digest.update(chunk)
        digests.append(digest.digest())
    return digests[0] == digests[1]


def _literal(side: Side | None, data: bytes | None) -> Iterator[bytes]:
    if side is None:
        return gitpatch.binary_literal(0, [])
    return gitpatch.binary_literal(side.size, [data] if data is not None else _chunks(side))


def emit_change(change: Change) -> tuple[Iterator[bytes], dict[str, Any]]:
    """The patch text of one change, and its summary entry for the ``diff`` response.

    Small files are read once, here; files above ``TEXT_LIMIT`` are streamed twice (blob id, then literal).
    """
    old, new = change.old, change.new
    blank = "a" if old is None else "b" if new is None else None
    diff_line, minus, plus = gitpatch.file_header(change.path, blank_label=blank)
    old_mode = b"" if old is None else gitpatch.mode_text(old.mode)
    new_mode = b"" if new is None else gitpatch.mode_text(new.mode)
    summary: dict[str, Any] = {
        "path": change.path.decode("utf-8", "backslashreplace"),
        "change": "added" if old is None else "deleted" if new is None else "modified",
        "binary": False, "old_mode": old_mode.decode() or None, "new_mode": new_mode.decode() or None,
    }
    head = [diff_line]
    if old is None:
        head.append(b"new file mode %s\n" % new_mode)
    elif new is None:
        head.append(b"deleted file mode %s\n" % old_mode)
    elif old.mode != new.mode:
        head.append(b"old mode %s\nnew mode %s\n" % (old_mode, new_mode))
        if _same_content(old, new):
            summary["change"] = "mode"
            return iter(head), summary

    small = all(side.size <= TEXT_LIMIT for side in (old, new) if side is not None)
    old_data = _content(old) if old is not None and small else None
    new_data = _content(new) if new is not None and small else None
    if small:
        binary = any(side is not None and not side.is_link and gitpatch.is_binary(data)
                     for side, data in ((old, old_data), (new, new_data)))
    else:
        binary = True
    summary["binary"] = binary
    oids = []
    for side, data in ((old, old_data), (new, new_data)):
        if side is None:
            oids.append(ZERO_OID)
        elif data is not None:
            oids.append(gitpatch.blob_oid(data))
        else:
            oids.append(gitpatch.blob_oid_stream(side.size, _chunks(side)))
    suffix = b" " + new_mode if old is not None and new is not None and old.mode == new.mode else b""
    head.append(b"index %s..%s%s\n" % (oids[0], oids[1], suffix))
    if all(side.size == 0 for side in (old, new) if side is not None):
        return iter(head), summary

    def body() -> Iterator[bytes]:
        yield from head
        if binary:
            yield b"GIT binary patch\n"
            yield from _literal(new, new_data)
            yield from _literal(old, old_data)
            return
        yield minus
        yield plus
        yield from gitpatch.text_hunks(old_data or b"", new_data or b"")

    return body(), summary


def collect_changes(upper: str | bytes, lower: str | bytes, merged: str | bytes | None = None) -> list[Change]:
    """Every change, sorted by path; for the same path a deletion comes before an addition (a type change)."""
    walker = _Walker(os.fsencode(upper), os.fsencode(lower), None if merged is None else os.fsencode(merged))
    try:
        walker.walk_dir(b"")
    except OSError as exc:
        raise DiffError(f"cannot read {os.fsdecode(exc.filename or b'')}: {exc.strerror}") from None
    return sorted(walker.changes, key=lambda change: (change.path, change.new is not None))


def iter_patch(upper: str | bytes, lower: str | bytes, merged: str | bytes | None = None,
               summaries: list[dict[str, Any]] | None = None) -> Iterator[bytes]:
    """The git-format patch in pieces; ``summaries`` (if given) receives one entry per ``diff --git`` section."""
    for change in collect_changes(upper, lower, merged):
        try:
            pieces, summary = emit_change(change)
            yield from pieces
        except OSError as exc:
            raise DiffError(f"cannot read {os.fsdecode(change.path)}: {exc.strerror}") from None
        if summaries is not None:
            summaries.append(summary)


def make_patch(upper: str | bytes, lower: str | bytes, merged: str | bytes | None = None) -> bytes:
    """The whole patch at once (tests and small workspaces)."""
    return b"".join(iter_patch(upper, lower, merged))
