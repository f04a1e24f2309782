"""The host's patch over an upper layer a hostile box prepared: each trick gives its documented result, and nothing
outside the layers is opened or read (inotify watches on a canary directory next to them say so).

Documented results (docs/guest.md, "The patch is the host's"): a symlink is recorded as a symlink (its target is
text, never followed); fifos, sockets and devices other than 0/0 are "no file" and never opened; a 0/0 device is a
whiteout; anything swapped or rewritten while the patch is made is a ``PatchError``; past a bound,
``PatchLimitExceeded`` naming the bound, and no patch file is left.
"""

from __future__ import annotations

import collections
import io
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from unittest import mock

import pytest

from tests.inotify_watch import Watch
from tkbox_daemon.patch import PatchError, PatchLimitExceeded, compute_patch
from tkbox_guest import diff, layers

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (trusted xattrs, device nodes)")

SECRET = b"canary: the host must never read this\n"


@pytest.fixture
def box(tmp_path):
    """(lower, upper, watch) with a canary directory beside the layers, watched for opens and reads."""
    lower, upper, outside = tmp_path / "lower", tmp_path / "upper", tmp_path / "outside"
    for path in (lower, upper, outside, outside / "sub"):
        path.mkdir()
    (outside / "canary").write_bytes(SECRET)
    (outside / "sub" / "f").write_bytes(SECRET)
    (lower / "keep").write_text("kept\n")
    with Watch(outside, outside / "canary", outside / "sub", outside / "sub" / "f") as watch:
        yield lower, upper, watch
        assert watch.events() == [], "something outside the layers was opened or read"


def host_patch(lower: Path, upper: Path, **bounds) -> bytes:
    out = io.BytesIO()
    compute_patch(upper, lower, out, **bounds)
    return out.getvalue()


def test_a_symlink_where_a_directory_was_is_a_symlink_not_the_directory_it_names(box, tmp_path):
    lower, upper, _ = box
    (lower / "dir").mkdir()
    (lower / "dir" / "f").write_text("f\n")
    (upper / "dir").symlink_to("/etc")
    (upper / "into-canary").symlink_to(tmp_path / "outside")
    patch = host_patch(lower, upper)
    assert b"diff --git a/dir/f b/dir/f\ndeleted file mode 100644\n" in patch
    assert b"diff --git a/dir b/dir\nnew file mode 120000\n" in patch and b"+/etc\n\\ No newline" in patch
    assert b"passwd" not in patch and SECRET not in patch


def test_a_symlink_to_a_host_file_is_recorded_by_its_target(box, tmp_path):
    lower, upper, _ = box
    (lower / "f").write_text("f\n")
    (upper / "f").symlink_to(tmp_path / "outside" / "canary")
    (upper / "g").symlink_to("/etc/shadow")
    patch = host_patch(lower, upper)
    assert b"a/f b/f\ndeleted file mode 100644\n" in patch and b"a/f b/f\nnew file mode 120000\n" in patch
    assert os.fsencode(tmp_path / "outside" / "canary") in patch and SECRET not in patch


