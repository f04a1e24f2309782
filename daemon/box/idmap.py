"""The box's view of a linked base: an idmapped, read-only bind mount that shows the checkout owner's files as the
jobs' own.

A linked base (``workspace.py``) holds hard links to the checkout's files, owned by the checkout's owner (host uid
X). In the box those would be "nobody"'s, and the job could change none of them. The view is a bind of the base
with the mount's own id mapping (``mount_setattr(MOUNT_ATTR_IDMAP)``): on that mount, files of uid X (gid G) read
as the jobs' host uid J (and gid J); every other owner stays unmapped ("nobody" in the box: the "other" bits
apply). The mount is read-only, nosuid and nodev, so nothing is written through it and no set-id bit takes effect
through it; it is the box's overlay lower layer (which the overlay never writes either: a job's write copies the
file up to the box's own disk). It lives in the host's mount table below the root-only layers directory, like the
box's disk, and is unmounted with it.

The mapping comes from a user namespace made for it alone: a forked child (root) unshares one, this process writes
its maps (``X J 1``, ``G J 1``) and keeps an fd of it only while mounting; no process ever runs in it.
"""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

from tkbox_daemon.box.syscalls import MNT_DETACH, checked_syscall, umount2
from tkbox_daemon.box.userns import held_user_namespace

SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
OPEN_TREE_CLONE = 1
AT_EMPTY_PATH = 0x1000
AT_FDCWD = -100
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x00100000
VIEW_ATTRS = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV


class IdmapError(OSError):
    """The idmapped view could not be made (the kernel or the file system has no idmapped mounts, say)."""


def _call(number: int, *args: object, what: str) -> int:
    return checked_syscall(number, *args, what=what, error=IdmapError)


def mapping_namespace(owner_uid: int, owner_gid: int, job_uid: int) -> int:
    """An fd of a new user namespace whose maps send ``owner_uid`` to ``job_uid`` and ``owner_gid`` to ``job_uid``
    (the jobs' gid is their uid). Blocks briefly (a fork)."""
    try:
        return held_user_namespace(f"{owner_uid} {job_uid} 1\n", f"{owner_gid} {job_uid} 1\n")
    except OSError as error:
        raise IdmapError(error.errno or 0, f"the view's user namespace: {error}") from error


class PremadeMapping:
    """A mapping namespace made ahead (while the box's disk is started), for the view of one owner only."""

    def __init__(self, owner_uid: int, owner_gid: int, job_uid: int) -> None:
        self.ids = (owner_uid, owner_gid, job_uid)
        self.fd = mapping_namespace(owner_uid, owner_gid, job_uid)

    def take(self, owner_uid: int, owner_gid: int, job_uid: int) -> int | None:
        """The fd, handed over once, when it maps these ids; else None (and it is closed)."""
        fd, self.fd = self.fd, -1
        if fd >= 0 and self.ids != (owner_uid, owner_gid, job_uid):
            os.close(fd)
            return None
        return fd if fd >= 0 else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def mount_view(source: Path, target: Path, *, owner_uid: int, owner_gid: int, job_uid: int,
               premade: PremadeMapping | None = None) -> None:
    """Mount at ``target`` (an empty directory) a read-only, nosuid, nodev bind of ``source`` on which
    ``owner_uid``'s files read as ``job_uid``'s (see the module docstring); ``premade``'s namespace is used when
    it maps exactly these ids. Raises ``IdmapError``."""
    userns = premade.take(owner_uid, owner_gid, job_uid) if premade is not None else None
    if userns is None:
        userns = mapping_namespace(owner_uid, owner_gid, job_uid)
    try:
        tree = _call(SYS_OPEN_TREE, ctypes.c_int(AT_FDCWD), os.fsencode(source),
                     ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC), what=f"open_tree {source}")
        try:
            attr = struct.pack("QQQQ", VIEW_ATTRS, 0, 0, userns)
            _call(SYS_MOUNT_SETATTR, ctypes.c_int(tree), b"", ctypes.c_uint(AT_EMPTY_PATH), attr,
                  ctypes.c_size_t(len(attr)), what="mount_setattr (idmapped view)")
            _call(SYS_MOVE_MOUNT, ctypes.c_int(tree), b"", ctypes.c_int(AT_FDCWD), os.fsencode(target),
                  ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH), what=f"move_mount to {target}")
        finally:
            os.close(tree)
    finally:
        os.close(userns)


def is_view_of(target: Path, source: Path) -> bool:
    """Whether ``source`` is mounted at ``target`` (a bind of the same file system: ``os.path.ismount`` cannot
    tell, the inode can: the view's root is ``source``'s directory, not the empty one below it)."""
    try:
        seen, mounted = os.stat(target), os.stat(source)
    except OSError:
        return False
    return (seen.st_dev, seen.st_ino) == (mounted.st_dev, mounted.st_ino)


def unmount_view(target: Path, source: Path) -> bool:
    """Unmount the view of ``source`` at ``target`` (lazily: a running box's mount namespace keeps its own copy);
    False when none was mounted."""
    if not is_view_of(target, source):
        return False
    umount2(str(target), MNT_DETACH)
    return True
