"""One ``diff --git`` section, read line by line by ``gitparse``, turned into a ``FileOperation`` and checked.

``RawSection`` holds what the section's lines said; ``build_operation`` decides the paths (from the lines that
name them unambiguously), the action, the modes, and checks every rule that needs the whole section: modes, blob
ids against the content the patch carries (full ids exactly, abbreviated ones as prefixes), hunk positions, the
shape of additions, deletions and symlinks, symlink targets and every path. Raises ``PatchRefused``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from . import pathrules
from .operations import (
    MODE_LINK,
    Action,
    BinaryLiteral,
    FileOperation,
    Hunk,
    PatchRefused,
)

BaseLookup = Callable[[bytes], "int | bool | None"]


@dataclass
class RawSection:
    """What one section's lines said, before it is checked as a whole."""

    line: int
    header_names: list[tuple[bytes, bytes]]
    kind: str = "change"  # "add" (new file mode), "delete" (deleted file mode) or "change"
    old_mode: int | None = None
    new_mode: int | None = None
    mode_lines: bool = False  # old mode / new mode lines were given
    similarity: int | None = None
    move: str | None = None  # "rename" or "copy"
    move_from: bytes | None = None
    move_to: bytes | None = None
    index: tuple[str, str] | None = None
    index_mode: int | None = None
    minus: bytes | None = None  # the --- path; None for /dev/null
    plus: bytes | None = None
    labels: bool = False
    hunks: list[Hunk] = field(default_factory=list)
    binary: BinaryLiteral | None = None


def blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _refuse(raw: RawSection, rule: str, detail: str, path: bytes | None = None) -> PatchRefused:
    return PatchRefused(rule, detail, line=raw.line, path=path)


def _paths(raw: RawSection) -> tuple[bytes, bytes]:
    """(old path, new path) as the section names them: rename/copy lines, else the labels, else the one way the
    diff --git line reads with both names equal; the diff --git line must agree in every case."""
    if raw.move is not None:
        assert raw.move_from is not None and raw.move_to is not None
        wanted = (raw.move_from, raw.move_to)
        if raw.labels and (raw.minus, raw.plus) != wanted:
            raise _refuse(raw, "names-disagree", f"the ---/+++ names are not the {raw.move}'s names")
    elif raw.labels:
        name = raw.plus if raw.plus is not None else raw.minus
        assert name is not None
        if raw.minus is not None and raw.plus is not None and raw.minus != raw.plus:
            raise _refuse(raw, "names-disagree", "the --- and +++ names differ without a rename or copy")
        wanted = (name, name)
    else:
        same = [names for names in raw.header_names if names[0] == names[1]]
        if len(same) != 1:
            raise _refuse(raw, "names-disagree", "the diff --git line does not name one path twice")
        wanted = same[0]
    if wanted not in raw.header_names:
        raise _refuse(raw, "names-disagree", "the diff --git line names other paths than the section's headers",
                      wanted[1])
    return wanted


def _check_oid(raw: RawSection, oid: str, data: bytes, side: str, path: bytes) -> None:
    if not blob_oid(data).startswith(oid):
        raise _refuse(raw, "oid-mismatch", f"the {side} content the patch carries is not the blob its index line "
                      f"names ({oid})", path)


def _check_positions(raw: RawSection, path: bytes) -> None:
    """Hunks in order, not overlapping, and each new position where the earlier hunks put it."""
    end_old, delta = 1, 0
    for hunk in raw.hunks:
        if hunk.old_count and hunk.old_start == 0 or hunk.new_count and hunk.new_start == 0:
            raise PatchRefused("hunk-position", "a hunk with lines starts at line 0", line=hunk.line, path=path)
        at_old = hunk.old_start + (hunk.old_count == 0)
        at_new = hunk.new_start + (hunk.new_count == 0)
        if at_old < end_old or at_new != at_old + delta:
            raise PatchRefused("hunk-position", "a hunk is out of order, overlaps the one before, or states a new "
                               "position the hunks before it do not lead to", line=hunk.line, path=path)
        end_old = at_old + hunk.old_count
        delta += hunk.new_count - hunk.old_count


def _side_text(raw: RawSection, kind: str, path: bytes) -> bytes:
    """The whole content of an addition (``+``) or deletion (``-``): nothing, or one hunk of only such lines."""
    if not raw.hunks:
        return b""
    hunk = raw.hunks[0]
    empty_side = (hunk.old_start, hunk.old_count) if kind == "+" else (hunk.new_start, hunk.new_count)
    full_side = (hunk.new_start, hunk.new_count) if kind == "+" else (hunk.old_start, hunk.old_count)
    if len(raw.hunks) != 1 or empty_side != (0, 0) or full_side[0] != 1 or any(k != kind for k, _ in hunk.lines):
        what = "an added file" if kind == "+" else "a deleted file"
        raise PatchRefused("whole-file-hunk", f"{what} must be one hunk of only '{kind}' lines from line 1",
                           line=hunk.line, path=path)
    return b"".join(text for _, text in hunk.lines)


