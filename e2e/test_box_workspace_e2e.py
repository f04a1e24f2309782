"""A real box's linked base, end to end on both backends: hard links to the checkout's files, seen through an
idmapped read-only view, under the workspace overlay.

- No path the box has changes the base, nor the user's file behind a link: the guest (in-box root with its
  capabilities) and the job try write, append, truncate, chmod (set-id), chown, utime, xattr and unlink on every
  file, through ``/run/tkbox/base`` and ``/workspace``; the checkout's files keep their bytes, mode, owner and
  mtime (writes through ``/workspace`` land in the box's own copy).
- The box sees the checkout as it was at start, less ``.git`` and credential files: nothing made in the checkout
  later (a credential file included) appears; a file only the user may read is the job's to read.
- The patch is exactly the job's changes: the user's later edit to a file the box left alone is not in it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from box_lab import BoxLab, require_backend

from e2e.daemon_process import daemon_process, events, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tkbox_daemon.box.bwrap import BwrapBackend
from tkbox_daemon.box.idmap import unmount_view
from tkbox_daemon.box.nslauncher import NsBackend
from tkbox_daemon.box.uids import UidAllocator

pytestmark = pytest.mark.e2e

BOX_UIDS_HOLDER = "e2e-workspace"


@pytest.fixture
def signer():
    tkbox("signer", "up")
    yield
    tkbox("signer", "down", check=False)


@pytest.fixture(params=["bwrap", "ns"])
def backend_name(request):
    require_backend(request.param)
    return request.param


def _snapshot(checkout: Path) -> dict[str, tuple]:
    return {path.name: (path.read_bytes(), stat.S_IMODE(path.stat().st_mode), path.stat().st_uid,
                        path.stat().st_gid, path.stat().st_mtime_ns)
            for path in checkout.iterdir() if path.is_file()}


async def test_nothing_in_the_box_changes_the_base_or_the_users_files_behind_it(backend_name):
    from box_lab import UID_REGISTRY

    allocator = UidAllocator(UID_REGISTRY)
    box_id = f"{BOX_UIDS_HOLDER}-{os.getpid()}-{os.urandom(3).hex()}"
    uids = (allocator.allocate(box_id), allocator.allocate(box_id))
    lab_dir = Path(tempfile.mkdtemp(prefix="tkb-", dir="/tmp"))
    os.chmod(lab_dir, 0o755)
    checkout = lab_dir / "checkout"
    checkout.mkdir()
    (checkout / "hello.txt").write_text("hello from the host")
    (checkout / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(checkout / "run.sh", 0o755)
    (checkout / "private.txt").write_text("only the owner reads this\n")
    os.chmod(checkout / "private.txt", 0o600)
    before = _snapshot(checkout)
    backend = BwrapBackend() if backend_name == "bwrap" else NsBackend()
    try:
        lab = BoxLab(lab_dir, backend, uids, checkout=checkout, link=True)
        assert os.stat(lab.layers / "base" / "hello.txt").st_ino == os.stat(checkout / "hello.txt").st_ino
        async with lab.run(["base_attacks", "workspace"], {"as_guest": ["base_attacks"]}) as run:
            results = run.results
        for who in ("as_guest", "as_job"):
            attacks = results["as_guest"]["base_attacks"] if who == "as_guest" else results["base_attacks"]
            through_base = {path: tried for path, tried in attacks.items() if path.startswith("/run/tkbox/base/")}
            assert set(through_base) == {f"/run/tkbox/base/{name}" for name in before}, who
            assert all(outcome != "ok" for tried in through_base.values() for outcome in tried.values()), (who,
                                                                                                            attacks)
        through_workspace = [outcome for attacks in (results["base_attacks"], results["as_guest"]["base_attacks"])
                             for path, tried in attacks.items() if path.startswith("/workspace/")
                             for outcome in tried.values()]
        assert "ok" in through_workspace  # some went through: into the box's own copy, never the checkout
        assert _snapshot(checkout) == before  # bytes, mode, owner and mtime: all as they were
        assert {path.name for path in (lab.layers / "base").iterdir()} == set(before)
    finally:
        unmount_view(lab_dir / "layers" / "view", lab_dir / "layers" / "base")
        shutil.rmtree(lab_dir, ignore_errors=True)
        for uid in uids:
            allocator.release(uid, box_id)


def _exec(box: str, script: str) -> str:
    result = subprocess.run([TKBOX, "exec", box, "--", "sh", "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("start_ahead", ["1", "0"])
def test_the_box_sees_the_checkout_as_at_start_and_its_patch_is_only_its_own(signer, tmp_path, backend_name,
                                                                              start_ahead):
    """Both ways a box starts: taken from the boxes started ahead (its workspace attached in the running box,
    ``boxes/pool.py``; bwrap only) and cold."""
    checkout = make_checkout(tmp_path)  # tracked.txt, .gitignore, an ignored .env, untracked.txt
    (checkout / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (checkout / "private.txt").write_text("the user's eyes only\n")
    os.chmod(checkout / "private.txt", 0o600)
    with daemon_process("--start-ahead", start_ahead, backend=backend_name):
        tkbox_json("run", "--name", "ws", "--workspace", str(checkout))
        created = [event for event in events("ws") if event["kind"] == "box.created"]
        assert created[0]["data"]["started_ahead"] is (start_ahead == "1" and backend_name == "bwrap")
        (checkout / ".env.local").write_text("TOKEN=made-after-start\n")
        (checkout / "later.txt").write_text("made after start\n")
        (checkout / "sub").mkdir()
        (checkout / "sub" / "id_ed25519").write_text("key made after start\n")
        listing = _exec("ws", "cd /workspace && find . -mindepth 1 | sort").split()
        assert listing == ["./.gitignore", "./private.txt", "./tracked.txt", "./untracked.txt"]
        assert _exec("ws", "cat /workspace/private.txt && stat -c %u /workspace/private.txt").split("\n")[:2] == [
            "the user's eyes only", "1000"]

        _exec("ws", "echo 'changed by the job' >> /workspace/untracked.txt")
        with open(checkout / "tracked.txt", "a") as handle:  # the user's edit, in place, to a file the box left alone
            handle.write("the user's own later line\n")
        diff = tkbox("diff", "ws").stdout
        assert [line for line in diff.splitlines() if line.startswith("diff --git")] == [
            "diff --git a/untracked.txt b/untracked.txt"]
        assert "+changed by the job" in diff and "user's own" not in diff
        assert (checkout / "untracked.txt").read_text() == "untracked\n"  # the job's write went to its own copy

        tkbox("rm", "ws")
        assert tkbox_json("ls") == []
    assert (checkout / "tracked.txt").read_text() == "tracked\nthe user's own later line\n"
