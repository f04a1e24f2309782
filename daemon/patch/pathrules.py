"""Which paths a patch may name, and where a symlink it makes may point: the checks the host makes itself.

Pure functions over bytes, shared by the patch parser and the checkout writer. A path is refused when it is:

- empty, absolute, longer than ``limits.PATCH_PATH_LENGTH`` bytes, or with a component over 255 bytes;
- not valid UTF-8 (a policy decides on text; a name it cannot read as text cannot be decided faithfully);
- holding a control character (C0, DEL, C1): newlines, escapes and carriage returns in names fool terminals and
  line-based tools;
- holding an empty, ``.`` or ``..`` component (``a//b``, ``a/``, ``./a``, ``a/../b``);
- going into ``.git`` in any spelling git itself refuses (``verify_path`` with ``core.protectHFS`` and
  ``core.protectNTFS``): any case (``.GIT``), HFS+ ignorable code points anywhere in the name (``.g\\u200cit``,
  ``\\ufeff.git``), NTFS trailing dots and spaces (``.git. .``), the NTFS short name ``git~1``, an alternate data
  stream (``.git::$INDEX_ALLOCATION``), and a backslash taken as a separator (``a\\.git``). These are ports of git's
  ``is_hfs_dotgit`` (utf8.c) and ``is_ntfs_dotgit`` (path.c);
- for a symlink (mode 120000): with ``.gitmodules``, ``.gitattributes``, ``.gitignore`` or ``.mailmap`` as any
  component, in any of those spellings (git refuses a symlinked ``.gitmodules`` so; the others would make git read
  files outside the tree).

A symlink's target is refused when it is empty, absolute, not UTF-8, holds a control character, is longer than
``PATCH_PATH_LENGTH``, goes into ``.git`` (as above), or leaves the tree once its ``..`` components are resolved
against the link's own directory (``a/l -> ../../x`` leaves; ``a/l -> ../b`` does not). The resolution is lexical:
a target through another symlink already in the checkout is the checkout writer's to refuse (it never writes
through one).

Each refusal is a ``PathProblem``: a stable rule id and a sentence saying what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import limits

MODE_LINK = 0o120000
NAME_MAX = 255  # bytes in one path component, as Linux allows

# utf8.c next_hfs_char: code points HFS+ ignores when it compares names.
HFS_IGNORED = frozenset({0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
                         0x206A, 0x206B, 0x206C, 0x206D, 0x206E, 0x206F, 0xFEFF})
# path.c: the dotfiles git protects from being symlinks, each with its NTFS short-name prefix.
SYMLINK_PROTECTED = ((b"gitmodules", b"gi7eba"), (b"gitignore", b"gi250a"), (b"gitattributes", b"gi7d29"),
                     (b"mailmap", b"maba30"))
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_SEPARATORS = re.compile(rb"[/\\]")


@dataclass(frozen=True, slots=True)
class PathProblem:
    """Why a path (or a symlink target) is refused: ``rule`` is a stable id, ``message`` a sentence."""

    rule: str
    message: str


def _is_hfs_dot(component: str, needle: str) -> bool:
    """utf8.c ``is_hfs_dot_generic`` for one component: ``.`` + ``needle`` in any ASCII case, once the code
    points HFS+ ignores are dropped."""
    kept = [char for char in component if ord(char) not in HFS_IGNORED]
    if len(kept) != len(needle) + 1 or kept[0] != ".":
        return False
    return all(ord(char) < 128 and char.lower() == want for char, want in zip(kept[1:], needle, strict=True))


def is_hfs_dotgit(component: str) -> bool:
    """Whether HFS+ would take ``component`` for ``.git``."""
    return _is_hfs_dot(component, "git")


def is_ntfs_dotgit(name: bytes) -> bool:
    """path.c ``is_ntfs_dotgit``: ``.git`` or ``git~1`` in any case, then only dots and spaces up to the end, a
    separator (``/`` or ``\\``) or an alternate data stream's ``:``."""
    lower = name.lower()  # bytes.lower() folds ASCII only, as git's tolower does here
    if lower.startswith(b".git"):
        rest = name[4:]
    elif lower.startswith(b"git~1"):
        rest = name[5:]
    else:
        return False
    for byte in rest:
        if byte in b"/\\:":
            return True
        if byte not in b". ":
            return False
    return True


def _only_spaces_and_periods(rest: bytes) -> bool:
    for byte in rest:
        if byte == ord(":"):
            return True
        if byte not in b" .":
            return False
    return True


