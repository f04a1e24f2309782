"""The checkout writer on real directories: what it writes, what it refuses (symlinked parents, changed
pre-images), and how it rolls back after a failure injected through its ``CheckoutFs``."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tests.checkout_trees import InjectingFs, build, image, snapshot
from tkbox_daemon.patch.checkout import TEMP_PREFIX, write_checkout
from tkbox_daemon.patch.checkout_fs import CheckoutError, ReadBudget
from tkbox_daemon.patch.checkout_plan import ABSENT, Delete, FileImage, SymlinkImage, WriteFile, WriteSymlink

BASE = {
    b"README.md": ("file", b"hello\n", 0o644),
    b"run.sh": ("file", b"#!/bin/sh\necho hi\n", 0o755),
    b"src/app.py": ("file", b"print(1)\n", 0o644),
    b"src/lib/util.py": ("file", b"x = 1\n", 0o644),
    b"docs/index.md": ("file", b"# docs\n", 0o644),
    b"link": ("link", b"src/app.py"),
}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    build(root, BASE)
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    place = tmp_path / "outside"
    place.mkdir()
    (place / "target.txt").write_bytes(b"keep me\n")
    return place


def before(path: bytes):
    return image(BASE.get(path))


def test_a_plan_is_written_exactly(checkout):
    changes = [
        WriteFile(b"README.md", b"hello, world\n", 0o644, before(b"README.md")),
        WriteFile(b"run.sh", b"#!/bin/sh\necho hi\n", 0o644, before(b"run.sh")),  # mode only
        WriteFile(b"new/deep/tool.sh", b"#!/bin/sh\n", 0o755, ABSENT),
        Delete(b"src/lib/util.py", before(b"src/lib/util.py")),
        WriteSymlink(b"link", b"docs/index.md", before(b"link")),
        WriteSymlink(b"new/alias", b"deep/tool.sh", ABSENT),
    ]
    report = write_checkout(checkout, changes)
    assert report.ok and report.outcome == "written", report.message()
    assert report.paths("written") == [change.path for change in changes]
    leaves, dirs = snapshot(checkout)
    assert leaves == {
        b"README.md": ("file", b"hello, world\n", 0o644),
        b"run.sh": ("file", b"#!/bin/sh\necho hi\n", 0o644),
        b"new/deep/tool.sh": ("file", b"#!/bin/sh\n", 0o755),
        b"src/app.py": ("file", b"print(1)\n", 0o644),
        b"docs/index.md": ("file", b"# docs\n", 0o644),
        b"link": ("link", b"docs/index.md"),
        b"new/alias": ("link", b"deep/tool.sh"),
    }
    assert dirs == {b"src", b"docs", b"new", b"new/deep"}  # src/lib went with its last file


def test_modes_are_exact_whatever_the_umask(checkout):
    old = os.umask(0o077)
    try:
        report = write_checkout(checkout, [WriteFile(b"bin/tool", b"x", 0o755, ABSENT),
                                           WriteFile(b"notes.txt", b"y", 0o644, ABSENT)])
    finally:
        os.umask(old)
    assert report.ok
    assert (checkout / "bin/tool").stat().st_mode & 0o7777 == 0o755
    assert (checkout / "notes.txt").stat().st_mode & 0o7777 == 0o644


def test_a_setuid_file_loses_its_bits_when_replaced(checkout):
    (checkout / "run.sh").chmod(0o4755)
    report = write_checkout(checkout, [WriteFile(b"run.sh", b"new\n", 0o755, before(b"run.sh"))])
    assert report.ok, report.message()
    assert (checkout / "run.sh").stat().st_mode & 0o7777 == 0o755


def test_a_symlinked_parent_is_refused_and_nothing_is_written(checkout, outside):
    (checkout / "out").symlink_to(outside)
    (checkout / "inner").symlink_to(checkout / "src")
    report = write_checkout(checkout, [WriteFile(b"out/evil.txt", b"x", 0o644, ABSENT),
                                       WriteFile(b"inner/app.py", b"x", 0o644, before(b"src/app.py")),
                                       WriteFile(b"fine.txt", b"x", 0o644, ABSENT)])
    assert report.outcome == "refused"
    assert dict(report.problems) == {b"out/evil.txt": "parent out is a symlink",
                                     b"inner/app.py": "parent inner is a symlink"}
    assert "nothing written" in report.message()
    assert sorted(os.listdir(outside)) == ["target.txt"]
    assert not (checkout / "fine.txt").exists()
    assert (checkout / "src/app.py").read_bytes() == b"print(1)\n"
    assert report.paths("not_written") == [b"out/evil.txt", b"inner/app.py", b"fine.txt"]


def test_a_file_where_a_directory_should_be_is_refused(checkout):
    report = write_checkout(checkout, [WriteFile(b"README.md/x", b"x", 0o644, ABSENT)])
    assert report.outcome == "refused"
    assert report.problems == ((b"README.md/x", "parent README.md is not a directory"),)


def test_a_symlink_at_the_path_itself_is_not_written_through(checkout, outside):
    (checkout / "config.txt").symlink_to(outside / "target.txt")
    refused = write_checkout(checkout, [WriteFile(b"config.txt", b"x", 0o644, FileImage.of(b"keep me\n", 0o644))])
    assert refused.outcome == "refused"
    assert "found a symlink to" in refused.problems[0][1]
    # a plan that knows it is a symlink replaces the link itself, never its target
    replaced = write_checkout(checkout, [WriteFile(b"config.txt", b"mine\n", 0o644,
                                                   SymlinkImage(os.fsencode(outside / "target.txt")))])
    assert replaced.ok, replaced.message()
    assert not (checkout / "config.txt").is_symlink()
    assert (checkout / "config.txt").read_bytes() == b"mine\n"
    assert (outside / "target.txt").read_bytes() == b"keep me\n"


def test_every_changed_pre_image_is_named(checkout):
    (checkout / "src/app.py").write_bytes(b"print(2)\n")
    (checkout / "run.sh").chmod(0o644)
    (checkout / "added.txt").write_bytes(b"already here\n")
    report = write_checkout(checkout, [
        WriteFile(b"src/app.py", b"print(3)\n", 0o644, before(b"src/app.py")),
        WriteFile(b"run.sh", b"x", 0o755, before(b"run.sh")),
        WriteFile(b"added.txt", b"new\n", 0o644, ABSENT),
        Delete(b"docs/gone.md", FileImage.of(b"x", 0o644)),
        WriteFile(b"README.md", b"fine\n", 0o644, before(b"README.md")),
    ])
    assert report.outcome == "refused"
    problems = dict(report.problems)
    assert set(problems) == {b"src/app.py", b"run.sh", b"added.txt", b"docs/gone.md"}
    assert problems[b"src/app.py"].startswith("its content differs from the patch's base")
    assert problems[b"run.sh"] == "its mode is 644, expected 755"
    assert problems[b"added.txt"].startswith("the patch adds it, but the checkout has a file")
    assert problems[b"docs/gone.md"] == "expected a file (mode 644, sha256 2d711642b726), found nothing"
    assert (checkout / "README.md").read_bytes() == b"hello\n"
    for path in (b"src/app.py", b"run.sh", b"added.txt", b"docs/gone.md"):
        assert path.decode() in report.message()


def test_a_fifo_or_a_big_file_is_refused(checkout):
    os.mkfifo(checkout / "pipe")
    (checkout / "big.bin").write_bytes(b"x" * 2048)
    report = write_checkout(checkout, [WriteFile(b"pipe", b"x", 0o644, ABSENT),
                                       Delete(b"big.bin", FileImage.of(b"x" * 2048, 0o644))],
                            budget=ReadBudget(max_file_bytes=1024))
    problems = dict(report.problems)
    assert problems[b"pipe"] == "the patch adds it, but the checkout has a fifo"
    assert "limit checkout_file_bytes" in problems[b"big.bin"]


def test_a_directory_can_stand_in_for_an_added_file_only_if_the_plan_empties_it(checkout):
    refused = write_checkout(checkout, [WriteFile(b"src", b"now a file\n", 0o644, ABSENT),
                                        Delete(b"src/app.py", before(b"src/app.py"))])
    assert refused.outcome == "refused"
    assert "holding src/lib" in dict(refused.problems)[b"src"]
    report = write_checkout(checkout, [WriteFile(b"src", b"now a file\n", 0o644, ABSENT),
                                       Delete(b"src/app.py", before(b"src/app.py")),
                                       Delete(b"src/lib/util.py", before(b"src/lib/util.py"))])
    assert report.ok, report.message()
    assert (checkout / "src").read_bytes() == b"now a file\n"


def test_a_file_the_plan_deletes_can_become_a_directory(checkout):
    report = write_checkout(checkout, [Delete(b"README.md", before(b"README.md")),
                                       WriteFile(b"README.md/index.md", b"# moved\n", 0o644, ABSENT)])
    assert report.ok, report.message()
    assert (checkout / "README.md/index.md").read_bytes() == b"# moved\n"


def test_an_injected_failure_rolls_back_what_was_written(checkout):
    changes = [WriteFile(b"a.txt", b"A", 0o644, ABSENT),
               WriteFile(b"README.md", b"changed\n", 0o644, before(b"README.md")),
               Delete(b"src/lib/util.py", before(b"src/lib/util.py")),
               WriteFile(b"z/last.txt", b"Z", 0o644, ABSENT)]
    original = snapshot(checkout)

    def fail_last_rename(number, op, name):
        if op == "rename" and name == b"last.txt":
            raise OSError(errno.EIO, "disk on fire")

    report = write_checkout(checkout, changes, fs=InjectingFs(on_call=fail_last_rename))
    assert report.outcome == "failed"
    assert report.failure == "z/last.txt: writing it failed: Input/output error"
    statuses = {item.path: (item.status, item.reason) for item in report.files}
    assert statuses[b"z/last.txt"] == ("not_written", "writing it failed: Input/output error")
    assert {statuses[path][0] for path in (b"a.txt", b"README.md", b"src/lib/util.py")} == {"rolled_back"}
    assert snapshot(checkout) == original  # files, modes, and directories (z/ removed, src/lib/ back)
    assert not any(name.startswith(TEMP_PREFIX) for name in os.listdir(os.fsencode(checkout)))
    message = report.message()
    assert "written, then rolled back: README.md" in message and "not written: z/last.txt" in message


def test_a_file_changed_after_it_was_written_is_not_rolled_back(checkout):
    changes = [WriteFile(b"README.md", b"ours\n", 0o644, before(b"README.md")),
               WriteFile(b"zz.txt", b"Z", 0o644, ABSENT)]

    def meddle_then_fail(number, op, name):
        if op == "rename" and name == b"zz.txt":
            (checkout / "README.md").write_bytes(b"someone else's\n")
            raise OSError(errno.EIO, "injected")

    report = write_checkout(checkout, changes, fs=InjectingFs(on_call=meddle_then_fail))
    statuses = {item.path: (item.status, item.reason) for item in report.files}
    assert statuses[b"README.md"][0] == "rollback_failed"
    assert "changed after tkbox wrote it" in statuses[b"README.md"][1]
    assert (checkout / "README.md").read_bytes() == b"someone else's\n"
    assert "written and NOT rolled back: README.md" in report.message()


def test_a_pre_image_changed_between_check_and_write_stops_the_write(checkout):
    opened = []

    def change_app_py(number, op, name):
        if op == "open" and name == b"src":
            opened.append(number)
            if len(opened) == 2:  # the write's walk, after the check's
                (checkout / "src/app.py").write_bytes(b"print('edited meanwhile')\n")

    changes = [WriteFile(b"a.txt", b"A", 0o644, ABSENT),
               WriteFile(b"src/app.py", b"print(2)\n", 0o644, before(b"src/app.py"))]
    report = write_checkout(checkout, changes, fs=InjectingFs(on_call=change_app_py))
    assert report.outcome == "failed"
    assert report.failure.startswith("src/app.py: it changed after the check")
    assert (checkout / "src/app.py").read_bytes() == b"print('edited meanwhile')\n"
    assert not (checkout / "a.txt").exists()
    assert [item.status for item in report.files] == ["rolled_back", "not_written"]


def test_a_parent_swapped_for_a_symlink_after_the_check_gets_nothing_written_outside(checkout, outside):
    walks = []

    def swap(number, op, name):
        if op == "open" and name == b"src":
            walks.append(number)
            if len(walks) == 3:  # the check walked src once per path; this is the write's first walk
                os.rename(checkout / "src", checkout.parent / "src-moved")
                (checkout / "src").symlink_to(outside)

    changes = [WriteFile(b"src/app.py", b"evil\n", 0o644, before(b"src/app.py")),
               WriteFile(b"src/new.py", b"evil\n", 0o644, ABSENT)]
    report = write_checkout(checkout, changes, fs=InjectingFs(on_call=swap))
    assert report.outcome == "failed"
    assert "parent src is a symlink now" in report.failure
    assert sorted(os.listdir(outside)) == ["target.txt"]
    assert (outside / "target.txt").read_bytes() == b"keep me\n"
    assert (checkout.parent / "src-moved/app.py").read_bytes() == b"print(1)\n"
    assert report.paths("not_written") == [b"src/app.py", b"src/new.py"]


def test_the_root_may_be_a_symlink_but_must_be_a_directory(checkout, tmp_path):
    alias = tmp_path / "alias"
    alias.symlink_to(checkout)
    assert write_checkout(alias, [WriteFile(b"x.txt", b"x", 0o644, ABSENT)]).ok
    assert (checkout / "x.txt").read_bytes() == b"x"
    with pytest.raises(CheckoutError, match="cannot open the checkout"):
        write_checkout(checkout / "README.md", [])


def test_an_empty_plan_writes_nothing(checkout):
    original = snapshot(checkout)
    report = write_checkout(checkout, [])
    assert report.ok and report.files == ()
    assert snapshot(checkout) == original
