"""A linked base (hard links to the checkout's files, no bytes copied): what it holds, what it never holds, the patch
made over it, and its removal in the background (finished by a restart)."""

from __future__ import annotations

import errno
import io
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.daemon_harness import make_workspace
from tests.restart_harness import daemon_lives, die
from tkbox_daemon.box import workspace
from tkbox_daemon.box.workspace import build_base
from tkbox_daemon.boxes.layer_reaper import LayerReaper
from tkbox_daemon.boxes.layers import TRASH_DIR, BoxLayers
from tkbox_daemon.patch import PatchError, compute_patch

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="trusted xattrs (the host patch) and chown need root")


def _checkout(root: Path) -> Path:
    checkout = root / "checkout"
    (checkout / "src").mkdir(parents=True)
    (checkout / "src" / "a.py").write_text("a = 1\n")
    (checkout / "README").write_text("readme\n")
    (checkout / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(checkout / "run.sh", 0o755)
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)  # its files untracked: listed all the same
    (checkout / ".env").write_text("TOKEN=secret\n")
    (checkout / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (checkout / "tool").write_text("#!/bin/sh\n")
    os.chmod(checkout / "tool", 0o4755)
    os.symlink("src/a.py", checkout / "link")
    an_hour_ago = time.time() - 3600  # a checkout made before the box, as checkouts are
    for path in checkout.rglob("*"):
        os.utime(path, (an_hour_ago, an_hour_ago), follow_symlinks=False)
    return checkout


def _names(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def test_a_linked_base_holds_the_checkouts_own_files_and_never_git_credentials_or_set_id_bits(tmp_path):
    checkout = _checkout(tmp_path)
    summary = build_base(checkout, tmp_path / "base", box_uid=None, link=True)
    base = tmp_path / "base"
    assert _names(base) == {"src", "src/a.py", "README", "run.sh", "tool", "link"}
    for name in ("src/a.py", "README", "run.sh"):  # the very inode: no byte copied
        assert os.stat(base / name).st_ino == os.stat(checkout / name).st_ino
    assert stat.S_IMODE(os.stat(base / "run.sh").st_mode) == 0o755
    tool = os.stat(base / "tool")  # a set-id file is copied, without its bit (a link would keep it)
    assert tool.st_ino != os.stat(checkout / "tool").st_ino and stat.S_IMODE(tool.st_mode) == 0o755
    assert os.readlink(base / "link") == "src/a.py"
    assert (summary["method"], summary["files"], summary["linked"], summary["symlinks"]) == ("link", 5, 3, 1)
    assert {entry["path"] for entry in summary["excluded"]} == {".env", "id_rsa"}  # git never lists .git


def test_files_made_in_the_checkout_after_the_base_never_appear_in_it(tmp_path):
    checkout = _checkout(tmp_path)
    build_base(checkout, tmp_path / "base", box_uid=None, link=True)
    (checkout / ".env.production").write_text("TOKEN=later\n")
    (checkout / "src" / "later.py").write_text("later = 1\n")
    (checkout / "newdir").mkdir()
    (checkout / "newdir" / "id_ed25519").write_text("key\n")
    assert _names(tmp_path / "base") == {"src", "src/a.py", "README", "run.sh", "tool", "link"}


@needs_root
def test_what_the_base_makes_itself_is_the_checkout_owners_so_one_view_maps_it_all(tmp_path):
    checkout = _checkout(tmp_path)
    shutil.rmtree(checkout / ".git")  # a plain directory: git would run as 4242, who cannot reach tmp_path
    for path in [checkout, *checkout.rglob("*")]:
        os.chown(path, 4242, 4343, follow_symlinks=False)
    summary = build_base(checkout, tmp_path / "base", box_uid=100_321, link=True)
    base = tmp_path / "base"
    owners = {name: (os.lstat(base / name).st_uid, os.lstat(base / name).st_gid) for name in _names(base)}
    assert set(owners.values()) == {(4242, 4343)} and summary["owner"] == [4242, 4343]
    assert (os.stat(base).st_uid, os.stat(base).st_gid) == (4242, 4343)


def test_a_file_the_file_system_will_not_link_is_copied(tmp_path, monkeypatch):
    checkout = _checkout(tmp_path)
    real_link = os.link

    def link(source, target, **kwargs):
        if source == "README":
            raise OSError(errno.EXDEV, "cross-device link")
        return real_link(source, target, **kwargs)

    monkeypatch.setattr(workspace.os, "link", link)
    summary = build_base(checkout, tmp_path / "base", box_uid=None, link=True)
    copied = tmp_path / "base" / "README"
    assert copied.read_text() == "readme\n" and copied.stat().st_ino != (checkout / "README").stat().st_ino
    assert (summary["files"], summary["linked"]) == (5, 2)


def _patch(upper: Path, lower: Path, linked_at: int | None) -> bytes:
    out = io.BytesIO()
    compute_patch(upper, lower, out, linked_at=linked_at)
    return out.getvalue()


@needs_root
def test_the_patch_over_a_linked_base_is_exactly_the_jobs_changes_and_never_the_users_later_edits(tmp_path):
    checkout = _checkout(tmp_path)
    base, upper = tmp_path / "base", tmp_path / "upper"
    linked_at = time.time_ns()
    build_base(checkout, base, box_uid=None, link=True)
    upper.mkdir()
    assert _patch(upper, base, linked_at) == b""

    (checkout / "README").write_text("the user's edit, in place, after the box started\n")  # the box left it alone
    assert _patch(upper, base, linked_at) == b""  # not the box's change

    (upper / "src").mkdir()  # the job's change, as the overlay's copy-up leaves it
    (upper / "src" / "a.py").write_text("a = 2\n")
    patch = _patch(upper, base, linked_at)
    assert b"-a = 1\n+a = 2\n" in patch and b"README" not in patch

    (checkout / "src" / "a.py").write_text("a = 1  # the user's edit after the job's\n")  # in place: shared inode
    with pytest.raises(PatchError, match=r"src/a\.py was changed in the checkout after the box started"):
        _patch(upper, base, linked_at)


@needs_root
def test_a_user_edit_that_replaces_the_file_leaves_the_base_as_it_was(tmp_path):
    checkout = _checkout(tmp_path)
    base, upper = tmp_path / "base", tmp_path / "upper"
    linked_at = time.time_ns()
    build_base(checkout, base, box_uid=None, link=True)
    (upper / "src").mkdir(parents=True)
    (upper / "src" / "a.py").write_text("a = 2\n")
    replacement = checkout / "src" / "a.py.new"  # an editor's save: a new file renamed over the old
    replacement.write_text("a = 3\n")
    replacement.rename(checkout / "src" / "a.py")
    assert (base / "src" / "a.py").read_text() == "a = 1\n"
    assert b"-a = 1\n+a = 2\n" in _patch(upper, base, linked_at)


def test_removal_moves_the_layers_to_the_trash_at_once_and_the_reaper_deletes_them_leaving_the_checkout(tmp_path):
    checkout = _checkout(tmp_path)
    root = tmp_path / "layers-root"
    root.mkdir(mode=0o700)
    layers = BoxLayers(root / "0123456789ab")
    layers.make_root()
    layers.start(None)
    layers.prepare(checkout, job_uid=os.geteuid(), max_files=100, max_bytes=1 << 20)
    (layers.private / "linked").mkdir()
    os.link(checkout / "README", layers.private / "linked" / "README")  # as a linked base holds it

    moved = layers.remove()
    assert not layers.root.exists() and moved is not None and moved.parent == root / TRASH_DIR
    assert stat.S_IMODE(os.stat(root / TRASH_DIR).st_mode) == 0o700
    reaper = LayerReaper(root)
    reaper.sweep()
    assert reaper.wait(60) and reaper.pending() == [] and reaper.failures == {}
    assert (checkout / "README").read_text() == "readme\n" and os.stat(checkout / "README").st_nlink == 1
    reaper.close()


async def test_rm_returns_before_the_layers_are_deleted_and_a_restart_deletes_what_was_left(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            await client.create_box({"name": "gone", "workspace": str(make_workspace(tmp_path))})
            layers_dir = first.manager.get("gone").layers_dir
            reaper = first.manager.layer_reaper
            reaper.sweep = list  # the daemon dies before its deleters ran: nothing is deleted in this life
            await client.remove_box("gone")
            assert await client.boxes() == [] and not layers_dir.exists()
            [left] = reaper.pending()
            assert left.startswith(layers_dir.name + ".")
            die(first)
        async with lives.life() as second, second.client() as client:
            assert await client.boxes() == []
            assert second.manager.layer_reaper.wait(60)
            assert second.manager.layer_reaper.pending() == []


@needs_root
def test_where_no_idmapped_view_can_be_made_the_base_is_copied_and_the_jobs_own(tmp_path, monkeypatch):
    from tkbox_daemon.box import idmap

    def no_view(*args, **kwargs):
        raise idmap.IdmapError(22, "mount_setattr (idmapped view): Invalid argument")

    monkeypatch.setattr(idmap, "mount_view", no_view)
    checkout = _checkout(tmp_path)
    root = tmp_path / "layers-root"
    root.mkdir(mode=0o700)
    layers = BoxLayers(root / "0123456789ab")
    layers.make_root()
    layers.start(None)
    summary = layers._build_base(checkout, 100_321, 100, 1 << 20, link=True)
    assert summary["method"] == "copy" and "idmapped view could not be made" in summary["fallback"]
    assert layers.lower == layers.base and not layers.view.exists() and layers.linked_at() is None
    readme = layers.base / "README"
    assert readme.stat().st_uid == 100_321 and readme.stat().st_ino != (checkout / "README").stat().st_ino
    assert (checkout / "README").stat().st_nlink == 1  # the links made first were all dropped again


@needs_root
def test_a_linked_base_is_seen_through_its_view_as_the_jobs_and_the_view_goes_with_the_disk(tmp_path):
    checkout = _checkout(tmp_path)
    root = tmp_path / "layers-root"
    root.mkdir(mode=0o700)
    layers = BoxLayers(root / "0123456789ab")
    layers.make_root()
    layers.start(None)
    summary = layers._build_base(checkout, 100_321, 100, 1 << 20, link=True)
    try:
        assert summary["method"] == "link" and layers.lower == layers.view and layers.linked_at() is not None
        seen = os.stat(layers.view / "README")
        assert seen.st_uid == 100_321 and seen.st_ino == os.stat(checkout / "README").st_ino
        with pytest.raises(OSError) as refused:
            (layers.view / "README").write_text("through the view")
        assert refused.value.errno == errno.EROFS
    finally:
        layers.release_disk()
    assert layers.lower == layers.base
    assert layers.remove() is not None and (checkout / "README").read_text() == "readme\n"
