"""A box's own file system: its workspace's upper layer lives on it, so ``box_disk`` bounds what the box can write
and a box that fills it meets ENOSPC there, never on the host's file system.

One image file per box (root's, 0600, below the box's root-only layers directory), its whole size reserved on
the host's file system when the box is made (``fallocate``: the box's writes only ever fill room the host set
aside beforehand, so a full box cannot fill the file system that holds the daemon's state and the signer's log;
a host without that room refuses the box, naming ``box_disk``). ``mkfs.ext4`` formats it (no journal: the upper
layer is scratch whose one product, the patch, the host makes; no blocks reserved for root; no room to grow; no
discard, which would punch the reservation back out of the image). It is mounted from a loop device
(``loopdev.py``: cleared by the kernel once the file system is last unmounted) with
``nosuid,nodev,noexec,noatime,noinit_itable``. The reservation holds against what a box writes; only ext4's own
"write zeroes" (zeroing a small part of an extent a job preallocated) can give a little of it back, bounded by
the image's size like everything else. From the host nothing on it is a device, a set-id program or a program at
all; the box runs its files through its own overlay mount (``nosuid,nodev``), which these options do not reach.

Made in two steps so the format (``mkfs.ext4``, its own process) runs while the daemon does other work:
``start_disk`` reserves and starts it, ``PendingDisk.mount`` waits for it and mounts. ``usage`` is the host's
own reading of the disk (statvfs), including whether it is full; ``release`` unmounts it (the loop device goes
with it); the image goes with the box's layers. Needs root (mounts, loop devices).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tkbox_daemon import limits
from tkbox_daemon.box import loopdev, mountinfo
from tkbox_daemon.box.backend import BoxError
from tkbox_daemon.box.syscalls import (
    MNT_DETACH,
    MS_NOATIME,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    fallocate,
    mount,
    umount2,
)

METHOD = "loop-ext4"
MOUNT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME
# noinit_itable: the kernel's background zeroing of the inode tables would reach the loop device as
# "write zeroes", which punches holes in the image and hands the reservation back to the host (measured: 504 KiB
# of a 64 MiB disk within seconds). The image reads as zeros anyway: fallocate leaves it unwritten.
MOUNT_DATA = "noinit_itable"
# no journal, no blocks reserved for root, no room kept for growing the file system (^resize_inode: a third of
# mkfs's time, measured 12 -> 4 ms for 4 GiB), inode tables left to be zeroed never (see MOUNT_DATA), no discard
MKFS_OPTIONS = ("-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode", "-E",
                "lazy_itable_init=1,nodiscard,root_owner=0:0")
TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TOOL_TIMEOUT_S = 60
SMALLEST_DISK = 16 * limits.MIB  # below this ext4's own metadata leaves a box almost nothing
FULL_MARGIN_MIN = limits.MIB
FULL_MARGIN_MAX = 16 * limits.MIB
_STDERR_SHOWN = 2000


class DiskError(BoxError):
    """A box's disk could not be made, mounted or released; the message says why and what to do."""


