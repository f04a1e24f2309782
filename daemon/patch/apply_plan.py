"""From a parsed patch and the checkout's pre-images to the checkout writer's plan, file by file (no I/O).

For each ``FileOperation`` this says whether the checkout still holds what the patch was made against (its
``checkout`` text: ``matches`` or what differs — a file's blob id and mode for the old side, absence for the new
side), the post-image (from ``hunks.post_image``, which checks both blob ids) and the planned changes: a write, a symlink, a delete, or two of them for a rename. Two operations on
one path (git writes a type change, file to symlink or back, as a deletion and an addition) become one change.

Paths must be UTF-8 here: each file is decided by the signer by its path as text, and a name that is not UTF-8
cannot be written into a decision exactly. A box that made such a file has to rename it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from .checkout_plan import (
    ABSENT,
    Absent,
    Delete,
    FileImage,
    PlannedChange,
    PreImage,
    SymlinkImage,
    WriteFile,
    WriteSymlink,
)
from .gitsection import blob_oid
from .hunks import HunkMismatch, post_image
from .operations import MODE_LINK, Action, FileOperation, shown

MATCHES = "matches"
FILE_ACTION_NAMES = {Action.ADD: "add", Action.MODIFY: "modify", Action.DELETE: "delete", Action.MODE: "mode",
                     Action.RENAME: "rename", Action.COPY: "copy", Action.SYMLINK_ADD: "symlink",
                     Action.SYMLINK_MODIFY: "symlink", Action.SYMLINK_DELETE: "symlink"}


class PathNotText(ValueError):
    """A path of the patch is not UTF-8: the signer decides a file by its path as text."""


def path_text(path: bytes) -> str:
    try:
        return path.decode("utf-8")
    except UnicodeDecodeError:
        raise PathNotText(f"{shown(path)} is not a UTF-8 name, so it cannot be decided exactly; rename it in the "
                          "box (or leave it out with --only)") from None


@dataclass(frozen=True)
class FilePlan:
    """One file of the patch: its operation(s) (two for a type change), what the checkout holds, and the changes
    that would make it hold the post-image (empty when ``checkout`` is not ``matches``)."""

    operations: tuple[FileOperation, ...]
    checkout: str
    changes: tuple[PlannedChange, ...]
    new_content_sha256: str = ""
    new_size: int | None = None

    @property
    def operation(self) -> FileOperation:
        return self.operations[-1]

    @property
    def path(self) -> bytes:
        return self.operation.path

    @property
    def action(self) -> str:
        if len(self.operations) == 2:
            return "symlink" if self.operations[1].action == Action.SYMLINK_ADD or \
                self.operations[0].action == Action.SYMLINK_DELETE else "modify"
        return FILE_ACTION_NAMES[self.operation.action]


def _oid_matches(expected: str | None, content: bytes) -> bool:
    if expected is None:
        return True
    actual = blob_oid(content)
    return actual == expected if len(expected) == 40 else actual.startswith(expected)


def old_side_problem(operation: FileOperation, image: PreImage, base: PreImage | None = None) -> str | None:
    """What differs between the checkout's ``image`` and the old side of ``operation``, or None. ``base``: the
    file in the box's base copy (what the box started from), which the checkout must still equal: a patch's
    ``index`` line does not always name the pre-image (a mode change or a pure rename has none)."""
    if base is not None and not isinstance(image, Absent) and image != base:
        return "changed since the box started (it differs from the box's base copy)"
    if base is None and operation.old_oid is None and not isinstance(image, Absent):
        return "cannot be checked: the box's base copy is gone and the patch does not name this file's pre-image"
    is_link = operation.old_mode == MODE_LINK or operation.action in (Action.SYMLINK_MODIFY, Action.SYMLINK_DELETE)
    if isinstance(image, Absent):
        return "missing from the checkout (the patch changes it)"
    if is_link:
        if not isinstance(image, SymlinkImage):
            return "not a symlink in the checkout any more"
        return None if _oid_matches(operation.old_oid, image.target) else \
            "the symlink points elsewhere than when the box started"
    if not isinstance(image, FileImage):
        return "a symlink in the checkout, where the patch expects a file"
    assert image.content is not None
    if not _oid_matches(operation.old_oid, image.content):
        return "changed since the box started (its content differs from the patch's pre-image)"
    if operation.old_mode is not None and (operation.old_mode & 0o777) != image.mode:
        return f"its mode changed since the box started (now {image.mode:o}, the patch expects " \
               f"{operation.old_mode & 0o777:o})"
    return None


def plan_file(operations: tuple[FileOperation, ...], images: Mapping[bytes, PreImage],
              base_images: Mapping[bytes, PreImage] | None = None) -> FilePlan:
    """The plan of one file (``operations``: one, or a deletion and an addition of one path); ``base_images``: the
    old sides' files in the box's base copy, when there is one."""
    first, last = operations[0], operations[-1]
    for operation in operations:
        for path in operation.paths:
            path_text(path)
    problems: list[str] = []
    old_image: PreImage = ABSENT
    if first.old_path is not None:
        old_image = images[first.old_path]
        problem = old_side_problem(first, old_image, (base_images or {}).get(first.old_path))
        if problem:
            problems.append(problem)
    if last.new_path is not None and last.new_path != first.old_path and not isinstance(images[last.new_path], Absent):
        problems.append("already exists in the checkout (the patch adds it)")
    if problems:
        return FilePlan(operations, "; ".join(problems), ())
    if last.action in (Action.DELETE, Action.SYMLINK_DELETE):
        return FilePlan(operations, MATCHES, (Delete(last.path, old_image),))
    old_content = old_image.content if isinstance(old_image, FileImage) else \
        old_image.target if isinstance(old_image, SymlinkImage) else None
    try:
        new = post_image(last, None if len(operations) == 2 else old_content)
    except HunkMismatch as exc:
        return FilePlan(operations, f"the patch does not fit the checkout's file: {exc.detail}", ())
    assert new is not None  # deletions returned above
    changes: list[PlannedChange] = []
    expected_new: PreImage = old_image if last.new_path == first.old_path else ABSENT
    if last.action in (Action.SYMLINK_ADD, Action.SYMLINK_MODIFY):
        changes.append(WriteSymlink(last.path, new, expected_new))
    else:
        mode = last.new_mode if last.new_mode is not None else first.old_mode
        changes.append(WriteFile(last.path, new, (mode or 0o100644) & 0o777, expected_new))
    if last.action == Action.RENAME:
        assert first.old_path is not None
        changes.insert(0, Delete(first.old_path, old_image))
    return FilePlan(operations, MATCHES, tuple(changes), hashlib.sha256(new).hexdigest(), len(new))


def group_by_path(operations: tuple[FileOperation, ...]) -> list[tuple[FileOperation, ...]]:
    """The patch's operations per file: a deletion followed by an addition of the same path is one file."""
    groups: list[tuple[FileOperation, ...]] = []
    for operation in operations:
        if groups and len(groups[-1]) == 1 and groups[-1][0].path == operation.path and \
                groups[-1][0].action in (Action.DELETE, Action.SYMLINK_DELETE) and \
                operation.action in (Action.ADD, Action.SYMLINK_ADD):
            groups[-1] = (groups[-1][0], operation)
        else:
            groups.append((operation,))
    return groups


def paths_to_read(operations: tuple[FileOperation, ...]) -> list[bytes]:
    """Every path whose pre-image the plan needs."""
    return list(dict.fromkeys(path for operation in operations for path in operation.paths))


def old_paths(operations: tuple[FileOperation, ...]) -> list[bytes]:
    """Every path the patch reads a pre-image from (deleted, changed, renamed or copied)."""
    return list(dict.fromkeys(operation.old_path for operation in operations if operation.old_path is not None))


def deleted_paths(operations: tuple[FileOperation, ...]) -> set[bytes]:
    return {operation.path for operation in operations if operation.action in (Action.DELETE, Action.SYMLINK_DELETE)}
