"""The workspace patch: what the job changed, read from the overlay's upper layer and compared with the lower.

The upper layer holds every change in full (the box mounts with ``redirect_dir=off,metacopy=off``): new and
copied-up files and symlinks, directories, whiteouts (character devices 0/0) for deletions, and opaque
directories for a directory deleted and made again. An entry in the upper layer is a change only if it differs
from the lower one in what git records (content, the owner's execute bit, symlink target, file type), so a bare
``chmod`` or ``touch`` that copied a file up without changing any of those gives nothing.

An opaque directory hides every lower entry not in the upper one. Its ``trusted.overlay.opaque`` xattr is readable
only with CAP_SYS_ADMIN, so when ``merged`` (the mounted ``/workspace``) is given, a lower entry that is in neither
the upper directory nor the merged view counts as deleted, whatever the xattrs say; the xattrs named in
``opaque_xattrs`` (by default ``trusted.overlay.opaque`` and ``user.overlay.opaque``) are also honoured when
readable. Without ``merged`` (after unmounting, or on the host) only the xattrs can tell, which needs the reader to
see them (root, or a ``userxattr`` mount).

Fifos, sockets and device files are not something git records: in the upper layer they count as "no file", in
the lower as "nothing there". Empty directories are invisible, as in git.

The walk and the reads go through ``layers.Layer`` (directory descriptors, nothing followed), so the host can run
this same code over the layers of a hostile box; a ``layers.Budget`` bounds it there.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from . import gitpatch
from .gitpatch import MODE_EXEC, MODE_FILE, MODE_LINK, ZERO_OID
from .layers import (
    FILE_FLAGS,
    Budget,
    DiffError,
    DiffLimitExceeded,
    Layer,
    Stamp,
    list_names,
    lstat_at,
    open_child_dir,
    shown,
    stamp_of,
)

__all__ = ["Budget", "Change", "DiffError", "DiffLimitExceeded", "Side", "emit_change", "iter_patch",
           "iter_sections", "make_patch"]

TEXT_LIMIT = 8 << 20  # bigger files are written as binary literals, streamed, never held in memory
READ_CHUNK = 1 << 20
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
KERNEL_OPAQUE_XATTRS = ("trusted.overlay.opaque",)  # what the kernel reads on a mount without ``userxattr``


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a change: a regular file (read from ``path`` when needed) or a symlink (its ``target``).

    ``path`` is relative to ``layer`` (absolute or relative to the working directory without one); ``stamp`` is
    the file as the walk saw it, checked again when it is read.
    """

    mode: int
    path: bytes
    size: int
    target: bytes | None = None
    layer: Layer | None = None
    stamp: Stamp | None = None

    @property
    def is_link(self) -> bool:
        return self.mode == MODE_LINK


@dataclass(frozen=True, slots=True)
class Change:
    path: bytes  # relative to the workspace root
    old: Side | None
    new: Side | None


def _join(rel: bytes, name: bytes) -> bytes:
    return rel + b"/" + name if rel else name


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _xattr_opaque(dir_fd: int, names: tuple[str, ...]) -> bool:
    for name in names:
        try:
            if os.getxattr(dir_fd, name) == b"y":
                return True
        except OSError:
            continue
    return False