@dataclass(frozen=True)
class DiskUsage:
    """The host's reading of one box's disk (statvfs): bytes and inodes, and whether the box may still write."""

    size: int
    free: int  # bytes an unprivileged writer (the box) may still take
    inodes_free: int

    @property
    def margin(self) -> int:
        """Room under which the disk counts as full. ext4 refuses a write (ENOSPC) while a little room still shows
        (it holds some back for the allocations in flight: measured 438 KiB on a 64 MiB disk), so "full" is
        "less than this left": 1/256 of the disk, at least 1 MiB and at most 16 MiB."""
        return min(max(self.size // 256, FULL_MARGIN_MIN), FULL_MARGIN_MAX)

    @property
    def full(self) -> bool:
        return self.free < self.margin or self.inodes_free == 0

    @property
    def roomy(self) -> bool:
        """Room again, well clear of ``full`` (so one full disk is reported once, not at every byte freed)."""
        return self.free >= 2 * self.margin and self.inodes_free > 0

    def to_json(self) -> dict[str, int]:
        return {"size": self.size, "free": self.free, "inodes_free": self.inodes_free}


@dataclass(frozen=True)
class DiskQuotaSupport:
    """What ``tkbox doctor`` says about the disk quota: the method and whether this host has what it needs."""

    method: str  # METHOD, or "none" when a box's disk cannot be made here
    found: str
    fix: str = ""

    @property
    def enforced(self) -> bool:
        return self.method != "none"


def _tool(name: str) -> str | None:
    return shutil.which(name, path=TOOL_PATH)


def probe() -> DiskQuotaSupport:
    """Whether boxes get their own disk here (root, ``mkfs.ext4``, loop devices), without making one."""
    if os.geteuid() != 0:
        return DiskQuotaSupport("none", "the daemon's user is not root: it can mount no box disk (nor start an "
                                        "isolated box)", "run the daemon as root")
    if _tool("mkfs.ext4") is None:
        return DiskQuotaSupport("none", "mkfs.ext4 not found", "install e2fsprogs (scripts/setup.sh does)")
    if not os.path.exists(loopdev.LOOP_CONTROL):
        return DiskQuotaSupport("none", "no loop devices (/dev/loop-control is missing)", "modprobe loop")
    return DiskQuotaSupport(METHOD, "each box's upper layer is its own ext4 file system on a loop device, its size "
                                    "reserved on the host (box_disk)")


def _env() -> dict[str, str]:
    return {"PATH": TOOL_PATH, "LC_ALL": "C"}


class PendingDisk:
    """A reserved image being formatted; ``mount`` finishes it, ``abandon`` drops it."""

    def __init__(self, image: Path, size: int, process: subprocess.Popen[bytes]) -> None:
        self.image = image
        self.size = size
        self.process = process

    def mount(self, mount_point: Path) -> None:
        """Wait for the format, then mount the image at ``mount_point`` (an empty directory of ours)."""
        try:
            _, stderr = self.process.communicate(timeout=TOOL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.abandon()
            raise DiskError(f"mkfs.ext4 of the box's disk took over {TOOL_TIMEOUT_S} s") from None
        if self.process.returncode != 0:
            self.abandon()
            raise DiskError(f"mkfs.ext4 of the box's disk failed: {_shown(stderr)}")
        try:
            device, path = loopdev.attach(self.image)
        except OSError as error:
            self.abandon()
            raise DiskError(f"no loop device for the box's disk: {error.strerror} (modprobe loop)") from None
        try:
            mount(path, str(mount_point), "ext4", MOUNT_FLAGS, MOUNT_DATA)
        except OSError as error:
            self.abandon()
            raise DiskError(f"mounting the box's disk failed: {error.strerror}") from None
        finally:
            os.close(device)  # the file system holds the device now; without it, autoclear frees the device

    def abandon(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.image.unlink(missing_ok=True)


def _shown(stderr: bytes) -> str:
    return stderr.decode(errors="replace").strip()[:_STDERR_SHOWN] or "no message"


def start_disk(image: Path, size: int) -> PendingDisk:
    """Create ``image`` (which must not exist), reserve ``size`` bytes for it and start formatting it."""
    if size < SMALLEST_DISK:
        raise DiskError(limits.BOX_DISK.refusal(f"{size} bytes is below the smallest disk a box can use "
                                                f"({SMALLEST_DISK} bytes)"))
    mkfs = _tool("mkfs.ext4")
    if mkfs is None:
        raise DiskError("mkfs.ext4 not found: install e2fsprogs (scripts/setup.sh does); a box's disk is an ext4 "
                        "file system")
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fallocate(fd, size)
        except OSError as error:
            raise _reserve_error(image, size, error) from None
    except BaseException:
        os.close(fd)
        image.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        process = subprocess.Popen([mkfs, *MKFS_OPTIONS, str(image)], env=_env(), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as error:
        image.unlink(missing_ok=True)
        raise DiskError(f"mkfs.ext4 could not run: {error}") from None
    return PendingDisk(image, size, process)


def _reserve_error(image: Path, size: int, error: OSError) -> DiskError:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        free = shutil.disk_usage(image.parent).free
        return DiskError(limits.BOX_DISK.refusal(
            f"the host's file system holding {image.parent} has {free} bytes free, the box's disk needs {size} "
            "(reserved up front, so that a full box cannot fill the host); free some room or give a smaller "
            "limits.disk"))
    if error.errno == errno.EOPNOTSUPP:
        return DiskError(f"the file system holding {image.parent} cannot reserve room for a box's disk "
                         "(fallocate is not supported): put the box layers on ext4, xfs or btrfs "
                         "(TKBOX_BOX_STATE_ROOT)")
    return DiskError(f"reserving the box's disk {image} failed: {error.strerror}")


def usage(mount_point: Path) -> DiskUsage:
    """The disk mounted at ``mount_point`` as the host reads it."""
    info = os.statvfs(mount_point)
    return DiskUsage(size=info.f_blocks * info.f_frsize, free=info.f_bavail * info.f_frsize,
                     inodes_free=info.f_favail)


def is_mounted(mount_point: Path) -> bool:
    return os.path.ismount(mount_point)


def release(mount_point: Path) -> bool:
    """Unmount the disk at ``mount_point`` (its loop device clears itself); False when nothing was mounted there.
    A disk still in use (a process with a file open on it) is detached now and freed when the last user goes."""
    try:
        umount2(str(mount_point), 0)
    except OSError as error:
        if error.errno in (errno.EINVAL, errno.ENOENT):
            return False
        if error.errno != errno.EBUSY:
            raise DiskError(f"unmounting the box's disk {mount_point} failed: {error.strerror}") from None
        umount2(str(mount_point), MNT_DETACH)
    return True


def release_all_below(directory: Path) -> list[str]:
    """Unmount every mount below ``directory`` (deepest first): the disks a dead daemon left under its layers
    root. Returns the mount points released."""
    released = []
    for point in mountinfo.points_below(mountinfo.read(), str(directory)):
        path = Path(os.fsdecode(point))
        if release(path):
            released.append(str(path))
    return released