def _is_ntfs_dot_generic(name: bytes, dotted: bytes, short_prefix: bytes) -> bool:
    """path.c ``is_ntfs_dot_generic``: ``.NAME``, its 6-letter short name ``~1``..``~4``, or the fall-back short
    name (``short_prefix`` then ``~`` and digits), each followed only by dots and spaces."""
    if name[:1] == b"." and name[1:1 + len(dotted)].lower() == dotted:
        return _only_spaces_and_periods(name[1 + len(dotted):])
    if name[:6].lower() == dotted[:6] and name[6:7] == b"~" and b"1" <= name[7:8] <= b"4":
        return _only_spaces_and_periods(name[8:])
    index, saw_tilde = 0, False
    while index < 8:
        if index >= len(name):
            return False
        byte = name[index]
        if saw_tilde:
            if not 0x30 <= byte <= 0x39:
                return False
        elif byte == ord("~"):
            index += 1
            if index >= len(name) or not 0x31 <= name[index] <= 0x39:
                return False
            saw_tilde = True
        elif index >= 6 or byte & 0x80 or bytes([byte]).lower() != short_prefix[index:index + 1]:
            return False
        index += 1
    return _only_spaces_and_periods(name[8:])


def is_dotgit_component(component: bytes) -> bool:
    """Whether a path component is ``.git`` to git on any file system it protects (HFS+ and NTFS), a backslash
    inside it counting as a separator as it does on NTFS."""
    for piece in _SEPARATORS.split(component):
        if is_ntfs_dotgit(piece) or is_hfs_dotgit(piece.decode("utf-8", "replace")):
            return True
    return False


def is_protected_symlink_name(component: bytes) -> bool:
    """Whether a symlink may not have this name: ``.gitmodules`` and its siblings, in any spelling."""
    text = component.decode("utf-8", "replace")
    return any(_is_hfs_dot(text, dotted.decode()) or _is_ntfs_dot_generic(component, dotted, prefix)
               for dotted, prefix in SYMLINK_PROTECTED)


def _text_problem(value: bytes, what: str, rule: str) -> PathProblem | None:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return PathProblem(f"{rule}-not-utf8", f"{what} is not valid UTF-8")
    found = _CONTROL.search(text)
    if found:
        return PathProblem(f"{rule}-control-character",
                           f"{what} holds the control character U+{ord(found.group()):04X}")
    return None


def path_problem(path: bytes, mode: int | None = None) -> PathProblem | None:
    """Why ``path`` (relative to the checkout, ``/``-separated) may not be written, or None when it may.
    ``mode`` is the entry's git mode when known (a symlink has more names refused)."""
    if not path:
        return PathProblem("path-empty", "the path is empty")
    if len(path) > limits.PATCH_PATH_LENGTH.default:
        return PathProblem("path-too-long", limits.PATCH_PATH_LENGTH.refusal(f"a path of {len(path)} bytes"))
    problem = _text_problem(path, "the path", "path")
    if problem:
        return problem
    if path.startswith(b"/"):
        return PathProblem("path-absolute", "the path is absolute; a patch names paths inside the checkout")
    components = path.split(b"/")
    for component in components:
        if component == b"":
            return PathProblem("path-empty-component", "the path has an empty component (a double or trailing /)")
        if component in (b".", b".."):
            return PathProblem("path-dot-component", f"the path has a '{component.decode()}' component")
        if len(component) > NAME_MAX:
            return PathProblem("path-component-too-long", f"a component of the path is over {NAME_MAX} bytes")
        if is_dotgit_component(component):
            return PathProblem("path-dotgit", "the path goes into .git (in one of the spellings git refuses)")
    if mode == MODE_LINK and any(is_protected_symlink_name(component) for component in components):
        return PathProblem("path-protected-symlink", "a symlink may not be named .gitmodules, .gitattributes, "
                           ".gitignore or .mailmap, nor sit below such a name")
    return None


def symlink_target_problem(link_path: bytes, target: bytes) -> PathProblem | None:
    """Why a symlink at ``link_path`` may not point at ``target``, or None when the target stays in the tree."""
    if not target:
        return PathProblem("symlink-target-empty", "the symlink's target is empty")
    if len(target) > limits.PATCH_PATH_LENGTH.default:
        return PathProblem("symlink-target-too-long",
                           limits.PATCH_PATH_LENGTH.refusal(f"a symlink target of {len(target)} bytes"))
    problem = _text_problem(target, "the symlink's target", "symlink-target")
    if problem:
        return problem
    if target.startswith(b"/"):
        return PathProblem("symlink-target-absolute", "the symlink's target is absolute; it would leave the tree")
    resolved = link_path.split(b"/")[:-1]
    for component in target.split(b"/"):
        if component in (b"", b"."):
            continue
        if component == b"..":
            if not resolved:
                return PathProblem("symlink-target-escapes",
                                   "the symlink's target leaves the tree (resolved from the link's directory)")
            resolved.pop()
            continue
        if is_dotgit_component(component):
            return PathProblem("symlink-target-dotgit", "the symlink's target goes into .git")
        resolved.append(component)
    return None
