"""Bounded reads of one workspace file: symlinks resolved inside the workspace, everything else refused."""

from __future__ import annotations

import os

import pytest

from tkbox_guest.files import BoundedRead, FileError, open_in_workspace


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_bytes(b"0123456789")
    (root / "top.txt").write_bytes(b"top")
    (root / "rel").symlink_to("a/b/f.txt")
    (root / "a" / "up").symlink_to("../top.txt")
    (root / "a" / "dirlink").symlink_to("b")
    (root / "chain1").symlink_to("chain2")
    (root / "chain2").symlink_to("a/dirlink/f.txt")
    (root / "abs").symlink_to(root / "top.txt")
    (root / "absdir").symlink_to(root / "a")
    (root / "out").symlink_to(tmp_path / "secret")
    (root / "out-rel").symlink_to("../secret")
    (root / "dotdot").symlink_to("a/../../secret")
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    (tmp_path / "secret").write_text("secret")
    os.mkfifo(root / "fifo")
    return root


def _read(root, path, max_bytes=100) -> tuple[bytes, int, bool]:
    read = BoundedRead(str(root), path, max_bytes, chunk=3)
    data = b"".join(read.chunks())
    return data, read.size, read.truncated


@pytest.mark.parametrize(("path", "content"), [
    ("a/b/f.txt", b"0123456789"), ("./a//b/./f.txt", b"0123456789"), ("rel", b"0123456789"),
    ("a/up", b"top"), ("a/dirlink/f.txt", b"0123456789"), ("chain1", b"0123456789"), ("abs", b"top"),
    ("absdir/b/f.txt", b"0123456789"), ("a/b/../../top.txt", b"top"), ("a/dirlink/../up", b"top"),
])
def test_paths_inside_the_workspace_are_read(ws, path, content):
    assert _read(ws, path) == (content, len(content), False)


def test_absolute_paths_under_the_root_are_accepted(ws):
    assert _read(ws, str(ws / "top.txt"))[0] == b"top"


@pytest.mark.parametrize(("path", "code"), [
    ("out", "OUTSIDE_WORKSPACE"), ("out-rel", "OUTSIDE_WORKSPACE"), ("dotdot", "OUTSIDE_WORKSPACE"),
    ("..", "OUTSIDE_WORKSPACE"), ("a/../../secret", "OUTSIDE_WORKSPACE"), ("/etc/passwd", "OUTSIDE_WORKSPACE"),
    ("loop1", "ELOOP"), ("fifo", "NOT_REGULAR"), ("a", "EISDIR"), ("a/dirlink", "EISDIR"), (".", "EISDIR"),
    ("nope", "ENOENT"), ("top.txt/x", "ENOTDIR"), ("a\0b", "EINVAL"),
])
def test_what_is_refused(ws, path, code):
    with pytest.raises(FileError) as info:
        open_in_workspace(str(ws), path)
    assert info.value.code == code


@pytest.mark.parametrize(("max_bytes", "expected"), [
    (0, (b"", 0, True)), (4, (b"0123", 4, True)), (9, (b"012345678", 9, True)), (10, (b"0123456789", 10, False)),
    (64 << 20, (b"0123456789", 10, False)),
])
def test_reads_are_bounded_and_report_truncation(ws, max_bytes, expected):
    assert _read(ws, "a/b/f.txt", max_bytes) == expected


def test_max_bytes_beyond_64_mib_is_refused(ws):
    with pytest.raises(FileError):
        BoundedRead(str(ws), "top.txt", (64 << 20) + 1)


def test_an_empty_file_is_read_and_not_truncated(ws):
    (ws / "empty").write_bytes(b"")
    assert _read(ws, "empty", 0) == (b"", 0, False)


def test_descriptors_are_not_leaked(ws):
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(FileError):
            open_in_workspace(str(ws), "a/b/../dirlink/../../out")
        BoundedRead(str(ws), "rel", 5).close()
        _read(ws, "chain1")
    assert len(os.listdir("/proc/self/fd")) == before
