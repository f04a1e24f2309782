"""One file's post-image from its pre-image and its ``FileOperation``, strictly: no fuzz, no offset.

``post_image(operation, pre_image)`` is pure: bytes in, bytes out, or ``HunkMismatch`` (a ``PatchRefused``). For a
symlink the "content" is its target. ``apply_to_tree`` does it for a whole patch over a tree held as a mapping
(path to ``TreeEntry``). The rules:

- every context and removed line must equal the pre-image's line at exactly the position the hunk states (git
  would look for it elsewhere; the host does not: a patch is applied to the tree it was made from, or not at all);
- lines are split after each ``\\n`` only, so a CRLF file keeps every ``\\r``, byte for byte; a line marked
  ``\\ No newline at end of file`` must be the pre-image's last line (removed or context), or becomes the
  post-image's last line (added or context);
- an addition has no pre-image; a deletion must remove all of it; a 100% rename or copy and a mode change keep it;
- the pre-image must be the blob the ``index`` line names, and the result the blob it names for the new side (full
  ids exactly, abbreviated ones as prefixes); a binary literal's reverse literal, when there, must equal the
  pre-image.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tkbox_guest.gitpatch import split_lines  # lines as git counts them, as the box's patch was written

from .gitsection import blob_oid
from .operations import MODE_FILE, MODE_LINK, Action, FileOperation, Hunk, PatchRefused, TreeEntry

_ADDS = (Action.ADD, Action.SYMLINK_ADD)
_DELETES = (Action.DELETE, Action.SYMLINK_DELETE)
_LINK_ACTIONS = (Action.SYMLINK_ADD, Action.SYMLINK_MODIFY, Action.SYMLINK_DELETE)


class HunkMismatch(PatchRefused):
    """The pre-image is not the one the patch was made against (or the patch does not fit it)."""


def _mismatch(operation: FileOperation, detail: str, hunk: Hunk | None = None) -> HunkMismatch:
    return HunkMismatch("hunk-mismatch", detail, line=operation.line if hunk is None else hunk.line,
                        path=operation.path)


def _check_oid(operation: FileOperation, oid: str | None, data: bytes, side: str) -> None:
    if oid is not None and not blob_oid(data).startswith(oid):
        raise _mismatch(operation, f"the {side} content is not the blob {oid} the patch names")


def _apply_text(operation: FileOperation, old: list[bytes]) -> bytes:
    out: list[bytes] = []
    pos = 0
    for hunk in operation.hunks:
        at = hunk.old_start - 1 if hunk.old_count else hunk.old_start
        if at < pos or at + hunk.old_count > len(old):
            raise _mismatch(operation, f"the hunk's lines {hunk.old_start}..{hunk.old_start + hunk.old_count - 1} "
                            f"are not in the {len(old)}-line pre-image", hunk)
        out.extend(old[pos:at])
        pos = at
        for number, (kind, text) in enumerate(hunk.lines):
            if kind != "+":
                if old[pos] != text:
                    raise _mismatch(operation, f"line {pos + 1} of the pre-image is not the hunk's line "
                                    f"{number + 1}", hunk)
                pos += 1
            if kind != "-":
                out.append(text)
    out.extend(old[pos:])
    for line in out[:-1]:
        if not line.endswith(b"\n"):
            raise _mismatch(operation, "a line marked '\\ No newline at end of file' would not be the last line")
    return b"".join(out)


def post_image(operation: FileOperation, pre_image: bytes | None) -> bytes | None:
    """The file's content (a symlink's target) after ``operation``; None when the operation deletes it.

    ``pre_image`` is the file's content before (for a rename or copy, the source's); None for an addition.
    """
    if operation.action in _ADDS:
        if pre_image is not None:
            raise _mismatch(operation, "the patch adds a file that is already there")
        pre_image = b""
    elif pre_image is None:
        raise _mismatch(operation, "the patch changes a file that is not there")
    else:
        _check_oid(operation, operation.old_oid, pre_image, "old")
    if operation.binary is not None:
        if operation.binary.old_data is not None and operation.binary.old_data != pre_image:
            raise _mismatch(operation, "the pre-image is not the binary patch's old content")
        result = operation.binary.data
    elif operation.hunks:
        result = _apply_text(operation, split_lines(pre_image))
    else:
        result = pre_image
    if operation.action in _DELETES:
        if result:
            raise _mismatch(operation, "the deletion does not remove the whole pre-image")
        return None
    _check_oid(operation, operation.new_oid, result, "new")
    return result


def apply_to_tree(operations: Iterable[FileOperation], tree: Mapping[bytes, TreeEntry]) -> dict[bytes, TreeEntry]:
    """The tree after ``operations`` (a parsed patch's, in order), given the tree before; ``HunkMismatch`` when
    the tree is not the one the patch was made against.

    ``tree`` needs only the paths the patch touches (others are carried over as they are). A symlink's entry holds
    its target. An operation's stated old mode must be the entry's; a rename or copy that states no mode keeps
    the source's.
    """
    result = dict(tree)
    for operation in operations:
        old = None
        if operation.old_path is not None:
            old = result.get(operation.old_path)
            if old is None:
                raise _mismatch(operation, "the patch changes a file that is not there")
            if (old.mode == MODE_LINK) != (operation.action in _LINK_ACTIONS):
                raise _mismatch(operation, "the file is a symlink where the patch expects a file, or the reverse")
            if operation.old_mode is not None and operation.old_mode != old.mode:
                raise _mismatch(operation, f"the file's mode is {old.mode:o}, not the {operation.old_mode:o} the "
                                "patch was made against")
        if operation.new_path is not None and operation.new_path != operation.old_path \
                and operation.new_path in result:
            raise _mismatch(operation, "the patch makes a file that is already there")
        data = post_image(operation, None if old is None else old.data)
        if operation.action in (Action.RENAME, *_DELETES):
            assert operation.old_path is not None
            del result[operation.old_path]
        if operation.new_path is not None:
            assert data is not None
            mode = operation.new_mode if operation.new_mode is not None else old.mode if old else MODE_FILE
            result[operation.new_path] = TreeEntry(mode, data)
    return result
