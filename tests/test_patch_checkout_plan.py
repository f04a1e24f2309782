"""The checkout writer's own guard on a plan (paths, modes, targets, contradictions) and the pre-image reader."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.checkout_trees import build
from tkbox_daemon.patch.checkout import write_checkout
from tkbox_daemon.patch.checkout_fs import CheckoutRefused, ReadBudget, read_preimages
from tkbox_daemon.patch.checkout_plan import (
    ABSENT,
    Delete,
    FileImage,
    PlanError,
    SymlinkImage,
    WriteFile,
    WriteSymlink,
    check_plan,
    path_components,
)


@pytest.mark.parametrize(("path", "message"), [
    (b"", "an empty path"),
    (b"/etc/passwd", "is absolute"),
    (b"a/../b", "'..'"),
    (b"a//b", "empty"),
    (b"a/", "empty"),
    (b"./a", "'.'"),
    (b".git/config", "goes into .git"),
    (b"sub/.GIT/hooks/x", "goes into .git"),
    (b".git./x", "goes into .git"),
    (b"a\0b", "NUL"),
    (b"x" * 256, "over 255 bytes"),
    ("a.txt", "must be bytes"),
])
def test_bad_paths_are_refused_with_what_is_wrong(path, message):
    with pytest.raises(PlanError, match=message):
        path_components(path)


@pytest.mark.parametrize(("changes", "message"), [
    ([WriteFile(b"a", b"", 0o4755, ABSENT)], "not 644 or 755"),
    ([WriteFile(b"a", b"", 0o777, ABSENT)], "not 644 or 755"),
    ([WriteFile(b"a", b"", 0o644, FileImage(0o2755, "00"))], "pre-image mode 2755"),
    ([WriteFile(b"a", b"", 0o644, ABSENT), Delete(b"a", FileImage(0o644, "00"))], "planned twice"),
    ([WriteFile(b"a", b"", 0o644, ABSENT), WriteFile(b"a/b", b"", 0o644, ABSENT)], "planned below a"),
    ([WriteSymlink(b"a", b"/etc/passwd", ABSENT)], "absolute path"),
    ([WriteSymlink(b"d/a", b"../../etc", ABSENT)], "outside the checkout"),
    ([WriteSymlink(b"a", b"", ABSENT)], "empty"),
    ([Delete(b"a", ABSENT)], "expected to be absent"),
])
def test_contradictory_or_unsafe_plans_are_refused(changes, message):
    with pytest.raises(PlanError, match=message):
        check_plan(changes)


def test_a_plan_error_touches_nothing(tmp_path):
    root = tmp_path / "checkout"
    root.mkdir()
    with pytest.raises(PlanError):
        write_checkout(root, [WriteFile(b"ok.txt", b"x", 0o644, ABSENT), WriteFile(b"../x", b"x", 0o644, ABSENT)])
    assert os.listdir(root) == []


def test_symlinks_inside_the_checkout_and_deletes_below_writes_are_fine():
    plan = check_plan([WriteSymlink(b"a/b/link", b"../../c/./d", ABSENT), Delete(b"x", FileImage(0o644, "00")),
                       WriteFile(b"x/y", b"", 0o644, ABSENT)])
    assert set(plan) == {(b"a", b"b", b"link"), (b"x",), (b"x", b"y")}


@given(st.lists(st.sampled_from([b"a", b"b", b".", b"..", b"", b".git", b".GiT", b"c d", b"\xff"]),
                min_size=1, max_size=5))
def test_path_components_accepts_exactly_the_plain_relative_paths(parts):
    path = b"/".join(parts)
    plain = all(part not in (b"", b".", b"..") and part.lower() != b".git" for part in parts)
    if plain:
        assert path_components(path) == tuple(parts)
    else:
        with pytest.raises(PlanError):
            path_components(path)


def _tree(root: Path) -> None:
    build(root, {b"a.txt": ("file", b"alpha\n", 0o644), b"bin/run": ("file", b"#!/bin/sh\n", 0o755),
                 b"lnk": ("link", b"a.txt"), b"dir/inner.txt": ("file", b"i", 0o600)})


def test_read_preimages_reads_files_links_and_absences(tmp_path):
    _tree(tmp_path)
    images = read_preimages(tmp_path, [b"a.txt", b"bin/run", b"lnk", b"missing/x", b"dir", b"a.txt/below",
                                       b"dir/inner.txt"])
    assert images[b"a.txt"] == FileImage.of(b"alpha\n", 0o644)
    assert images[b"a.txt"].content == b"alpha\n"
    assert images[b"bin/run"].mode == 0o755
    assert images[b"dir/inner.txt"].mode == 0o644  # git's view: not executable
    assert images[b"lnk"] == SymlinkImage(b"a.txt")
    assert images[b"missing/x"] == images[b"dir"] == images[b"a.txt/below"] == ABSENT


def test_read_preimages_refuses_symlinked_parents_special_files_and_big_files(tmp_path):
    _tree(tmp_path)
    (tmp_path / "via").symlink_to(tmp_path / "dir")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "big").write_bytes(b"b" * 100)
    with pytest.raises(CheckoutRefused) as refused:
        read_preimages(tmp_path, [b"via/inner.txt", b"pipe", b"big", b"a.txt"], budget=ReadBudget(max_file_bytes=50))
    problems = dict(refused.value.problems)
    assert problems[b"via/inner.txt"] == "parent via is a symlink"
    assert problems[b"pipe"] == "is a fifo"
    assert "limit checkout_file_bytes" in problems[b"big"]
    assert b"a.txt" not in problems


def test_read_preimages_bounds_the_total(tmp_path):
    _tree(tmp_path)
    with pytest.raises(CheckoutRefused, match="checkout_read_bytes"):
        read_preimages(tmp_path, [b"a.txt", b"bin/run"], budget=ReadBudget(max_total_bytes=8))