def _symlink_change(raw: RawSection, path: bytes) -> tuple[bytes, bytes]:
    """(old target, new target) of a symlink whose target changes: one hunk, -1 +1, one line each."""
    lines = raw.hunks[0].lines if len(raw.hunks) == 1 else ()
    if len(lines) != 2 or lines[0][0] != "-" or lines[1][0] != "+":
        raise _refuse(raw, "symlink-shape", "a symlink's changed target must be one hunk of one removed and one "
                      "added line", path)
    return lines[0][1], lines[1][1]


def _contents(raw: RawSection, action: Action, path: bytes) -> tuple[bytes | None, bytes | None]:
    """(old content, new content) where the section carries it whole; None where it does not."""
    if raw.binary is not None:
        if raw.index is None or len(raw.index[0]) != 40 or len(raw.index[1]) != 40:
            raise _refuse(raw, "binary-abbreviated-index", "a binary patch needs full 40-digit blob ids on its "
                          "index line (git refuses it too)", path)
        if action == Action.ADD and raw.binary.old_data not in (None, b""):
            raise _refuse(raw, "binary-shape", "an added file's reverse literal is not empty", path)
        if action == Action.DELETE and raw.binary.data != b"":
            raise _refuse(raw, "binary-shape", "a deleted file's forward literal is not empty", path)
        if action == Action.ADD:
            return None, raw.binary.data
        if action == Action.DELETE:
            return raw.binary.old_data, None
        return raw.binary.old_data, raw.binary.data
    if action in (Action.ADD, Action.SYMLINK_ADD):
        return None, _side_text(raw, "+", path)
    if action in (Action.DELETE, Action.SYMLINK_DELETE):
        return _side_text(raw, "-", path), None
    if action == Action.SYMLINK_MODIFY:
        return _symlink_change(raw, path)
    return None, None


def _check_symlink(raw: RawSection, old: bytes | None, new: bytes | None, path: bytes) -> None:
    if raw.binary is not None:
        raise _refuse(raw, "symlink-shape", "a symlink's section must be a text hunk", path)
    for target in (old, new):
        if target is not None and (not target or target.endswith(b"\n")):
            raise _refuse(raw, "symlink-shape", "a symlink's target must be one line marked '\\ No newline at "
                          "end of file'", path)
    if new is not None:
        problem = pathrules.symlink_target_problem(path, new)
        if problem:
            raise _refuse(raw, problem.rule, problem.message, path)


def _check_oids(raw: RawSection, old: bytes | None, new: bytes | None, path: bytes) -> None:
    if raw.index is None:
        return
    old_oid, new_oid = raw.index
    zero_old, zero_new = set(old_oid) == {"0"}, set(new_oid) == {"0"}
    if zero_old != (raw.kind == "add") or zero_new != (raw.kind == "delete"):
        raise _refuse(raw, "oid-zero", "the index line's all-zero id must stand exactly for the missing side of an "
                      "addition or deletion", path)
    if old is not None:
        _check_oid(raw, old_oid, old, "old", path)
    if new is not None:
        _check_oid(raw, new_oid, new, "new", path)


def _modes(raw: RawSection) -> tuple[int | None, int | None]:
    if raw.mode_lines:
        return raw.old_mode, raw.new_mode
    if raw.index_mode is not None:
        return raw.index_mode, raw.index_mode
    return raw.old_mode, raw.new_mode


def _check_headers(raw: RawSection, old_mode: int | None, new_mode: int | None, path: bytes) -> None:
    """The header lines agree with each other."""
    if raw.kind != "change" and raw.move is not None:
        raise _refuse(raw, "inconsistent-headers", "a section both adds or deletes and renames or copies", path)
    if raw.mode_lines and old_mode == new_mode:
        raise _refuse(raw, "mode-unchanged", "old mode and new mode lines state the same mode", path)
    if raw.kind != "change" and raw.index_mode is not None:
        raise _refuse(raw, "index-mode", "an addition or deletion's index line states a mode", path)
    if raw.mode_lines and raw.index_mode is not None:
        # git takes the index line's mode as the old mode, so the two readings of the mode change differ.
        raise _refuse(raw, "index-mode", "a mode change's index line also states a mode (git writes none there)", path)
    if raw.kind != "change" and raw.index is None:
        raise _refuse(raw, "index-missing", "an addition or deletion without its index line", path)
    if raw.kind == "add" and raw.labels and raw.minus is not None:
        raise _refuse(raw, "add-without-dev-null", "an added file's --- line must be /dev/null", path)
    if raw.kind == "delete" and raw.labels and raw.plus is not None:
        raise _refuse(raw, "delete-without-dev-null", "a deleted file's +++ line must be /dev/null", path)
    if MODE_LINK in (old_mode, new_mode) and old_mode != new_mode and raw.kind == "change":
        raise _refuse(raw, "type-change-in-section", "a file becomes a symlink (or the reverse) within one section; "
                      "git writes that as a deletion and an addition", path)


