"""Proof that nothing opened or read a path: inotify ``IN_OPEN | IN_ACCESS`` watches, for the canary tests.

The kernel queues an event the moment a watched file or directory (or a file inside a watched directory) is opened
or read, so once the code under test has returned, ``events()`` holds everything it did to them; no waiting.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from pathlib import Path

IN_ACCESS = 0x001
IN_OPEN = 0x020
IN_DONT_FOLLOW = 0x02000000  # watch a symlink itself, never its target
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)

_libc = ctypes.CDLL(None, use_errno=True)


class Watch:
    """Watches ``paths`` (files, directories, fifos, device nodes) for opens and reads until ``close()``."""

    def __init__(self, *paths: Path) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.names: dict[int, Path] = {}
        for path in paths:
            wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN | IN_ACCESS | IN_DONT_FOLLOW)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
            self.names[wd] = path

    def events(self) -> list[tuple[Path, str, bytes]]:
        """(watched path, "open"/"access", name inside it or b"") for every event so far."""
        found: list[tuple[Path, str, bytes]] = []
        while True:
            try:
                buffer = os.read(self.fd, 65536)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    return found
                raise
            offset = 0
            while offset < len(buffer):
                wd, mask, _, length = _EVENT.unpack_from(buffer, offset)
                name = buffer[offset + _EVENT.size: offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & (IN_OPEN | IN_ACCESS) and wd in self.names:
                    found.append((self.names[wd], "open" if mask & IN_OPEN else "access", name))

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
