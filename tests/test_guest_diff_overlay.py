"""Random file operations in a real overlay give a patch that ``git apply`` turns the base into the workspace with.

Each example mounts a fresh overlay (``redirect_dir=off,metacopy=off``, as a box does), runs a random sequence of
creates, edits, chmods, deletes, directory removals and re-creations, symlinks, renames and type changes through
the merged view, and checks that:

- the patch is the same whether the opaque directories are found through xattrs or through the merged view
  (what an unprivileged guest, which cannot read ``trusted.*``, must rely on), and after unmounting;
- applied with ``git apply`` (empty HOME, no system or global config) to a fresh ``git init`` copy of the base, it
  reproduces the merged workspace exactly: paths, content, execute bit and symlink targets.
"""

from __future__ import annotations

import errno
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
from tkbox_guest import diff

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("git") is None,
                                reason="needs root (overlay mounts) and git")

NAMES = ["a", "b.txt", "sp ace", "ünï", 'q"t', "tab\tx", "back\\s", "-d", "n"]
_lines = st.lists(st.sampled_from([b"x\n", b"y\n", b"zz", b"\r\n", "é\n".encode(), b"\n", b"long line " * 5 + b"\n"]),
                  max_size=40).map(b"".join)
CONTENT = st.one_of(st.just(b""), _lines, st.binary(max_size=200), st.just(b"\xff\xfe text\n"),
                    st.builds(lambda n: b"line\n" * n + b"\0", st.integers(0, 3000)))
TARGETS = st.one_of(st.sampled_from(NAMES), st.sampled_from(["../a", "/etc/passwd", "a/b c", "nowhere", "."]))


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


def build_base(root: Path, data: st.DataObject) -> None:
    for _ in range(data.draw(st.integers(0, 12), label="base entries")):
        dirs, _, _ = _listing(root)
        parent = data.draw(st.sampled_from(dirs))
        path = parent / data.draw(st.sampled_from(NAMES))
        if os.path.lexists(path):
            continue
        kind = data.draw(st.sampled_from(["file", "file", "dir", "link"]))
        if kind == "file":
            _write(path, data.draw(CONTENT), data.draw(st.sampled_from([0o644, 0o755])))
        elif kind == "dir":
            path.mkdir()
        else:
            path.symlink_to(data.draw(TARGETS))
            try:
                path.stat()
            except OSError as exc:
                # git apply cannot create a path below a symlink loop it is deleting (lstat gives ELOOP, which
                # it does not take for "missing"): a git limitation, so the base holds no loops.
                if exc.errno == errno.ELOOP:
                    path.unlink()


def _free_name(parent: Path, data: st.DataObject) -> Path | None:
    path = parent / data.draw(st.sampled_from(NAMES))
    return None if os.path.lexists(path) else path


def random_op(root: Path, data: st.DataObject) -> None:
    dirs, files, links = _listing(root)
    subdirs = dirs[1:]
    op = data.draw(st.sampled_from(["create", "modify", "append", "chmod", "delete", "mkdir", "rmtree",
                                    "recreate_dir", "symlink", "rename", "file_to_dir", "dir_to_file",
                                    "link_to_file"]), label="op")
    pick = lambda items: data.draw(st.sampled_from(items))  # noqa: E731
    if op == "create":
        path = _free_name(pick(dirs), data)
        if path is not None:
            _write(path, data.draw(CONTENT), pick([0o644, 0o755]))
    elif op in ("modify", "append", "chmod") and files:
        path = pick(files)
        if op == "modify":
            path.write_bytes(data.draw(CONTENT))
        elif op == "append":
            with path.open("ab") as handle:
                handle.write(data.draw(CONTENT))
        else:
            path.chmod(pick([0o644, 0o755, 0o600, 0o700, 0o744]))
    elif op == "delete" and (files or links):
        pick(files + links).unlink()
    elif op == "mkdir":
        path = _free_name(pick(dirs), data)
        if path is not None:
            path.mkdir()
    elif op == "rmtree" and subdirs:
        shutil.rmtree(pick(subdirs))
    elif op == "recreate_dir" and subdirs:
        path = pick(subdirs)
        old_names = sorted(os.listdir(path))
        shutil.rmtree(path)
        path.mkdir()
        if old_names and data.draw(st.booleans()):
            _write(path / pick(old_names), data.draw(CONTENT), 0o644)
    elif op == "symlink":
        path = _free_name(pick(dirs), data)
        if path is not None:
            path.symlink_to(data.draw(TARGETS))
    elif op == "rename" and (files or links or subdirs):
        source = pick(files + links + subdirs)
        dest = _free_name(pick(dirs), data)
        if dest is not None and not str(dest).startswith(str(source) + "/"):
            shutil.move(str(source), str(dest))  # a lower directory gives EXDEV: copy, then delete (like mv)
    elif op == "file_to_dir" and files:
        path = pick(files)
        path.unlink()
        path.mkdir()
        _write(path / pick(NAMES), data.draw(CONTENT), 0o644)
    elif op == "dir_to_file" and subdirs:
        path = pick(subdirs)
        shutil.rmtree(path)
        _write(path, data.draw(CONTENT), pick([0o644, 0o755]))
    elif op == "link_to_file" and links:
        path = pick(links)
        path.unlink()
        _write(path, data.draw(CONTENT), 0o644)


def _mount(lower: Path, upper: Path, work: Path, merged: Path) -> None:
    opts = f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=off,metacopy=off"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(merged)], check=True)


@settings(max_examples=max(20, settings.default.max_examples // 2), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_overlay_changes_patch_back_exactly(data):
    top = Path(tempfile.mkdtemp(prefix="tkg-ov-"))
    lower, upper, work, merged = (top / n for n in ("lower", "upper", "work", "merged"))
    for d in (lower, upper, work, merged):
        d.mkdir()
    mounted = False
    try:
        build_base(lower, data)
        _mount(lower, upper, work, merged)
        mounted = True
        for _ in range(data.draw(st.integers(1, 12), label="ops")):
            random_op(merged, data)
        expected = tree(merged)
        with_merged = diff.make_patch(upper, lower, merged)
        with mock.patch.object(diff, "_xattr_opaque", return_value=False):
            without_xattrs = diff.make_patch(upper, lower, merged)
        subprocess.run(["umount", str(merged)], check=True)
        mounted = False
        unmounted = diff.make_patch(upper, lower)
        assert with_merged == without_xattrs == unmounted
        apply_patch(lower, with_merged, top / "applied", drop_empty_dirs=True)
        assert tree(top / "applied") == expected
    finally:
        if mounted:
            subprocess.run(["umount", str(merged)], check=False)
        shutil.rmtree(top, ignore_errors=True)
