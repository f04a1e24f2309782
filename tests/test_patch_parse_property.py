"""Properties of the strict patch parser, against the guest's own patches and against git itself.

(a) A patch the guest writes between two random small trees parses back to exactly the operations that turn one
    tree into the other; ``hunks.apply_to_tree`` turns the old tree into the new one; git reads the patch the same
    way (``cross_check``) and, applying it in a scratch tree, gets the same new tree.
(b) Any mutation of such a patch (bytes flipped, inserted or deleted; lines deleted, duplicated, swapped or
    inserted) is either refused, or read by git exactly as the parser reads it.
(c) Every spelling of ``.git`` that git's own HFS+/NTFS rules take for ``.git`` is refused, and every path git's
    ``verify_path`` refuses (asked of git itself, through ``update-index --index-info``) is refused too.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.git_worktree import git_env
from tests.patch_trees import guest_patch
from tkbox_daemon.patch import gitread, hunks, pathrules
from tkbox_daemon.patch.gitparse import parse_patch
from tkbox_daemon.patch.operations import MODE_EXEC, MODE_FILE, MODE_LINK, Action, PatchRefused, TreeEntry

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NAMES = ["a", "b.txt", "sp ace", "ünï", 'q"t', "back\\s", "-d", ".gitignore"]
_LINES = st.sampled_from([b"x\n", b"y\n", b"zz", b"\r\n", "é\n".encode(), b"\n", b"+++ b/x\n", b"@@ -1 +1 @@\n",
                          b"diff --git a/q b/q\n", b"\\ No newline\n", b"long " * 9 + b"\n"])
CONTENT = st.one_of(st.lists(_LINES, max_size=25).map(b"".join), st.binary(max_size=80),
                    st.just(b"\xff\xfe not utf-8\n"))


@st.composite
def paths(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3))
    return "/".join(parts).encode()


@st.composite
def entries(draw: st.DrawFn, path: bytes) -> TreeEntry:
    kind = draw(st.sampled_from(["file", "file", "exec", "link"]))
    if kind == "link" and b".gitignore" not in path.split(b"/"):  # refused for symlinks, as git does
        depth = path.count(b"/")
        up = draw(st.integers(0, depth))
        return TreeEntry(MODE_LINK, b"../" * up + draw(st.sampled_from(NAMES)).encode())
    return TreeEntry(MODE_EXEC if kind == "exec" else MODE_FILE, draw(CONTENT))


def _consistent(tree: dict[bytes, TreeEntry]) -> dict[bytes, TreeEntry]:
    """Drop entries that sit below another entry (a path cannot be a file and a directory)."""
    keep = {}
    for path in sorted(tree, key=len):
        parents = [path[:i] for i in range(len(path)) if path[i:i + 1] == b"/"]
        if not any(parent in keep for parent in parents):
            keep[path] = tree[path]
    return keep


@st.composite
def tree_pairs(draw: st.DrawFn) -> tuple[dict[bytes, TreeEntry], dict[bytes, TreeEntry]]:
    old_paths = draw(st.lists(paths(), max_size=6, unique=True))
    old = _consistent({path: draw(entries(path)) for path in old_paths})
    new = dict(old)
    for path in list(old):
        choice = draw(st.sampled_from(["keep", "edit", "delete", "replace"]))
        if choice == "delete":
            del new[path]
        elif choice == "edit" and old[path].mode != MODE_LINK:
            new[path] = TreeEntry(draw(st.sampled_from([MODE_FILE, MODE_EXEC])), draw(CONTENT))
        elif choice == "replace":
            new[path] = draw(entries(path))
    for path in draw(st.lists(paths(), max_size=3, unique=True)):
        new.setdefault(path, draw(entries(path)))
    return old, _consistent(new)


def _expected(old: dict[bytes, TreeEntry], new: dict[bytes, TreeEntry]) -> list[tuple]:
    """(action, old path, new path, old mode, new mode) per change, as the guest writes them."""
    out: list[tuple] = []
    for path in sorted(set(old) | set(new)):
        was, now = old.get(path), new.get(path)
        if was == now:
            continue
        if was is not None and (now is None or (was.mode == MODE_LINK) != (now.mode == MODE_LINK)):
            out.append((Action.SYMLINK_DELETE if was.mode == MODE_LINK else Action.DELETE, path, None, was.mode, None))
            was = None
        if now is None:
            continue
        if was is None:
            out.append((Action.SYMLINK_ADD if now.mode == MODE_LINK else Action.ADD, None, path, None, now.mode))
        elif now.mode == MODE_LINK:
            out.append((Action.SYMLINK_MODIFY, path, path, MODE_LINK, MODE_LINK))
        else:
            action = Action.MODE if was.data == now.data else Action.MODIFY
            out.append((action, path, path, was.mode, now.mode))
    return out


@settings(SETTINGS, max_examples=40)
@given(tree_pairs())
def test_guest_patches_parse_back_to_their_changes_and_git_agrees(pair):
    old, new = pair
    patch = guest_patch(old, new)
    parsed = parse_patch(patch, base=lambda path: old[path].mode if path in old else None)
    got = [(op.action, op.old_path, op.new_path, op.old_mode, op.new_mode) for op in parsed.operations]
    assert got == _expected(old, new)
    for op in parsed.operations:
        if op.new_size is not None:
            assert op.new_size == len(new[op.new_path].data)
        if op.old_size is not None:
            assert op.old_size == len(old[op.old_path].data)
        assert not op.abbreviated_oids
    assert hunks.apply_to_tree(parsed.operations, old) == new
    gitread.cross_check(patch, parsed)
    assert gitread.apply_with_git(patch, old) == new


_INSERTS = st.sampled_from([b"\n", b"\r", b" ", b"+", b"-", b"\\", b"\0", b"/", b"\"", b"@@ -1 +1 @@\n",
                            b"--- a/x\n+++ b/x\n", b"diff --git a/z b/z\n", b"new file mode 100644\n",
                            b"old mode 100644\nnew mode 100755\n", b"+evil\n", b"\\ No newline at end of file\n",
                            b"/dev/null", b"../", b".git/", b"literal 3\n", b"delta 3\n", b"GIT binary patch\n"])


@st.composite
def mutations(draw: st.DrawFn, patch: bytes) -> bytes:
    data = bytearray(patch)
    lines = patch.splitlines(keepends=True)
    kind = draw(st.sampled_from(["flip", "insert", "delete", "line-delete", "line-dup", "line-swap", "line-insert"]))
    if kind.startswith("line") and lines:
        at = draw(st.integers(0, len(lines) - 1))
        if kind == "line-delete":
            del lines[at]
        elif kind == "line-dup":
            lines.insert(at, lines[at])
        elif kind == "line-swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
        else:
            lines.insert(at, draw(_INSERTS))
        return b"".join(lines)
    at = draw(st.integers(0, max(0, len(data) - 1)))
    if kind == "flip" and data:
        data[at] ^= 1 << draw(st.integers(0, 7))
    elif kind == "insert":
        data[at:at] = draw(st.one_of(_INSERTS, st.binary(min_size=1, max_size=3)))
    elif data:
        del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


@settings(SETTINGS, max_examples=150)
@given(st.data())
def test_a_mutated_patch_is_refused_or_read_by_git_exactly_as_by_the_parser(data):
    old, new = data.draw(tree_pairs())
    patch = guest_patch(old, new)
    mutated = data.draw(mutations(patch))
    try:
        parsed = parse_patch(mutated)
    except PatchRefused:
        return
    gitread.cross_check(mutated, parsed)  # accepted: git must read the same sections, paths, modes and counts


_HFS_IGNORED = [chr(code) for code in sorted(pathrules.HFS_IGNORED)]


@st.composite
def dotgit_spellings(draw: st.DrawFn) -> bytes:
    """A name that git's is_hfs_dotgit or is_ntfs_dotgit takes for .git."""
    style = draw(st.sampled_from(["hfs", "ntfs", "short"]))
    if style == "hfs":
        letters = [draw(st.sampled_from([c, c.upper()])) for c in ".git"]
        for _ in range(draw(st.integers(0, 4))):
            letters.insert(draw(st.integers(0, len(letters))), draw(st.sampled_from(_HFS_IGNORED)))
        return "".join(letters).encode()
    head = "".join(draw(st.sampled_from([c, c.upper()])) for c in (".git" if style == "ntfs" else "git"))
    head += "" if style == "ntfs" else "~1"
    tail = "".join(draw(st.lists(st.sampled_from([".", " "]), max_size=4)))
    stream = draw(st.sampled_from(["", ":", "::$INDEX_ALLOCATION", ":x"]))
    return (head + tail + stream).encode()