class _Walker:
    """Finds every change; each directory is reached through its parent's descriptor, never by a path."""

    def __init__(self, upper: Layer, lower: Layer, merged: Layer | None, opaque_xattrs: tuple[str, ...]) -> None:
        self.upper, self.lower, self.merged = upper, lower, merged
        self.opaque_xattrs = opaque_xattrs
        self.budget = upper.budget
        self.changes: list[Change] = []
        self.at = b""  # the path being looked at, for error messages

    def side(self, layer: Layer, dir_fd: int, name: bytes, rel: bytes, st: os.stat_result | None) -> Side | None:
        if st is None:
            return None
        if stat.S_ISREG(st.st_mode):
            self.budget.count_content(st.st_size, rel)
            mode = MODE_EXEC if st.st_mode & stat.S_IXUSR else MODE_FILE
            return Side(mode, rel, st.st_size, layer=layer, stamp=stamp_of(st))
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=dir_fd)
            return Side(MODE_LINK, rel, len(target), target)
        return None

    def walk_dir(self, rel: bytes, up_fd: int, low_fd: int, opaque_above: bool, depth: int) -> None:
        """A directory in both layers (the root, or one whose lower counterpart is a directory).

        Below an opaque directory nothing of the lower layer shows through, whatever the subdirectories' xattrs
        say, so opacity is inherited.
        """
        self.budget.enter(depth, rel)
        self.at = rel
        up_names = list_names(up_fd, self.budget)
        opaque = opaque_above or _xattr_opaque(up_fd, self.opaque_xattrs)
        hidden: set[bytes] = set()
        absent = list_names(low_fd, self.budget) - up_names
        if absent and opaque:
            hidden = absent
        elif absent and self.merged is not None:
            hidden = self.gone_from_merged(rel, absent)
        for name in sorted(up_names | hidden):
            child = _join(rel, name)
            if name in hidden:
                self.delete(child, low_fd, name, depth + 1)
            else:
                self.entry(child, name, up_fd, low_fd, opaque, depth + 1)

    def gone_from_merged(self, rel: bytes, absent: set[bytes]) -> set[bytes]:
        """The lower names in ``absent`` that the merged view does not show: deleted."""
        assert self.merged is not None
        try:
            merged_fd = self.merged.open_dir(rel)
        except (FileNotFoundError, NotADirectoryError):
            return set(absent)
        try:
            return {name for name in absent if lstat_at(merged_fd, name) is None}
        finally:
            os.close(merged_fd)

    def entry(self, rel: bytes, name: bytes, up_fd: int, low_fd: int, opaque_above: bool, depth: int) -> None:
        self.at = rel
        up_st, low_st = os.stat(name, dir_fd=up_fd, follow_symlinks=False), lstat_at(low_fd, name)
        low_is_dir = low_st is not None and stat.S_ISDIR(low_st.st_mode)
        if stat.S_ISDIR(up_st.st_mode):
            if low_is_dir:
                assert low_st is not None
                with ExitStack() as fds:
                    up_child = open_child_dir(up_fd, name, up_st, rel)
                    fds.callback(os.close, up_child)
                    low_child = open_child_dir(low_fd, name, low_st, rel)
                    fds.callback(os.close, low_child)
                    self.walk_dir(rel, up_child, low_child, opaque_above, depth)
                return
            self.delete(rel, low_fd, name, depth)
            self.add_tree(rel, up_fd, name, depth)
            return
        new = None if _is_whiteout(up_st) else self.side(self.upper, up_fd, name, rel, up_st)
        if low_is_dir:
            self.delete(rel, low_fd, name, depth)
            old = None
        else:
            old = self.side(self.lower, low_fd, name, rel, low_st)
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

    def delete(self, rel: bytes, low_fd: int, name: bytes, depth: int) -> None:
        """Everything git sees at ``rel`` (``name`` in the lower directory ``low_fd``) is gone."""
        self.at = rel
        st = lstat_at(low_fd, name)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            self.budget.enter(depth, rel)
            child_fd = open_child_dir(low_fd, name, st, rel)
            try:
                for child in sorted(list_names(child_fd, self.budget)):
                    self.delete(_join(rel, child), child_fd, child, depth + 1)
            finally:
                os.close(child_fd)
            return
        old = self.side(self.lower, low_fd, name, rel, st)
        if old is not None:
            self.changes.append(Change(rel, old, None))

    def add_tree(self, rel: bytes, up_fd: int, name: bytes, depth: int) -> None:
        """Everything git would see at ``rel`` in the upper layer is new (nothing of the lower shows through)."""
        self.at = rel
        st = os.stat(name, dir_fd=up_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            self.budget.enter(depth, rel)
            child_fd = open_child_dir(up_fd, name, st, rel)
            try:
                for child in sorted(list_names(child_fd, self.budget)):
                    self.add_tree(_join(rel, child), child_fd, child, depth + 1)
            finally:
                os.close(child_fd)
            return
        new = None if _is_whiteout(st) else self.side(self.upper, up_fd, name, rel, st)
        if new is not None:
            self.changes.append(Change(rel, None, new))


def _open(side: Side) -> int:
    if side.layer is not None:
        return side.layer.open_file(side.path, side.stamp)
    return os.open(side.path, FILE_FLAGS)


def _chunks(side: Side) -> Iterator[bytes]:
    """The side's exact content, checked against the file the walk saw (its size; with a stamp, its identity and
    times too, so a file rewritten in place while it is read is an error, not a mix of two versions)."""
    if side.is_link:
        assert side.target is not None
        yield side.target
        return
    try:
        fd = _open(side)
    except OSError as exc:
        raise DiffError(f"cannot open {shown(side.path)}: {exc.strerror}") from None
    budget = side.layer.budget if side.layer is not None else None
    try:
        left = side.size
        while left > 0:
            if budget is not None:
                budget.check_deadline()
            chunk = os.read(fd, min(READ_CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
        if left or os.read(fd, 1):
            raise DiffError(f"{shown(side.path)} changed size while the patch was made")
        if side.stamp is not None and stamp_of(os.fstat(fd)) != side.stamp:
            raise DiffError(f"{shown(side.path)} changed while the patch was made")
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
        if not binary:
            yield minus
            yield plus
            yield from gitpatch.text_hunks(old_data or b"", new_data or b"")
            return
        yield b"GIT binary patch\n"
        try:  # big files are read here, as the literals stream
            yield from _literal(new, new_data)
            yield from _literal(old, old_data)
        except OSError as exc:
            raise DiffError(f"cannot read {shown(change.path)}: {exc.strerror}") from None

    return body(), summary


def _collect(upper: Layer, lower: Layer, merged: Layer | None, opaque_xattrs: tuple[str, ...]) -> list[Change]:
    """Every change, sorted by path; for the same path a deletion comes before an addition (a type change)."""
    walker = _Walker(upper, lower, merged, opaque_xattrs)
    try:
        walker.walk_dir(b"", upper.fd, lower.fd, False, 0)
    except OSError as exc:
        raise DiffError(f"cannot read {shown(walker.at) or 'the layer roots'}: {exc.strerror}") from None
    return sorted(walker.changes, key=lambda change: (change.path, change.new is not None))


def iter_sections(upper: str | bytes, lower: str | bytes, merged: str | bytes | None = None, *,
                  opaque_xattrs: tuple[str, ...] = OPAQUE_XATTRS,
                  budget: Budget | None = None) -> Iterator[tuple[Change, Iterator[bytes], dict[str, Any]]]:
    """One ``(change, patch pieces, summary entry)`` per ``diff --git`` section, in patch order.

    Consume each section's pieces before asking for the next; the layers stay open until the last section (close
    the iterator to end early). ``budget`` bounds the walk and the reads (unbounded by default).
    """
    budget = budget if budget is not None else Budget()
    with ExitStack() as stack:
        try:
            upper_layer = stack.enter_context(Layer(upper, budget))
            lower_layer = stack.enter_context(Layer(lower, budget))
            merged_layer = None if merged is None else stack.enter_context(Layer(merged, budget))
        except OSError as exc:
            raise DiffError(f"cannot open a layer: {exc.strerror}") from None
        for change in _collect(upper_layer, lower_layer, merged_layer, opaque_xattrs):
            try:
                pieces, summary = emit_change(change)
            except OSError as exc:
                raise DiffError(f"cannot read {shown(change.path)}: {exc.strerror}") from None
            yield change, pieces, summary


def iter_patch(upper: str | bytes, lower: str | bytes, merged: str | bytes | None = None,
               summaries: list[dict[str, Any]] | None = None, *, opaque_xattrs: tuple[str, ...] = OPAQUE_XATTRS,
               budget: Budget | None = None) -> Iterator[bytes]:
    """The git-format patch in pieces; ``summaries`` (if given) receives one entry per ``diff --git`` section."""
    for _, pieces, summary in iter_sections(upper, lower, merged, opaque_xattrs=opaque_xattrs, budget=budget):
        yield from pieces
        if summaries is not None:
            summaries.append(summary)


def make_patch(upper: str | bytes, lower: str | bytes, merged: str | bytes | None = None, *,
               opaque_xattrs: tuple[str, ...] = OPAQUE_XATTRS) -> bytes:
    """The whole patch at once (tests and small workspaces)."""
    return b"".join(iter_patch(upper, lower, merged, opaque_xattrs=opaque_xattrs))
