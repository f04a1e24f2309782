"""The host's patch, made from the upper and lower layers alone, is byte for byte the guest's, and git applies it.

Each example mounts a fresh overlay as a box does (``redirect_dir=off,metacopy=off,index=off``), builds a random
base, and runs random operations through the merged view: adds, edits, appends, deletes, renames of files and
directories, ``chmod`` with and without the owner's execute bit, symlinks (dangling, absolute, looping), type
changes both ways, directories removed and made again (opaque), binary and non-UTF-8 content, names with spaces,
newlines, quotes, tabs, non-ASCII and non-UTF-8 bytes. Then:

- the host's patch (``compute_patch``: no merged view, ``trusted.overlay.opaque`` read as root) equals what the
  guest's ``iter_patch`` writes with the merged view, both as an unprivileged guest (no xattrs, merged view only)
  and with every xattr readable; again after unmounting;
- the host's file list is the guest's summaries, its size and sha256 are those of the bytes, and the guest's own
  claim passes ``check_guest_claim``;
- ``git apply`` of the host's patch to a fresh ``git init`` copy of the base gives exactly the merged tree.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.git_worktree import apply_patch, tree
from tkbox_daemon.patch import check_guest_claim, compute_patch
from tkbox_guest import agent, diff

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("git") is None,
                                reason="needs root (overlay mounts, trusted xattrs) and git")

NAMES = ["a", "b.txt", "sp ace", "ünï", "new\nline", os.fsdecode(b"bad\xff\xfeutf8"), 'q"t', "tab\tx", "-d", "n"]
_lines = st.lists(st.sampled_from([b"x\n", b"y\n", b"zz", b"\r\n", "é\n".encode(), b"\n", b"def f():\n",
                                   b"long line " * 5 + b"\n"]), max_size=40).map(b"".join)
CONTENT = st.one_of(st.just(b""), _lines, st.binary(max_size=200), st.just(b"\xff\xfe latin-1 \xe9\n"),
                    st.builds(lambda n: b"line\n" * n + b"\0", st.integers(0, 3000)))
TARGETS = st.one_of(st.sampled_from(NAMES), st.sampled_from(["../a", "/etc/passwd", "a/b c", "nowhere", ".", ".."]))
OPS = ["create", "modify", "append", "chmod", "delete", "mkdir", "rmtree", "recreate_dir", "symlink", "rename",
       "file_to_dir", "dir_to_file", "link_to_file", "file_to_link"]


def _listing(root: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """(directories including root, regular files, symlinks) under root, not following symlinks."""
    dirs, files, links = [root], [], []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                links.append(path)
            elif stat.S_ISDIR(mode):
                dirs.append(path)
            elif stat.S_ISREG(mode):
                files.append(path)
    return sorted(dirs), sorted(files), sorted(links)


def _write(path: Path, content: bytes, mode: int) -> None:
    path.write_bytes(content)
    path.chmod(mode)


def _free(parent: Path, draw) -> Path | None:
    path = parent / draw(st.sampled_from(NAMES))
    return None if os.path.lexists(path) else path


def build_base(root: Path, draw) -> None:
    for _ in range(draw(st.integers(0, 12), label="base entries")):
        path = _free(draw(st.sampled_from(_listing(root)[0])), draw)
        if path is None:
            continue
        kind = draw(st.sampled_from(["file", "file", "dir", "link"]))
        if kind == "file":
            _write(path, draw(CONTENT), draw(st.sampled_from([0o644, 0o755])))
        elif kind == "dir":
            path.mkdir()
        else:
            path.symlink_to(draw(TARGETS))
            try:
                path.stat()
            except OSError as exc:  # git apply cannot create a path below a symlink loop it deletes: none in the base
                if exc.errno == errno.ELOOP:
                    path.unlink()


def random_op(root: Path, draw) -> None:
    dirs, files, links = _listing(root)
    subdirs = dirs[1:]
    op = draw(st.sampled_from(OPS), label="op")

    def pick(items):
        return draw(st.sampled_from(items))

    if op == "create" and (path := _free(pick(dirs), draw)) is not None:
        _write(path, draw(CONTENT), pick([0o644, 0o755]))
    elif op in ("modify", "append", "chmod") and files:
        path = pick(files)
        if op == "modify":
            path.write_bytes(draw(CONTENT))
        elif op == "append":
            with path.open("ab") as handle:
                handle.write(draw(CONTENT))
        else:
            path.chmod(pick([0o644, 0o755, 0o600, 0o700, 0o744, 0o664]))
    elif op == "delete" and (files or links):
        pick(files + links).unlink()
    elif op == "mkdir" and (path := _free(pick(dirs), draw)) is not None:
        path.mkdir()
    elif op == "rmtree" and subdirs:
        shutil.rmtree(pick(subdirs))
    elif op == "recreate_dir" and subdirs:  # an opaque directory in the upper layer
        path = pick(subdirs)
        old_names = sorted(os.listdir(path))
        shutil.rmtree(path)
        path.mkdir()
        if old_names and draw(st.booleans()):
            _write(path / pick(old_names), draw(CONTENT), 0o644)
    elif op == "symlink" and (path := _free(pick(dirs), draw)) is not None:
        path.symlink_to(draw(TARGETS))
    elif op == "rename" and (files or links or subdirs):
        source = pick(files + links + subdirs)
        dest = _free(pick(dirs), draw)
        if dest is not None and not str(dest).startswith(str(source) + "/"):
            shutil.move(str(source), str(dest))  # a lower directory gives EXDEV: copy, then delete (like mv)
    elif op == "file_to_dir" and files:
        path = pick(files)
        path.unlink()
        path.mkdir()
        _write(path / pick(NAMES), draw(CONTENT), 0o644)
    elif op == "dir_to_file" and subdirs:
        path = pick(subdirs)
        shutil.rmtree(path)
        _write(path, draw(CONTENT), pick([0o644, 0o755]))
    elif op == "link_to_file" and links:
        path = pick(links)
        path.unlink()
        _write(path, draw(CONTENT), 0o644)
    elif op == "file_to_link" and files:
        path = pick(files)
        path.unlink()
        path.symlink_to(draw(TARGETS))


def _mount(lower: Path, upper: Path, work: Path, merged: Path) -> None:
    opts = f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=off,metacopy=off,index=off"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(merged)], check=True)


def _host(upper: Path, lower: Path):
    out = io.BytesIO()
    summary = compute_patch(upper, lower, out)
    return out.getvalue(), summary


@settings(max_examples=max(20, settings.default.max_examples // 2), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_hosts_patch_is_the_guests_and_applies_to_the_merged_tree(data):
    top = Path(tempfile.mkdtemp(prefix="tkh-ov-"))
    lower, upper, work, merged = (top / n for n in ("lower", "upper", "work", "merged"))
    for d in (lower, upper, work, merged):
        d.mkdir()
    mounted = False
    try:
        build_base(lower, data.draw)
        _mount(lower, upper, work, merged)
        mounted = True
        for _ in range(data.draw(st.integers(1, 14), label="ops")):
            random_op(merged, data.draw)
        expected = tree(merged)
        host, summary = _host(upper, lower)
        guest_summaries: list[dict] = []
        with mock.patch.object(diff, "_xattr_opaque", return_value=False):  # a guest that cannot read trusted.*
            unprivileged = b"".join(diff.iter_patch(upper, lower, merged, guest_summaries))
        assert host == unprivileged
        assert host == diff.make_patch(upper, lower, merged)
        subprocess.run(["umount", str(merged)], check=True)
        mounted = False
        assert _host(upper, lower) == (host, summary)

        assert [entry.guest_entry() for entry in summary.files] == guest_summaries
        assert summary.size == len(host) and summary.sha256 == "sha256:" + hashlib.sha256(host).hexdigest()
        files, truncated = agent.bounded_file_list(guest_summaries)
        check_guest_claim({"size": len(unprivileged), "sha256": summary.sha256, "files": files,
                           "files_truncated": truncated}, unprivileged, summary)

        apply_patch(lower, host, top / "applied", drop_empty_dirs=True)
        assert tree(top / "applied") == expected
    finally:
        if mounted:
            subprocess.run(["umount", str(merged)], check=False)
        shutil.rmtree(top, ignore_errors=True)


def test_an_opaque_xattr_the_box_set_itself_is_ignored_as_the_kernel_ignores_it(tmp_path):
    lower, upper, work, merged = (tmp_path / n for n in ("lower", "upper", "work", "merged"))
    for d in (lower, upper, work, merged):
        d.mkdir()
    (lower / "d").mkdir()
    (lower / "d" / "kept").write_text("kept\n")
    _mount(lower, upper, work, merged)
    try:
        (merged / "d" / "new").write_text("new\n")
        os.setxattr(merged / "d", "user.overlay.opaque", b"y")  # any job may: it is a plain user xattr here
        expected = tree(merged)
    finally:
        subprocess.run(["umount", str(merged)], check=True)
    assert os.getxattr(upper / "d", "user.overlay.opaque") == b"y"
    host, _ = _host(upper, lower)
    assert b"kept" not in host  # the merged view still shows it: not deleted
    apply_patch(lower, host, tmp_path / "applied", drop_empty_dirs=True)
    assert tree(tmp_path / "applied") == expected