def test_fifos_sockets_and_devices_are_no_file_and_never_opened(box):
    lower, upper, _ = box
    (lower / "was-file").write_text("x\n")
    os.mkfifo(upper / "was-file")  # the lower file is gone: a fifo is nothing git records
    os.mkfifo(upper / "new-fifo")
    os.mknod(upper / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    os.mknod(upper / "block", stat.S_IFBLK | 0o600, os.makedev(7, 0))
    with Watch(upper / "was-file", upper / "new-fifo", upper / "zero", upper / "block") as specials:
        patch = host_patch(lower, upper)
        assert specials.events() == []
    assert patch == (b"diff --git a/was-file b/was-file\ndeleted file mode 100644\n"
                     b"index 587be6b4c3f93f93c489c0111bba5596147a26cb..0000000000000000000000000000000000000000\n"
                     b"--- a/was-file\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n")


def test_a_device_whiteout_deletes_what_it_covers(box):
    lower, upper, _ = box
    (lower / "d" / "sub").mkdir(parents=True)
    (lower / "d" / "sub" / "f").write_text("f\n")
    (lower / "g").write_text("g\n")
    os.mknod(upper / "d", stat.S_IFCHR, os.makedev(0, 0))
    os.mknod(upper / "g", stat.S_IFCHR, os.makedev(0, 0))
    with Watch(upper / "d", upper / "g") as whiteouts:
        patch = host_patch(lower, upper)
        assert whiteouts.events() == []
    assert patch.count(b"deleted file mode 100644") == 2 and b"a/d/sub/f" in patch and b"a/g" in patch


def test_symlink_loops_are_recorded_as_symlinks(box):
    lower, upper, _ = box
    (lower / "d").mkdir()
    (lower / "d" / "f").write_text("f\n")
    (upper / "d").mkdir()
    (upper / "d" / "up").symlink_to("..")
    (upper / "self").symlink_to("self")
    (upper / "ping").symlink_to("pong")
    (upper / "pong").symlink_to("ping")
    patch = host_patch(lower, upper)
    assert patch.count(b"new file mode 120000") == 4 and b"deleted" not in patch
    for target in (b"+..\n", b"+self\n", b"+pong\n", b"+ping\n"):
        assert target in patch


def _swap_before_open(path: Path, swap):
    """Layer.open_file, but ``swap()`` runs just before it opens ``path`` (between the walk and the read)."""
    real = layers.Layer.open_file

    def open_file(self, rel, expected):
        if Path(os.fsdecode(self.root), os.fsdecode(rel)) == path:
            swap()
        return real(self, rel, expected)

    return mock.patch.object(layers.Layer, "open_file", open_file)


def test_a_file_swapped_for_a_symlink_between_walk_and_read_is_an_error(box, tmp_path):
    lower, upper, _ = box
    (upper / "f").write_text("innocent\n")

    def swap():
        (upper / "f").unlink()
        (upper / "f").symlink_to(tmp_path / "outside" / "canary")

    with _swap_before_open(upper / "f", swap), pytest.raises(PatchError, match="f changed while the patch was made"):
        host_patch(lower, upper)


def test_a_directory_swapped_for_a_symlink_between_walk_and_read_is_an_error(box, tmp_path):
    lower, upper, _ = box
    (upper / "sub").mkdir()
    (upper / "sub" / "f").write_text("innocent\n")

    def swap():
        (upper / "sub").rename(upper / "sub-moved")
        (upper / "sub").symlink_to(tmp_path / "outside" / "sub")  # holds an "f" too

    with _swap_before_open(upper / "sub" / "f", swap), pytest.raises(PatchError, match="sub/f changed"):
        host_patch(lower, upper)


def test_a_file_replaced_by_another_of_the_same_size_is_an_error(box):
    lower, upper, _ = box
    (upper / "f").write_text("first\n")

    def swap():
        (upper / "g").write_text("other\n")
        (upper / "g").rename(upper / "f")

    with _swap_before_open(upper / "f", swap), pytest.raises(PatchError, match="f changed while the patch was made"):
        host_patch(lower, upper)


def test_a_file_rewritten_in_place_while_read_is_an_error(box):
    lower, upper, _ = box
    (upper / "f").write_bytes(b"a" * 100)
    real_read = os.read

    def read(fd, count):
        chunk = real_read(fd, count)
        if stat.S_ISREG(os.fstat(fd).st_mode) and chunk.startswith(b"a"):
            with open(upper / "f", "r+b") as handle:  # same size, new bytes, mid-read
                handle.write(b"b" * 100)
        return chunk

    with mock.patch.object(diff, "READ_CHUNK", 10), mock.patch.object(os, "read", read), \
            pytest.raises(PatchError, match="f changed while the patch was made"):
        host_patch(lower, upper)


def test_a_file_and_a_symlink_swapping_all_the_time_give_a_true_patch_or_an_error(box, tmp_path):
    lower, upper, _ = box
    (upper / "f").write_text("innocent\n")
    stop = threading.Event()

    staging = tmp_path / "staging"  # beside the layers, on the same filesystem: renames into upper are atomic
    staging.mkdir()

    def swapper():
        link, plain = staging / "link", staging / "plain"
        while not stop.is_set():
            link.symlink_to(tmp_path / "outside" / "canary")
            link.rename(upper / "f")
            plain.write_text("innocent\n")
            plain.rename(upper / "f")

    thread = threading.Thread(target=swapper)
    thread.start()
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        for _ in range(200):
            try:
                patch = host_patch(lower, upper)
            except PatchError:
                outcomes["error"] += 1
                continue
            assert SECRET not in patch
            as_file = b"new file mode 100644\n" in patch and b"+innocent\n" in patch
            as_link = b"new file mode 120000\n" in patch and os.fsencode(tmp_path / "outside" / "canary") in patch
            assert as_file != as_link, patch  # one moment's f, whole: the file or the symlink
            outcomes["link" if as_link else "file"] += 1
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    # Each run ended with one moment's f (file or symlink, whole) or a PatchError; the canary watch checks the rest.
    assert sum(outcomes.values()) == 200 and set(outcomes) <= {"file", "link", "error"}


def test_a_huge_sparse_file_is_refused_before_it_is_read(box, tmp_path):
    lower, upper, _ = box
    with open(upper / "sparse", "wb") as handle:
        handle.truncate(1 << 40)
    out = tmp_path / "patch.diff"
    with Watch(upper / "sparse") as sparse:
        with pytest.raises(PatchLimitExceeded) as refused:
            compute_patch(upper, lower, out)
        assert sparse.events() == []
    assert refused.value.limit == "content_bytes" and "sparse" in str(refused.value)
    assert not out.exists() and not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_too_many_entries_are_refused(box):
    lower, upper, _ = box
    for index in range(100):
        (upper / f"f{index}").write_text("x\n")
    assert host_patch(lower, upper, max_entries=102).count(b"new file mode") == 100
    with pytest.raises(PatchLimitExceeded) as refused:
        host_patch(lower, upper, max_entries=60)
    assert refused.value.limit == "entries"


def test_a_tree_deeper_than_the_bound_is_refused_not_a_recursion_error(box):
    lower, upper, _ = box
    fd = os.open(upper, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(600):  # deeper than Python's recursion limit would allow
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    with pytest.raises(PatchLimitExceeded) as refused:
        host_patch(lower, upper)
    assert refused.value.limit == "depth"
    with pytest.raises(PatchLimitExceeded, match="deeper than 5"):
        host_patch(lower, upper, max_depth=5)


def test_a_patch_over_its_size_bound_is_refused_and_leaves_no_file(box, tmp_path):
    lower, upper, _ = box
    (upper / "big").write_bytes(os.urandom(4096))
    out = tmp_path / "patch.diff"
    with pytest.raises(PatchLimitExceeded) as refused:
        compute_patch(upper, lower, out, max_bytes=1000)
    assert refused.value.limit == "patch_size" and "limit patch_size" in str(refused.value)
    assert not out.exists() and not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
    compute_patch(upper, lower, out, max_bytes=10_000)
    assert out.read_bytes().startswith(b"diff --git a/big b/big\n")


def test_a_passed_deadline_stops_the_walk(box):
    lower, upper, _ = box
    (upper / "f").write_text("x\n")
    with pytest.raises(PatchLimitExceeded) as refused:
        host_patch(lower, upper, deadline=100.0, clock=lambda: 101.0)
    assert refused.value.limit == "deadline"


def test_layer_roots_that_are_symlinks_are_refused(box, tmp_path):
    lower, upper, _ = box
    (tmp_path / "upper-link").symlink_to(tmp_path / "outside")
    with pytest.raises(PatchError, match="cannot open a layer"):
        host_patch(lower, tmp_path / "upper-link")


def test_names_in_errors_are_escaped(box):
    lower, upper, _ = box
    name = "evil\x1b[2J\nname"
    (upper / name).write_text("x\n")

    def swap():
        (upper / name).unlink()

    with _swap_before_open(upper / name, swap), pytest.raises(PatchError) as refused:
        host_patch(lower, upper)
    assert "\x1b" not in str(refused.value) and "\n" not in str(refused.value)
    assert "evil\\x1b[2J\\nname changed" in str(refused.value)


def test_without_cap_sys_admin_the_host_refuses_rather_than_miss_opaque_directories(tmp_path):
    code = ("import io, os, sys\n"
            "from tkbox_daemon.patch import PatchError, compute_patch\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "try:\n    compute_patch(sys.argv[1], sys.argv[1], io.BytesIO())\n"
            "except PatchError as exc:\n    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert "needs CAP_SYS_ADMIN" in result.stdout, result.stderr
