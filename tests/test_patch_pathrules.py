"""``pathrules``: which paths a patch may name and where a symlink may point (git's own .git rules, ported)."""

from __future__ import annotations

import pytest

from tkbox_daemon.patch import pathrules
from tkbox_daemon.patch.operations import MODE_FILE, MODE_LINK


@pytest.mark.parametrize(("path", "rule"), [
    (b"", "path-empty"), (b"/etc/passwd", "path-absolute"), (b"a/../b", "path-dot-component"),
    (b"a/./b", "path-dot-component"), (b"a//b", "path-empty-component"), (b"a/", "path-empty-component"),
    (b".git", "path-dotgit"), (b"x/.Git/y", "path-dotgit"), (b"GiT~1", "path-dotgit"), (b".git. . .", "path-dotgit"),
    (b".git:stream", "path-dotgit"), (b"a\\.git", "path-dotgit"), (".\u200dgit".encode(), "path-dotgit"),
    (".gi\u206ft\ufeff".encode(), "path-dotgit"), (b"tab\there", "path-control-character"),
    (b"del\x7f", "path-control-character"), ("c1\u0085".encode(), "path-control-character"),
    (b"\xc3", "path-not-utf8"), (b"n" * 256, "path-component-too-long"), (b"d/" * 2048 + b"f", "path-too-long"),
])
def test_refused_paths_name_their_rule(path, rule):
    problem = pathrules.path_problem(path)
    assert problem is not None and problem.rule == rule


@pytest.mark.parametrize("path", [b"a", b".gitignore", b".github/x", b"x.git", b".git2", b"git~2", b"gitx~1",
                                  b"..a", b"a..", "naïve/ü".encode(), "\u202eevil".encode(), b"a b/c d",
                                  b"back\\slash", b'q"t'])
def test_ordinary_paths_pass(path):
    assert pathrules.path_problem(path) is None


@pytest.mark.parametrize("name", [b".gitmodules", b".GITMODULES. ", b"gitmod~1", b"gi7eba~9", b".gitattributes",
                                  b".gitignore", b".mailmap", ".gitm\u200codules".encode()])
def test_git_s_own_dotfiles_may_not_be_symlinks(name):
    assert pathrules.path_problem(b"sub/" + name, MODE_LINK).rule == "path-protected-symlink"
    assert pathrules.path_problem(b"sub/" + name, MODE_FILE) is None


@pytest.mark.parametrize(("link", "target", "rule"), [
    (b"l", b"/etc/passwd", "symlink-target-absolute"), (b"l", b"../x", "symlink-target-escapes"),
    (b"a/l", b"../../x", "symlink-target-escapes"), (b"a/l", b"b/../../../x", "symlink-target-escapes"),
    (b"l", b".git/hooks", "symlink-target-dotgit"), (b"l", b"a/GIT~1", "symlink-target-dotgit"),
    (b"l", b"", "symlink-target-empty"), (b"l", b"a\nb", "symlink-target-control-character"),
    (b"l", b"\xff", "symlink-target-not-utf8"), (b"l", b"x" * 4097, "symlink-target-too-long"),
])
def test_symlink_targets_that_leave_the_tree_are_refused(link, target, rule):
    problem = pathrules.symlink_target_problem(link, target)
    assert problem is not None and problem.rule == rule


@pytest.mark.parametrize(("link", "target"), [(b"l", b"x"), (b"a/l", b"../x"), (b"a/b/l", b"../../x"),
                                              (b"a/l", b"./b//c/"), (b"a/l", b"b/../c"), (b"l", b"."),
                                              (b"a/l", b"..")])
def test_symlink_targets_inside_the_tree_pass(link, target):
    assert pathrules.symlink_target_problem(link, target) is None