@given(dotgit_spellings(), st.sampled_from([b"", b"sub/", b"a/b/", b"x\\"]), st.sampled_from([b"", b"/config"]))
def test_every_spelling_of_dotgit_is_refused(name, before, after):
    problem = pathrules.path_problem(before + name + after)
    assert problem is not None and problem.rule in ("path-dotgit", "path-empty-component"), problem
    if not after and not before.endswith(b"\\"):
        assert pathrules.is_dotgit_component(name)


_ALPHABET = st.sampled_from([".", "g", "G", "i", "I", "t", "T", "~", "1", "2", " ", ":", "\\", "m", "o", "d",
                             "u", "l", "e", "s", "\u200c", "\u200d", "\ufeff", "\u202e", "\u206a", "x"])
_COMPONENT = st.one_of(st.lists(_ALPHABET, min_size=1, max_size=14).map("".join),
                       st.sampled_from([".git", "git~1", ".gitmodules", "gitmod~1", ".GIT.", "..", "."]))


def _git_refuses(paths_: list[bytes], mode: int) -> set[bytes]:
    """The paths git's own verify_path refuses (with HFS+ and NTFS protection), asked of git itself."""
    with tempfile.TemporaryDirectory() as tmp:
        env = git_env(Path(tmp, "home"))
        subprocess.run(["git", "init", "-q", tmp + "/r"], check=True, env=env)
        oid = b"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        listed = [b"p%d/%s" % (number, path) for number, path in enumerate(paths_)]
        lines = b"".join(b"%o %s\t%s\0" % (mode, oid, path) for path in listed)
        subprocess.run(["git", "-c", "core.protectHFS=true", "-c", "core.protectNTFS=true", "update-index", "--add",
                        "-z", "--index-info"], input=lines, cwd=tmp + "/r", env=env, check=True, capture_output=True)
        kept = set(subprocess.run(["git", "ls-files", "-z"], cwd=tmp + "/r", env=env, check=True,
                                  capture_output=True).stdout.split(b"\0"))
    return {path for path, name in zip(paths_, listed, strict=True) if name not in kept}


@settings(SETTINGS, max_examples=30)
@given(st.lists(st.lists(_COMPONENT, min_size=1, max_size=3).map("/".join), min_size=1, max_size=20, unique=True),
       st.sampled_from([MODE_FILE, MODE_LINK]))
def test_every_path_git_refuses_is_refused(texts, mode):
    candidates = [text.encode() for text in texts]
    for path in _git_refuses(candidates, mode):
        assert pathrules.path_problem(path, mode) is not None, path
