"""What the checkout writer is asked to do: one planned change per path, each with the pre-image it expects.

A change writes a file (content and mode, 0644 or 0755), writes a symlink (its target) or deletes what is there.
Its ``expected`` pre-image is what the checkout must hold at that path before anything is written: ``ABSENT``, a
``FileImage`` (sha256 of the content and the mode as git records it) or a ``SymlinkImage`` (the target). Paths
are relative POSIX bytes. ``check_plan`` refuses what the writer will not do with a ``PlanError`` naming the path:
this is a small guard of its own, not the patch parser's full check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from tkbox_guest.layers import shown

MODES = (0o644, 0o755)
NAME_MAX = 255
PATH_MAX = 4095


@dataclass(frozen=True)
class Absent:
    """No file and no symlink at the path (a directory there is, as git sees it, no file either)."""

    def describe(self) -> str:
        return "nothing"


@dataclass(frozen=True)
class FileImage:
    """A regular file: ``sha256`` (hex) of its content and ``mode`` as git records it (0o644 or 0o755).

    ``content`` is carried when the bytes were read (``read_preimages``); it never takes part in equality.
    """

    mode: int
    sha256: str
    content: bytes | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, content: bytes, mode: int, *, keep: bool = False) -> FileImage:
        return cls(mode, hashlib.sha256(content).hexdigest(), content if keep else None)

    def describe(self) -> str:
        return f"a file (mode {self.mode:o}, sha256 {self.sha256[:12]})"


@dataclass(frozen=True)
class SymlinkImage:
    """A symbolic link and its target."""

    target: bytes

    def describe(self) -> str:
        return f"a symlink to {shown(self.target)}"


ABSENT = Absent()
PreImage = Absent | FileImage | SymlinkImage


@dataclass(frozen=True)
class WriteFile:
    """Make ``path`` a regular file with ``content`` and ``mode`` (0o644 or 0o755)."""

    path: bytes
    content: bytes = field(repr=False)
    mode: int
    expected: PreImage

    def result(self) -> PreImage:
        return FileImage.of(self.content, self.mode)


@dataclass(frozen=True)
class WriteSymlink:
    """Make ``path`` a symbolic link to ``target``."""

    path: bytes
    target: bytes
    expected: PreImage

    def result(self) -> PreImage:
        return SymlinkImage(self.target)


@dataclass(frozen=True)
class Delete:
    """Remove the file or symlink at ``path``; directories it leaves empty go too."""

    path: bytes
    expected: PreImage

    def result(self) -> PreImage:
        return ABSENT


PlannedChange = WriteFile | WriteSymlink | Delete


class PlanError(ValueError):
    """A planned change the writer will not carry out; nothing was read or written."""


def path_components(path: bytes) -> tuple[bytes, ...]:
    """The components of a relative checkout path, or ``PlanError`` saying what is wrong with it."""
    if not isinstance(path, bytes):
        raise PlanError(f"path {path!r} must be bytes")
    if not path:
        raise PlanError("an empty path: name a file inside the checkout")
    if len(path) > PATH_MAX:
        raise PlanError(f"path {shown(path[:64])}… is over {PATH_MAX} bytes")
    if b"\0" in path:
        raise PlanError(f"path {shown(path)} contains a NUL byte")
    if path.startswith(b"/"):
        raise PlanError(f"path {shown(path)} is absolute: paths are relative to the checkout")
    parts = tuple(path.split(b"/"))
    for part in parts:
        if part in (b"", b".", b".."):
            raise PlanError(f"path {shown(path)} has an empty, '.' or '..' component")
        if part.lower().rstrip(b". ") == b".git":
            raise PlanError(f"path {shown(path)} goes into .git, which a patch may never change")
        if len(part) > NAME_MAX:
            raise PlanError(f"path {shown(path)} has a component over {NAME_MAX} bytes")
    return parts


def _check_target(path: bytes, parts: tuple[bytes, ...], target: bytes) -> None:
    """A symlink target must be relative and stay inside the checkout (read lexically, from the link's directory)."""
    if not target or b"\0" in target or len(target) > PATH_MAX:
        raise PlanError(f"symlink {shown(path)}: its target is empty, too long or contains a NUL byte")
    if target.startswith(b"/"):
        raise PlanError(f"symlink {shown(path)} points to an absolute path ({shown(target)})")
    depth = len(parts) - 1
    for part in target.split(b"/"):
        if part == b"..":
            depth -= 1
            if depth < 0:
                raise PlanError(f"symlink {shown(path)} points outside the checkout ({shown(target)})")
        elif part not in (b"", b"."):
            depth += 1


def check_plan(changes: Iterable[PlannedChange]) -> dict[tuple[bytes, ...], PlannedChange]:
    """The changes by path components, after refusing bad paths, modes, targets and contradictory changes."""
    plan: dict[tuple[bytes, ...], PlannedChange] = {}
    for change in changes:
        if not isinstance(change, WriteFile | WriteSymlink | Delete):
            raise PlanError(f"unknown planned change {change!r}")
        parts = path_components(change.path)
        if not isinstance(change.expected, Absent | FileImage | SymlinkImage):
            raise PlanError(f"{shown(change.path)}: unknown pre-image {change.expected!r}")
        if isinstance(change.expected, FileImage) and change.expected.mode not in MODES:
            raise PlanError(f"{shown(change.path)}: pre-image mode {change.expected.mode:o} is not 644 or 755")
        if isinstance(change, WriteFile) and change.mode not in MODES:
            raise PlanError(f"{shown(change.path)}: mode {change.mode:o} is not 644 or 755 (tkbox never writes "
                            "setuid, setgid, sticky or group-writable files)")
        if isinstance(change, WriteSymlink):
            _check_target(change.path, parts, change.target)
        if isinstance(change, Delete) and isinstance(change.expected, Absent):
            raise PlanError(f"{shown(change.path)}: a delete of something expected to be absent")
        if parts in plan:
            raise PlanError(f"{shown(change.path)} is planned twice")
        plan[parts] = change
    writes = {parts for parts, change in plan.items() if not isinstance(change, Delete)}
    for parts in writes:
        for end in range(1, len(parts)):
            if parts[:end] in writes:
                raise PlanError(f"{shown(b'/'.join(parts))} is planned below {shown(b'/'.join(parts[:end]))}, "
                                "which is planned as a file or symlink")
    return plan
