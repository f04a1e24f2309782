"""A box's layers on the host, end to end on both backends: the real signer, a real ``tkbox daemon``, real boxes.

- A set-id file a job makes in its workspace is no door for the host's other users: the layer holding it (found
  the way an attacker would, through the box's ``/proc/<pid>/mountinfo``) is below a directory they cannot enter,
  the host mounts it nosuid and noexec, the box's own mounts are nosuid and nodev, and the bit never leaves the
  box (the patch says 100755; a set-id file of the checkout arrives without it).
- ``box_disk`` holds: a box that writes past its disk gets ENOSPC, the daemon records the full disk (event and
  run), the host's room for it was taken when the box was made, and the signer and the daemon go on recording
  another box's command.
- A box's disk goes with it: on removal, and after a daemon crash (the restart unmounts it).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from e2e.daemon_process import daemon_process, events, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tests.bundle_records import record_events
from tkbox_daemon.box import mountinfo
from tkbox_daemon.config import DaemonPaths
from tkbox_daemon.signer.paths import SignerPaths

pytestmark = pytest.mark.e2e

NOBODY = 65534
BOX_PYTHON = "/usr/bin/python3"
LOOP_MAJOR = 7
AS_ANOTHER_USER = r'''
import errno, json, os, subprocess, sys
def attempt(action):
    try:
        action()
        return "ok"
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
paths = json.loads(sys.argv[1])
print(json.dumps({
    "uid": os.getuid(),
    "open_upper": attempt(lambda: os.close(os.open(paths["upper"], os.O_RDONLY | os.O_DIRECTORY))),
    "list_layers": attempt(lambda: os.listdir(paths["layers"])),
    "stat_setuid_file": attempt(lambda: os.stat(paths["setuid_file"])),
    "exec_setuid_file": attempt(lambda: subprocess.run([paths["setuid_file"], "-c", "pass"], check=False)),
    "write_base": attempt(lambda: open(os.path.join(paths["base"], "planted"), "w").close()),
}))
'''


@pytest.fixture
def signer():
    tkbox("signer", "up")
    yield
    tkbox("signer", "down", check=False)


def exec_in(box: str, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([TKBOX, "exec", box, "--", *argv], capture_output=True, timeout=120)


def box_pid(name: str) -> int:
    return {box["name"]: box for box in tkbox_json("ls")}[name]["pid"]


def mount_at(mounts: list[mountinfo.Mount], point: str) -> mountinfo.Mount:
    [found] = [mount for mount in mounts if mount.mount_point == point.encode()]
    return found


def host_path(box_mount: mountinfo.Mount) -> Path:
    """The host path behind one of a box's bind mounts: the host's mount of the same device, plus the root."""
    hosts = [mount for mount in mountinfo.read() if (mount.major, mount.minor) == (box_mount.major, box_mount.minor)
             and mount.root == b"/"]
    host = min(hosts, key=lambda mount: len(mount.mount_point))
    return Path(os.fsdecode(host.mount_point)) / os.fsdecode(box_mount.root).lstrip("/")


def host_mount_of(path: Path) -> mountinfo.Mount:
    """The host's mount whose point holds ``path`` (the longest prefix)."""
    raw = os.fsencode(path)
    found = [mount for mount in mountinfo.read() if raw == mount.mount_point or raw.startswith(mount.mount_point
                                                                                            + b"/")]
    return max(found, key=lambda mount: len(mount.mount_point))


def loop_backing_files() -> dict[str, str]:
    """Every attached loop device and the file behind it (``(deleted)`` once the file is gone)."""
    attached = {}
    for device in Path("/sys/block").glob("loop*"):
        with contextlib.suppress(OSError):
            attached[device.name] = (device / "loop" / "backing_file").read_text().strip()
    return attached


def holders(image: str) -> dict[int, str]:
    """Processes whose mount namespace still holds the file system on ``image``: pid -> command line."""
    devices = {(LOOP_MAJOR, int(name[4:])) for name, backing in loop_backing_files().items() if image in backing}
    found = {}
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, mountinfo.MountinfoError):
            if proc.name.isdigit() and any((mount.major, mount.minor) in devices
                                           for mount in mountinfo.read(proc.name)):
                found[int(proc.name)] = (proc / "cmdline").read_bytes()[:160].decode(errors="replace")
    return found


def family(pid: int) -> set[int]:
    """``pid`` and every process below it."""
    children: dict[int, set[int]] = {}
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if proc.name.isdigit():
                parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, set()).add(int(proc.name))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo.extend(children.get(current, set()) - found)
    return found