def _move_action(raw: RawSection, old_mode: int | None, new_mode: int | None, body: bool, path: bytes) -> Action:
    if MODE_LINK in (old_mode, new_mode):
        raise _refuse(raw, "symlink-rename", "a symlink is renamed or copied; its target would be read from "
                      "another directory (write it as a deletion and an addition)", path)
    if raw.similarity == 100 and (body or raw.index is not None):
        raise _refuse(raw, "similarity-disagrees", "a 100% rename or copy carries a content change", path)
    if raw.similarity != 100 and (not body or raw.index is None):
        raise _refuse(raw, "similarity-disagrees", "a rename or copy under 100% carries no content change (or no "
                      "index line)", path)
    return Action.RENAME if raw.move == "rename" else Action.COPY


def _action(raw: RawSection, old_mode: int | None, new_mode: int | None, path: bytes) -> Action:
    body = bool(raw.hunks) or raw.binary is not None
    if raw.kind == "add":
        return Action.SYMLINK_ADD if new_mode == MODE_LINK else Action.ADD
    if raw.kind == "delete":
        return Action.SYMLINK_DELETE if old_mode == MODE_LINK else Action.DELETE
    if raw.move is not None:
        return _move_action(raw, old_mode, new_mode, body, path)
    if old_mode is None or new_mode is None:
        raise _refuse(raw, "mode-unknown", "the section does not state the file's mode (git writes it on the index "
                      "line or in old mode/new mode lines)", path)
    if not body:
        if raw.index is not None or not raw.mode_lines:
            raise _refuse(raw, "empty-section", "the section changes nothing it carries", path)
        return Action.MODE
    if raw.index is None:
        raise _refuse(raw, "index-missing", "a content change without its index line", path)
    return Action.SYMLINK_MODIFY if new_mode == MODE_LINK else Action.MODIFY


def _check_base(raw: RawSection, base: BaseLookup | None, source: bytes, stated_mode: int | None) -> None:
    if base is None:
        return
    found = base(source)
    if found is None or found is False:
        raise _refuse(raw, "source-not-in-base", "the rename or copy source is not a path of the patch's base "
                      "(git would read whatever file is there, tracked or not)", source)
    if found is not True and found == MODE_LINK:
        raise _refuse(raw, "symlink-rename", "the rename or copy source is a symlink in the base", source)
    if found is not True and stated_mode is not None and found != stated_mode:
        raise _refuse(raw, "mode-disagrees-with-base", "the patch states another mode for the source than the "
                      "base has", source)


SYMLINK_ACTIONS = (Action.SYMLINK_ADD, Action.SYMLINK_MODIFY, Action.SYMLINK_DELETE)


def build_operation(raw: RawSection, base: BaseLookup | None) -> FileOperation:
    """The section's ``FileOperation``, every rule that needs the whole section checked."""
    old_path, new_path = _paths(raw)
    old_mode, new_mode = _modes(raw)
    _check_headers(raw, old_mode, new_mode, new_path)
    action = _action(raw, old_mode, new_mode, new_path)
    for path, mode in ((old_path, old_mode), (new_path, new_mode)):
        problem = pathrules.path_problem(path, mode)
        if problem:
            raise _refuse(raw, problem.rule, problem.message, path)
    _check_positions(raw, new_path)
    old, new = _contents(raw, action, new_path)
    if action in SYMLINK_ACTIONS:
        _check_symlink(raw, old, new, new_path)
    _check_oids(raw, old, new, new_path)
    if raw.move is not None:
        _check_base(raw, base, old_path, old_mode)
    adds = action in (Action.ADD, Action.SYMLINK_ADD)
    deletes = action in (Action.DELETE, Action.SYMLINK_DELETE)
    return FileOperation(
        action=action, old_path=None if adds else old_path, new_path=None if deletes else new_path,
        old_mode=None if adds else old_mode, new_mode=None if deletes else new_mode,
        old_oid=None if raw.index is None or adds else raw.index[0],
        new_oid=None if raw.index is None or deletes else raw.index[1],
        similarity=raw.similarity, hunks=tuple(raw.hunks), binary=raw.binary,
        old_size=None if old is None else len(old), new_size=None if new is None else len(new),
        symlink_target=new if action in (Action.SYMLINK_ADD, Action.SYMLINK_MODIFY) else None, line=raw.line)
