"""Attach a file to a free loop device, as ``losetup`` does, without running it: ``LOOP_CTL_GET_FREE`` on
``/dev/loop-control``, then ``LOOP_CONFIGURE`` (Linux 5.8+) with ``LO_FLAGS_AUTOCLEAR``, so the device lets go of
the file by itself once its last user (the file system mounted from it) is gone.

Two daemons may ask for a free device at the same moment and get the same one; the loser's ``LOOP_CONFIGURE``
fails with ``EBUSY`` and it asks again. The caller keeps the device's fd open until the device is in use: closing
the last reference to an autoclear device detaches it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from pathlib import Path

LOOP_CONTROL = "/dev/loop-control"
LOOP_CONFIGURE = 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_AUTOCLEAR = 4
LO_NAME_SIZE = 64
ATTACH_TRIES = 16
# struct loop_config: fd, block_size, struct loop_info64 (device, inode, rdevice, offset, sizelimit, number,
# encrypt_type, encrypt_key_size, flags, file_name[64], crypt_name[64], encrypt_key[32], init[2]), reserved[8]
_LOOP_CONFIG = struct.Struct("=II5Q4I64s64s32s2Q8Q")
assert _LOOP_CONFIG.size == 304


def loop_config(backing_fd: int, name: bytes) -> bytes:
    """A ``struct loop_config`` for ``backing_fd``: whole file, kernel's block size, autoclear, ``name`` (shown by
    ``losetup -l``, cut to 63 bytes)."""
    return _LOOP_CONFIG.pack(backing_fd, 0, 0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_AUTOCLEAR, name[:LO_NAME_SIZE - 1],
                             b"", b"", 0, 0, *([0] * 8))


def attach(image: Path) -> tuple[int, str]:
    """Attach ``image`` (read-write) to a free loop device; returns the device's open fd and its path."""
    backing = os.open(image, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        control = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
        try:
            config = loop_config(backing, os.fsencode(image))
            for _ in range(ATTACH_TRIES):
                path = f"/dev/loop{fcntl.ioctl(control, LOOP_CTL_GET_FREE)}"
                device = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                try:
                    fcntl.ioctl(device, LOOP_CONFIGURE, config)
                except OSError as error:
                    os.close(device)
                    if error.errno == errno.EBUSY:  # taken by someone else since it was free
                        continue
                    raise
                return device, path
            raise OSError(errno.EBUSY, f"no loop device stayed free in {ATTACH_TRIES} tries")
        finally:
            os.close(control)
    finally:
        os.close(backing)  # the loop device holds the file now
