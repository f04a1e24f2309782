"""A workspace attached to a box that is already running (a box started ahead: ``boxes/pool.py``).

A box started ahead has, in its launcher's private mount namespace, two empty staging points (``workspace`` and
``base``) that are shared mounts; bubblewrap's binds of them (``/workspace`` and ``/run/tkbox/base`` in the box)
are their slaves (``bwrap.py``). Attaching mounts the layers there, and the mounts propagate into the box:

1. In the daemon's own mount namespace, where the layers are mounted (the box's disk, the base's idmapped view),
   two detached mounts are made: the workspace overlay (``fsopen``/``fsconfig``/``fsmount``, its layers named by
   fds the caller checked) and a read-only, nosuid, nodev clone of the lower layer (``open_tree`` +
   ``mount_setattr``). Nothing is mounted anywhere yet; a failure leaves nothing behind.
2. A fresh thread takes its own filesystem context (``unshare(CLONE_FS)``), enters the launcher's mount namespace
   through the launcher's pidfd (``setns``: no pid can be reused under it), moves both mounts onto the staging
   points (``move_mount``), and ends: no other thread of the daemon ever leaves the daemon's namespace.

The box's copies arrive in a mount namespace of a less privileged user namespace, so the kernel locks their flags
(read-only, nosuid, nodev: no remount lifts them). Unlike the mounts bwrap copied at the box's start, a propagated
mount is not itself locked against unmounting; nothing in the box can unmount it all the same: no process there has
``CAP_SYS_ADMIN`` and the seccomp filter refuses ``umount2`` (and below it is only an empty directory of the
launcher's, owned by host root, which no one in the box may write). Before the attach, the guest
of such a box is stopped in its boot (it waits for its configuration, which the daemon sends only after this):
no process of the box sees the empty staging points.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from pathlib import Path

from tkbox_daemon.box.idmap import (
    AT_EMPTY_PATH,
    AT_FDCWD,
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    MOVE_MOUNT_F_EMPTY_PATH,
    OPEN_TREE_CLONE,
    SYS_MOUNT_SETATTR,
    SYS_MOVE_MOUNT,
    SYS_OPEN_TREE,
)
from tkbox_daemon.box.syscalls import CLONE_FS, CLONE_NEWNS, checked_syscall, setns, unshare

SYS_FSOPEN = 430
SYS_FSCONFIG = 431
SYS_FSMOUNT = 432
FSOPEN_CLOEXEC = 0x1
FSMOUNT_CLOEXEC = 0x1
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_CREATE = 6
STAGED_NAMES = ("workspace", "base")  # the staging points a box started ahead waits with


class AttachError(OSError):
    """The workspace could not be attached; the message names the step and the kernel's reason."""


def _call(number: int, *args: object, what: str) -> int:
    return checked_syscall(number, *args, what=what, error=AttachError)


def detached_overlay(lower_fd: int, upper_fd: int, work_fd: int, options: dict[str, str]) -> int:
    """An fd of a new overlay mount, nosuid and nodev, attached nowhere; its layers are the directories behind the
    three fds (``O_PATH`` fds the caller opened and checked), resolved in the calling thread's mount namespace."""
    context = _call(SYS_FSOPEN, b"overlay", ctypes.c_uint(FSOPEN_CLOEXEC), what="fsopen overlay")
    try:
        layers = {"lowerdir": lower_fd, "upperdir": upper_fd, "workdir": work_fd}
        for key, value in [*((key, f"/proc/self/fd/{fd}") for key, fd in layers.items()), *options.items()]:
            _call(SYS_FSCONFIG, ctypes.c_int(context), ctypes.c_uint(FSCONFIG_SET_STRING), key.encode(),
                  value.encode(), ctypes.c_int(0), what=f"overlay option {key}")
        _call(SYS_FSCONFIG, ctypes.c_int(context), ctypes.c_uint(FSCONFIG_CMD_CREATE), None, None, ctypes.c_int(0),
              what="overlay create")
        return _call(SYS_FSMOUNT, ctypes.c_int(context), ctypes.c_uint(FSMOUNT_CLOEXEC),
                     ctypes.c_uint(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV), what="fsmount overlay")
    finally:
        os.close(context)


def detached_readonly_clone(source_fd: int) -> int:
    """An fd of a read-only, nosuid, nodev clone of the mount behind ``source_fd`` (its idmapping kept),
    attached nowhere."""
    tree = _call(SYS_OPEN_TREE, ctypes.c_int(source_fd), b"",
                 ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_EMPTY_PATH), what="open_tree (the lower layer)")
    try:
        attr = struct.pack("QQQQ", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0)
        _call(SYS_MOUNT_SETATTR, ctypes.c_int(tree), b"", ctypes.c_uint(AT_EMPTY_PATH), attr,
              ctypes.c_size_t(len(attr)), what="mount_setattr (read-only lower layer)")
    except BaseException:
        os.close(tree)
        raise
    return tree


def move_into_namespace(launcher_pidfd: int, moves: dict[str, int]) -> None:
    """Move each detached mount (``target path -> mount fd``) onto its target as seen in the mount namespace of the
    process behind ``launcher_pidfd``. Runs in a thread of its own that ends right after (see the module
    docstring); blocks until it has. Raises ``AttachError``."""
    failure: list[BaseException] = []

    def enter_and_move() -> None:
        try:
            try:
                unshare(CLONE_FS)  # this thread's own root, cwd and mount namespace from here on
                setns(launcher_pidfd, CLONE_NEWNS)
            except OSError as error:
                raise AttachError(error.errno or 0, f"entering the launcher's mount namespace: {error}") from None
            for target, mount_fd in moves.items():
                _call(SYS_MOVE_MOUNT, ctypes.c_int(mount_fd), b"", ctypes.c_int(AT_FDCWD), os.fsencode(target),
                      ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH), what=f"move_mount to {target}")
        except BaseException as error:  # noqa: B902 - handed to the caller's thread
            failure.append(error)

    mover = threading.Thread(target=enter_and_move, name="tkbox-attach")
    mover.start()
    mover.join()
    if failure:
        raise failure[0]


def attach_workspace(launcher_pidfd: int, staging: Path, *, lower_fd: int, upper_fd: int, work_fd: int,
                     overlay_options: dict[str, str]) -> None:
    """Mount the workspace overlay on ``staging/workspace`` and a read-only clone of its lower layer on
    ``staging/base``, in the launcher's mount namespace (see the module docstring). Blocks briefly: run it in a
    thread. Raises ``AttachError``."""
    made: list[int] = []
    try:
        made.append(detached_overlay(lower_fd, upper_fd, work_fd, overlay_options))
        made.append(detached_readonly_clone(lower_fd))
        move_into_namespace(launcher_pidfd, {str(staging / name): fd for name, fd in zip(STAGED_NAMES, made, strict=True)})
    finally:
        for fd in made:
            os.close(fd)
