"""The real guest agent process against a test host (``guest_host.GuestHost``): bounded file reads, the patch of a
real overlay (root: it mounts one) and orphan reaping as PID 1 of a pid namespace (root).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

import pytest
from guest_host import GuestHost, shutdown_guest

from tests.git_worktree import apply_patch, tree

pytestmark = pytest.mark.e2e
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (overlay mounts, pid namespaces)")


# -- files ------------------------------------------------------------------------------------------------------


@pytest.fixture
async def files_guest(tmp_path):
    ws = tmp_path / "ws"
    (ws / "dir").mkdir(parents=True)
    (ws / "dir" / "a.txt").write_bytes(b"hello world")
    (ws / "big").write_bytes(bytes(range(256)) * 4096)
    (ws / "link").symlink_to("dir/a.txt")
    (ws / "abs").symlink_to(ws / "dir" / "a.txt")
    (ws / "escape").symlink_to("../outside")
    (tmp_path / "outside").write_text("secret")
    os.mkfifo(ws / "fifo")
    host = await GuestHost(ws).start()
    yield host, ws
    await host.aclose()


async def test_files_reads_bounded_and_reports_truncation(files_guest):
    host, ws = files_guest
    data, response = await host.data_call("files", path="dir/a.txt", max_bytes=1000)
    assert data == b"hello world" and response == {"id": response["id"], "ok": True, "size": 11, "truncated": False}
    data, response = await host.data_call("files", path="big", max_bytes=300_000)
    assert data == (bytes(range(256)) * 4096)[:300_000] and response["truncated"] is True
    data, response = await host.data_call("files", path=str(ws / "link"), max_bytes=5)
    assert data == b"hello" and response["truncated"] is True
    data, _ = await host.data_call("files", path="abs", max_bytes=100)
    assert data == b"hello world"


@pytest.mark.parametrize(("path", "code"), [
    ("escape", "OUTSIDE_WORKSPACE"), ("../outside", "OUTSIDE_WORKSPACE"), ("/etc/passwd", "OUTSIDE_WORKSPACE"),
    ("fifo", "NOT_REGULAR"), ("dir", "EISDIR"), ("missing", "ENOENT"), ("dir/a.txt/x", "ENOTDIR"),
])
async def test_files_refuses_what_is_not_a_regular_file_in_the_workspace(files_guest, path, code):
    host, _ = files_guest
    data, response = await host.data_call("files", path=path, max_bytes=100)
    assert data == b"" and response["ok"] is False and response["error"]["code"] == code


# -- a real overlay ---------------------------------------------------------------------------------------------


@pytest.fixture
def overlay(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("overlay mounts need root")
    lower, upper, work, merged = (tmp_path / n for n in ("lower", "upper", "work", "merged"))
    for d in (lower, upper, work, merged):
        d.mkdir()
    (lower / "src").mkdir()
    (lower / "src" / "main.py").write_text("print('hi')\n")
    (lower / "gone").mkdir()
    (lower / "gone" / "x").write_text("x\n")
    (lower / "remade").mkdir()
    (lower / "remade" / "old").write_text("old\n")
    (lower / "tool.sh").write_text("#!/bin/sh\n")
    (lower / "doomed.txt").write_text("bye\n")
    (lower / "link").symlink_to("src/main.py")
    opts = f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=off,metacopy=off"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(merged)], check=True)
    yield lower, upper, merged
    subprocess.run(["umount", str(merged)], check=False)


async def test_diff_over_a_real_overlay_reproduces_the_workspace(overlay, tmp_path):
    lower, upper, merged = overlay
    host = await GuestHost(merged, base_dir=lower, upper_dir=upper).start()
    try:
        script = (
            "set -e; printf 'print(\"bye\")' > src/main.py; chmod +x tool.sh; rm -r gone doomed.txt;"
            "rm -r remade; mkdir remade; echo new > remade/new; ln -sfn tool.sh link;"
            "printf 'bin\\000ary' > 'data file.bin'; mkdir -p 'ünï/dir'; : > 'ünï/dir/empty'"
        )
        assert (await host.run(["sh", "-c", script], cwd=str(merged)))["exit_code"] == 0
        patch, response = await host.data_call("diff")
        assert response["ok"] is True and response["size"] == len(patch)
        assert response["sha256"] == "sha256:" + hashlib.sha256(patch).hexdigest()
        changes = {(f["path"], f["change"]) for f in response["files"]}
        assert ("tool.sh", "mode") in changes and ("remade/old", "deleted") in changes
        assert ("gone/x", "deleted") in changes and ("data file.bin", "added") in changes
        assert any(f["binary"] for f in response["files"] if f["path"] == "data file.bin")
        apply_patch(lower, patch, tmp_path / "applied")
        assert tree(tmp_path / "applied") == tree(merged)
        status, err = await shutdown_guest(host)
        assert status == 0, err
    finally:
        await host.aclose()


# -- PID 1 ------------------------------------------------------------------------------------------------------

# Waits (inside the box) until no process but this shell has PID 1 as its parent: every orphan has ended and
# been reaped. A guest that does not reap leaves them as zombies and the loop gives up.
ORPHAN_CHECK = r"""
me=$$
for i in $(seq 1 400); do
  left=$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v me="$me" '$4 == 1 && $1 != me' | wc -l)
  zombies=$(cat /proc/[0-9]*/stat 2>/dev/null | awk '$3 == "Z"' | wc -l)
  [ "$left" -eq 0 ] && [ "$zombies" -eq 0 ] && { echo clean; exit 0; }
  sleep 0.05
done
cat /proc/[0-9]*/stat 2>/dev/null; exit 1
"""


@needs_root
async def test_as_pid_1_the_guest_reaps_orphans(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    host = await GuestHost(tmp_path, prefix=("unshare", "--pid", "--fork", "--kill-child", "--mount-proc")).start()
    try:
        parent = await host.run(["sh", "-c", "echo $PPID"])
        assert parent["stdout"] == b"1\n"  # the guest is PID 1 of the namespace
        orphans = "for i in 1 2 3 4 5 6 7 8; do (sh -c 'exit 7' &) ; (sleep 0.2 &) ; done; echo made"
        assert (await host.run(["sh", "-c", orphans]))["stdout"] == b"made\n"
        check = await host.run(["sh", "-c", ORPHAN_CHECK])
        assert check["stdout"] == b"clean\n", check
        status, err = await shutdown_guest(host)
        assert status == 0, err
    finally:
        await host.aclose()