def assert_loop_device_freed(image: str, daemon_pid: int) -> None:
    """No loop device holds ``image`` any more — unless a mount namespace that another program on this host made
    while the disk was mounted holds a copy of it (the host's unmount cannot reach such a copy; it goes with that
    namespace). Nothing of this daemon may be among the holders: neither the daemon nor a box launcher."""
    if not any(image in backing for backing in loop_backing_files().values()):
        return
    held = holders(image)
    ours = set(held) & family(daemon_pid)
    assert held and not ours, f"{image} is still attached; held by {held}"


def as_another_user(paths: dict[str, str]) -> dict[str, str]:
    """What an unprivileged user of the host (uid 65534) gets when trying ``paths``."""
    result = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", BOX_PYTHON,
                             "-I", "-c", AS_ANOTHER_USER, json.dumps(paths)], capture_output=True, text=True,
                            timeout=60, check=True)
    return json.loads(result.stdout)


@pytest.mark.parametrize("backend", ["bwrap", "ns"])
def test_a_setuid_file_made_in_a_box_is_no_door_for_other_users_and_never_leaves_the_box(signer, tmp_path,
                                                                                        backend):
    checkout = make_checkout(tmp_path)
    (checkout / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    os.chmod(checkout / "tool", 0o4755)  # a set-id file in the checkout arrives without the bit
    with daemon_process(backend=backend):
        tkbox_json("run", "--name", "sp", "--workspace", str(checkout))
        made = exec_in("sp", "sh", "-c", "cp /usr/bin/python3 /workspace/sp && chmod 4755 /workspace/sp && "
                                         "stat -c %a /workspace/sp /workspace/tool")
        assert made.returncode == 0, made.stderr
        assert made.stdout.split() == [b"4755", b"755"]  # the job did set the bit, inside its box

        box_mounts = mountinfo.read(box_pid("sp"))
        workspace = mount_at(box_mounts, "/workspace")
        assert {b"nosuid", b"nodev"} <= workspace.options and workspace.fstype == b"overlay"
        upper = host_path(mount_at(box_mounts, "/run/tkbox/upper"))  # where the attacker found it
        base = host_path(mount_at(box_mounts, "/run/tkbox/base"))
        setuid_file = upper / "sp"

        on_host = os.stat(setuid_file)
        assert stat.S_ISREG(on_host.st_mode) and on_host.st_mode & stat.S_ISUID  # the inode keeps the job's bit…
        disk = host_mount_of(upper)
        assert {b"nosuid", b"nodev", b"noexec"} <= disk.options  # …which the host's mount of the layer ignores
        assert os.statvfs(upper).f_flag & (os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC) == (
            os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC)
        with pytest.raises(PermissionError):  # not even root runs it from the host
            subprocess.run([str(setuid_file), "-c", "pass"], check=False)

        layers = upper.parent.parent
        assert layers == base.parent
        closed = os.lstat(layers)
        assert closed.st_uid == 0 and stat.S_IMODE(closed.st_mode) == 0o700
        another = as_another_user({"upper": str(upper), "layers": str(layers), "setuid_file": str(setuid_file),
                                   "base": str(base)})
        assert another == {"uid": NOBODY, "open_upper": "EACCES", "list_layers": "EACCES",
                           "stat_setuid_file": "EACCES", "exec_setuid_file": "EACCES", "write_base": "EACCES"}

        heads = [line for line in tkbox("diff", "sp").stdout.splitlines()  # base85 lines hold no space
                 if line.startswith(("diff --git", "new file", "old mode", "new mode", "deleted file"))]
        assert heads == ["diff --git a/sp b/sp", "new file mode 100755"]  # the checkout's tool is unchanged, 0755


def _records(bundle: Path) -> list[dict]:
    return record_events(bundle)


@pytest.mark.parametrize("backend", ["bwrap", "ns"])
def test_a_box_that_writes_past_its_disk_gets_enospc_and_the_signer_and_daemon_go_on(signer, tmp_path, backend):
    checkout = make_checkout(tmp_path)
    with daemon_process(backend=backend):
        full = tkbox_json("run", "--name", "full", "--workspace", str(checkout), "--disk", "64M")
        upper = host_path(mount_at(mountinfo.read(full["pid"]), "/run/tkbox/upper"))
        disk = host_mount_of(upper)
        assert (disk.major, disk.fstype) == (LOOP_MAJOR, b"ext4")
        image = Path(loop_backing_files()[f"loop{disk.minor}"])
        reserved = os.stat(image).st_blocks
        assert reserved * 512 >= 64 << 20  # the host's room was taken when the box was made

        filled = exec_in("full", "dd", "if=/dev/zero", "of=/workspace/big", "bs=1M", "count=100")
        assert filled.returncode != 0 and b"No space left on device" in filled.stderr
        assert os.stat(image).st_blocks == reserved  # the writes took nothing more from the host

        [noted] = [event["data"] for event in events("full") if event["kind"] == "box.disk_full"]
        assert noted["limit"] == "box_disk" and noted["size"] <= 64 << 20 and noted["free"] < 1 << 20
        assert "ENOSPC" in noted["reason"] and "--disk" in noted["reason"]

        # the daemon's state and the signer's log are on another file system than the box's disk
        paths, signer_paths = DaemonPaths.from_env(), SignerPaths.from_env()
        box_device = os.stat(upper).st_dev
        assert box_device not in {os.stat(paths.state_dir).st_dev, os.stat(signer_paths.data_dir).st_dev}

        tkbox_json("run", "--name", "other", "--workspace", str(checkout))
        wrote = exec_in("other", "sh", "-c", "echo after > /workspace/after.txt && cat /workspace/after.txt")
        assert wrote.returncode == 0 and wrote.stdout == b"after\n", wrote.stderr
        finished = [event["data"] for event in events("other") if event["kind"] == "exec.finished"]
        assert [data["exit_code"] for data in finished] == [0]

        tkbox("stop", "full")
        bundle = tmp_path / "full.tkb"
        tkbox("export", "full", "-o", str(bundle))
        records = _records(bundle)
        [limit] = [record["data"] for record in records if record["type"] == "input.observed"
                   and record["data"].get("source") == "tkbox.limit"]
        assert limit["trust"] == "trusted" and limit["must_keep"] is True  # the value is kept as a commitment
        results = [record["data"] for record in records if record["type"] == "tool.result"]
        assert [result["exit_code"] for result in results] == [1]  # dd's failure, recorded as it ended


@pytest.mark.parametrize("backend", ["bwrap", "ns"])
def test_a_box_disk_goes_with_its_box_on_removal_and_after_a_daemon_crash(signer, tmp_path, backend):
    checkout = make_checkout(tmp_path)
    with daemon_process(backend=backend, keep_layers=True) as first:
        removed = tkbox_json("run", "--name", "removed", "--workspace", str(checkout), "--disk", "32M")
        crashed = tkbox_json("run", "--name", "crashed", "--workspace", str(checkout), "--disk", "32M")
        disks = {}
        for box in (removed, crashed):
            disk = host_mount_of(host_path(mount_at(mountinfo.read(box["pid"]), "/run/tkbox/upper")))
            disks[box["name"]] = (disk.mount_point, loop_backing_files()[f"loop{disk.minor}"])

        tkbox("rm", "removed")  # while "crashed", started after it, still runs (and held no copy of its disk)
        point, image = disks["removed"]
        assert point not in {mount.mount_point for mount in mountinfo.read()}
        assert not os.path.exists(image)
        assert_loop_device_freed(image, first.process.pid)  # "crashed", started after it, dropped its copy

        init = os.pidfd_open(crashed["pid"])
        try:
            first.process.send_signal(signal.SIGKILL)
            first.process.wait(30)
            assert select.select([init], [], [], 30)[0], "the box outlived its daemon"  # its guard took it down
        finally:
            os.close(init)
        point, image = disks["crashed"]
        assert point in {mount.mount_point for mount in mountinfo.read()}  # nobody unmounted it: the daemon died

        with daemon_process(backend=backend) as second:
            [lost] = tkbox_json("ls")
            assert (lost["name"], lost["state"]) == ("crashed", "lost")
            assert point not in {mount.mount_point for mount in mountinfo.read()}  # the restart unmounted it
            assert_loop_device_freed(image, second.process.pid)
            assert os.path.exists(image)  # a lost box keeps its layers until tkbox rm
            tkbox("rm", "crashed")
            assert not os.path.exists(image)


def test_a_box_disk_below_the_smallest_is_refused_with_the_limit_named(signer, tmp_path):
    with daemon_process(backend="bwrap"):
        refused = tkbox("run", "--name", "tiny", "--workspace", str(make_checkout(tmp_path)), "--disk", "1M",
                        check=False)
        assert refused.returncode != 0 and "limits.disk" in refused.stderr and "16M" in refused.stderr
        assert tkbox_json("ls") == []
