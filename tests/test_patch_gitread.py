"""``gitread``: git reads and applies patches in a clean room that nothing of the caller's git setup reaches."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.patch_trees import entry, guest_patch
from tkbox_daemon.patch import gitread, hunks
from tkbox_daemon.patch.gitparse import parse_patch
from tkbox_daemon.patch.operations import PatchRefused

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def hostile_git_setup(tmp_path, monkeypatch):
    """A caller whose own git setup would change how patches read and apply, if any of it leaked in."""
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".gitconfig").write_text("[apply]\n\twhitespace = error\n[core]\n\tautocrlf = true\n")
    (home / ".config" / "git" / "attributes").write_text("* ident\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'apply.whitespace'='error'")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.attributesFile")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(home / ".config" / "git" / "attributes"))


def test_nothing_of_the_callers_git_setup_takes_part(hostile_git_setup):
    old = {b"f": entry("$Id$ \n")}
    new = {b"f": entry("$Id$ \ntrailing space \n")}
    patch = guest_patch(old, new)
    parsed = parse_patch(patch)
    gitread.cross_check(patch, parsed)
    assert gitread.apply_with_git(patch, old) == new == hunks.apply_to_tree(parsed.operations, old)


def test_attributes_among_the_pre_images_change_nothing():
    old = {b".gitattributes": entry("* ident text eol=crlf filter=lfs\n"), b"f": entry("x $Id$\n")}
    new = {**old, b"f": entry("x $Id$\ny\n")}
    patch = guest_patch(old, new)
    assert gitread.apply_with_git(patch, old) == new


def test_a_different_reading_names_the_section_and_both_readings():
    patch = guest_patch({b"a": entry("1\n"), b"b": entry("2\n")}, {b"a": entry("one\n"), b"b": entry("2\n3\n")})
    parsed = parse_patch(patch)
    output = gitread.read_with_git(patch)
    gitread.compare_with_git(parsed, output)
    with pytest.raises(PatchRefused, match=r"section at line \d+ \(b\): git reads 0\\t1\\tb") as refused:
        gitread.compare_with_git(parsed, output.replace(b"1\t0\tb\0", b"0\t1\tb\0"))
    assert refused.value.rule == "git-reads-differently"
    with pytest.raises(PatchRefused, match="git reads more than the host:  create mode 100644 c"):
        gitread.compare_with_git(parsed, output + b" create mode 100644 c\n")
    mode_patch = guest_patch({b"m": entry("x\n")}, {b"m": entry("x\n", 0o100755)})
    mode_output = gitread.read_with_git(mode_patch)
    with pytest.raises(PatchRefused, match="git's summary says  mode change 100644 => 100700 m"):
        gitread.compare_with_git(parse_patch(mode_patch), mode_output.replace(b"100755", b"100700"))


def test_git_that_cannot_read_the_patch_refuses_it():
    with pytest.raises(PatchRefused) as refused:
        gitread.read_with_git(b"diff --git a/x b/x\n@@ -1 +1 @@\n-a\n+b\n")
    assert refused.value.rule == "git-refuses"


def test_git_runs_are_bounded_in_time_and_output(tmp_path):
    with pytest.raises(PatchRefused) as late:
        gitread.read_with_git(guest_patch({}, {b"a": entry("a\n")}), timeout=0)
    assert late.value.rule == "limit:patch_git_time"
    with pytest.raises(PatchRefused, match="prints more"):
        gitread.run_git(["--version"], cwd=tmp_path, env={"PATH": gitread.SAFE_PATH}, timeout=60, max_stdout=3)


def test_without_git_nothing_is_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(gitread.GitUnavailable):
        gitread.read_with_git(b"")


def test_scratch_pre_images_must_make_a_tree(tmp_path):
    with pytest.raises(ValueError, match="both a file and a directory"):
        gitread.apply_with_git(b"", {b"a": entry("x"), b"a/b": entry("y")})
    with pytest.raises(ValueError, match=".git"):
        gitread.apply_with_git(b"", {b".git/config": entry("x")})
    patch = guest_patch({b"f": entry("a\n")}, {b"f": entry("b\n")})
    with pytest.raises(PatchRefused) as refused:
        gitread.apply_with_git(patch, {b"f": entry("something else\n")})
    assert refused.value.rule == "git-apply-refuses"
    assert not Path(tmp_path).joinpath("f").exists()
