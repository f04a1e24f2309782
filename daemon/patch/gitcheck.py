"""The rules across a patch's sections: each path in one section only, and a tree that can exist afterwards.

- A path is read or written by one section only (a rename's or copy's source counts). The one exception is how git
  writes a type change: the deletion of a path immediately followed by the addition of the same path, one of the
  two a symlink. Anything else would make the result depend on the order the sections are applied in (git applies
  later sections to the result of earlier ones).
- After the patch, no path is both a file (or symlink) and the parent directory of another path.
"""

from __future__ import annotations

from collections.abc import Sequence

from .operations import Action, FileOperation, PatchRefused

_DELETES = (Action.DELETE, Action.SYMLINK_DELETE)
_ADDS = (Action.ADD, Action.SYMLINK_ADD)


def _is_type_change(before: FileOperation, after: FileOperation) -> bool:
    return (before.action in _DELETES and after.action in _ADDS and before.old_path == after.new_path
            and (before.action == Action.SYMLINK_DELETE) != (after.action == Action.SYMLINK_ADD))


def check_across(operations: Sequence[FileOperation]) -> None:
    """Raise ``PatchRefused`` when two sections touch one path, or the result mixes a file and a directory."""
    seen: dict[bytes, int] = {}
    for index, operation in enumerate(operations):
        for path in operation.paths:
            earlier = seen.get(path)
            if earlier is not None and not (earlier == index - 1 and _is_type_change(operations[earlier], operation)):
                raise PatchRefused("path-twice", f"two sections name this path (the first at line "
                                   f"{operations[earlier].line})", line=operation.line, path=path)
            seen[path] = index
    remaining = {op.new_path: op for op in operations if op.new_path is not None}
    for path, operation in remaining.items():
        parent = path.rpartition(b"/")[0]
        while parent:
            if parent in remaining:
                raise PatchRefused("path-file-and-directory", "after the patch this path would be both a file and "
                                   "the directory of another path", line=operation.line, path=parent)
            parent = parent.rpartition(b"/")[0]
