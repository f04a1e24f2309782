"""What a strictly parsed git patch says, file by file: frozen data, no I/O.

``gitparse.parse_patch`` turns a patch's bytes into a ``ParsedPatch`` (one ``FileOperation`` per ``diff --git``
section, in patch order) or raises ``PatchRefused``. Paths and contents are ``bytes`` exactly as the patch names
them (unquoted, without the ``a/``/``b/`` prefixes); modes are git's (``0o100644``, ``0o100755``, ``0o120000``);
blob ids are lowercase hex ``str`` as written in the ``index`` line (full 40-digit ids in a box's own patches,
possibly abbreviated in a user's).

Actions:

- ``add``, ``delete``, ``modify`` (content, and possibly the mode), ``mode`` (the mode alone) for regular files;
- ``rename`` and ``copy`` (``old_path`` -> ``new_path``, with ``similarity``; hunks when the content changed too);
- ``symlink_add``, ``symlink_modify``, ``symlink_delete`` (``symlink_target`` is the new target).

A type change (a file becoming a symlink or the reverse) is two operations on one path, a deletion then an
addition, as git writes it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tkbox_guest.layers import shown  # the one escaping of names for messages, shared with the host's diff

__all__ = ["MODE_EXEC", "MODE_FILE", "MODE_LINK", "ZERO_OID", "Action", "BinaryLiteral", "FileOperation", "Hunk",
           "HunkLine", "ParsedPatch", "PatchRefused", "TreeEntry", "shown"]

MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
ZERO_OID = "0" * 40


class Action(enum.StrEnum):
    ADD = "add"
    DELETE = "delete"
    MODIFY = "modify"
    MODE = "mode"
    RENAME = "rename"
    COPY = "copy"
    SYMLINK_ADD = "symlink_add"
    SYMLINK_MODIFY = "symlink_modify"
    SYMLINK_DELETE = "symlink_delete"


class PatchRefused(Exception):
    """The patch is refused, as a whole: ``rule`` is a stable id (``dev-null-without-mode``, ``path-dotgit``,
    ``limit:patch_size`` …), ``line`` the 1-based line of the patch where it was found (None when it is about the
    whole patch), ``path`` the section's path when one is known, ``detail`` what is wrong and what to do.

    ``str()`` is one line naming all of them; the path is shown with its unprintable characters escaped.
    """

    def __init__(self, rule: str, detail: str, *, line: int | None = None, path: bytes | None = None) -> None:
        self.rule = rule
        self.detail = detail
        self.line = line
        self.path = path
        where = []
        if line is not None:
            where.append(f"line {line}")
        if path is not None:
            where.append(shown(path))
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(f"{prefix}{detail} [{rule}]")


HunkLine = tuple[str, bytes]
"""One line of a hunk: its kind (``" "`` context, ``"-"`` removed, ``"+"`` added) and its content, with its
``\\n`` unless the patch marked it ``\\ No newline at end of file``."""


@dataclass(frozen=True, slots=True)
class Hunk:
    """One ``@@ -old_start,old_count +new_start,new_count @@`` hunk; ``line`` is the ``@@`` line's number."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[HunkLine, ...]
    line: int

    @property
    def added(self) -> int:
        return sum(1 for kind, _ in self.lines if kind == "+")

    @property
    def removed(self) -> int:
        return sum(1 for kind, _ in self.lines if kind == "-")


@dataclass(frozen=True, slots=True)
class BinaryLiteral:
    """A ``GIT binary patch`` of literals: ``data`` is the new content (inflated and checked against its declared
    size), ``old_data`` the old content when the patch carries the reverse literal (git's always does)."""

    data: bytes
    old_data: bytes | None


@dataclass(frozen=True, slots=True)
class FileOperation:
    """One ``diff --git`` section, as the host reads it.

    ``old_path``/``new_path``: None on the side that does not exist (an addition has no old path, a deletion no
    new one); both set and equal for ``modify``, ``mode`` and the symlink modify. ``old_mode``/``new_mode``: None
    where the patch does not say (a pure rename keeps the source's mode). ``old_oid``/``new_oid``: from the
    ``index`` line, None without one. ``old_size``/``new_size``: known for additions, deletions, binary literals
    and symlinks, else None (a text hunk does not say how long the file is). ``line``: the ``diff --git`` line.
    """

    action: Action
    old_path: bytes | None
    new_path: bytes | None
    old_mode: int | None
    new_mode: int | None
    old_oid: str | None
    new_oid: str | None
    similarity: int | None
    hunks: tuple[Hunk, ...]
    binary: BinaryLiteral | None
    old_size: int | None
    new_size: int | None
    symlink_target: bytes | None
    line: int

    @property
    def path(self) -> bytes:
        """The path the operation leaves behind (the new one), or the deleted one."""
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None
        return path

    @property
    def added(self) -> int:
        return sum(hunk.added for hunk in self.hunks)

    @property
    def removed(self) -> int:
        return sum(hunk.removed for hunk in self.hunks)

    @property
    def abbreviated_oids(self) -> bool:
        return any(oid is not None and len(oid) != 40 for oid in (self.old_oid, self.new_oid))

    @property
    def paths(self) -> tuple[bytes, ...]:
        """Every path the operation reads or writes (a rename's or copy's source included)."""
        return tuple(dict.fromkeys(path for path in (self.old_path, self.new_path) if path is not None))


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """A file as git records it: ``mode`` (100644, 100755 or 120000) and ``data`` (a symlink's is its target)."""

    mode: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ParsedPatch:
    """A whole patch: its operations in patch order, its size, and notes on what the host could not check
    itself (abbreviated blob ids, renames whose mode the patch does not state)."""

    operations: tuple[FileOperation, ...]
    size: int
    notes: tuple[str, ...] = ()

    @property
    def abbreviated_oids(self) -> bool:
        return any(operation.abbreviated_oids for operation in self.operations)
