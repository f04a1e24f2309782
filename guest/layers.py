"""An overlay layer read through directory descriptors: nothing below its root is reached by a path a symlink
could redirect.

The workspace patch is made by the same code in two places: by the guest, inside the box, and by the host, which
reads the box's layers as root. On the host a path-based walk would be unsafe: a box that swaps a directory for a
symlink (``upper/dir -> /etc``) between two system calls could make root read host files into the patch. So every
name is looked up relative to an open directory descriptor with ``O_NOFOLLOW``: directories are opened
``O_DIRECTORY|O_NOFOLLOW`` one component at a time and must be the directory the walk saw (same device and inode),
symlinks are only ``readlink``-ed relative to their directory, and files are opened
``O_NOFOLLOW|O_NONBLOCK|O_NOCTTY`` and must still be the regular file the walk saw (same device, inode, size,
mtime and ctime) when opened and after they are read. Anything else in their place is a ``DiffError``, never a
wrong patch.

``Budget`` bounds a walk over a layer a hostile box controls: entries listed, directory depth, bytes of file
content, and a deadline. The guest's own walk runs with an unbounded one.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from collections.abc import Callable

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# What an open that must not follow a symlink, or a name that vanished, fails with.
_SWAPPED = frozenset({errno.ELOOP, errno.ENOTDIR, errno.ENOENT})

_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()

Stamp = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns


class DiffError(Exception):
    """The patch cannot be made (a file changed or vanished while being read, an unreadable directory...)."""


class DiffLimitExceeded(DiffError):
    """A walk went past one of its ``Budget``'s bounds; ``limit`` names it, ``bound`` is its value."""

    def __init__(self, limit: str, bound: int | float, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.bound = bound


def shown(name: bytes) -> str:
    """``name`` for a message: UTF-8 where it is, every other byte and every unprintable character escaped."""
    text = name.decode("utf-8", "backslashreplace")
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def stamp_of(st: os.stat_result) -> Stamp:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Budget:
    """Bounds on one walk; ``None`` leaves a bound off. ``deadline`` is a ``clock()`` value."""

    def __init__(self, *, max_entries: int | None = None, max_depth: int | None = None,
                 max_content_bytes: int | None = None, deadline: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries, self.max_depth, self.max_content_bytes = max_entries, max_depth, max_content_bytes
        self.deadline, self.clock = deadline, clock
        self.entries = 0
        self.content_bytes = 0

    def count_entry(self) -> None:
        """One more directory entry listed (in either layer)."""
        self.entries += 1
        if self.max_entries is not None and self.entries > self.max_entries:
            raise DiffLimitExceeded("entries", self.max_entries,
                                    f"the layers hold more than {self.max_entries} entries")
        if self.deadline is not None:
            self.check_deadline()

    def enter(self, depth: int, rel: bytes) -> None:
        """About to list the directory ``rel``, ``depth`` levels below the root."""
        if self.max_depth is not None and depth > self.max_depth:
            raise DiffLimitExceeded("depth", self.max_depth,
                                    f"{shown(rel)} is nested deeper than {self.max_depth} directories")

    def count_content(self, size: int, rel: bytes) -> None:
        """A regular file of ``size`` bytes will be read (its size as the walk saw it, sparse or not)."""
        self.content_bytes += size
        if self.max_content_bytes is not None and self.content_bytes > self.max_content_bytes:
            raise DiffLimitExceeded("content_bytes", self.max_content_bytes,
                                    f"the changed files hold more than {self.max_content_bytes} bytes "
                                    f"(reached at {shown(rel)}, {size} bytes)")

    def check_deadline(self) -> None:
        if self.deadline is not None and self.clock() > self.deadline:
            raise DiffLimitExceeded("deadline", self.deadline, "the patch was not done before its deadline")


def lstat_at(dir_fd: int, name: bytes) -> os.stat_result | None:
    """``name`` in the directory, not followed; None when nothing is there."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def list_names(dir_fd: int, budget: Budget) -> set[bytes]:
    """The names in the directory, each counted against ``budget`` as it is read (a huge directory stops early)."""
    names: set[bytes] = set()
    with os.scandir(dir_fd) as entries:  # an iterator, not a list: a directory of millions stops at the bound
        for entry in entries:
            budget.count_entry()
            names.add(entry.name.encode(_FS_ENCODING, _FS_ERRORS))  # os.fsencode, without its Python call
    return names


def open_child_dir(dir_fd: int, name: bytes, seen: os.stat_result, rel: bytes) -> int:
    """A descriptor of the subdirectory ``name``, which must be the very directory ``seen`` by the walk."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _SWAPPED:
            raise DiffError(f"{shown(rel)} changed while the patch was made") from None
        raise
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
        os.close(fd)
        raise DiffError(f"{shown(rel)} changed while the patch was made")
    return fd


class Layer:
    """The root directory of one layer, open for the life of a walk and the reads that follow it.

    ``open_file`` resolves a path below the root one component at a time; the directory it last resolved stays
    open, as the patch reads files in path order and neighbours share their directory.
    """

    def __init__(self, root: str | bytes, budget: Budget) -> None:
        self.root = os.fsencode(root)
        self.budget = budget
        self.fd = os.open(self.root, DIR_FLAGS)
        self._parent: tuple[bytes, int] | None = None

    def close(self) -> None:
        if self._parent is not None:
            os.close(self._parent[1])
            self._parent = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Layer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open_dir(self, rel: bytes) -> int:
        """A new descriptor of the directory ``rel`` (b"" for the root), no component followed if a symlink."""
        current = os.open(b".", DIR_FLAGS, dir_fd=self.fd)
        for part in rel.split(b"/") if rel else ():
            try:
                if part in (b"", b".", b".."):
                    raise DiffError(f"{shown(rel)} is not a plain relative path")
                following = os.open(part, DIR_FLAGS, dir_fd=current)
            finally:
                os.close(current)
            current = following
        return current

    def _parent_fd(self, parent: bytes) -> int:
        if self._parent is not None and self._parent[0] == parent:
            return self._parent[1]
        fd = self.open_dir(parent)
        if self._parent is not None:
            os.close(self._parent[1])
        self._parent = (parent, fd)
        return fd

    def open_file(self, rel: bytes, expected: Stamp | None) -> int:
        """A read descriptor of the regular file ``rel``, which must still be the one stamped ``expected``."""
        parent, _, name = rel.rpartition(b"/")
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=self._parent_fd(parent))
        except OSError as exc:
            if exc.errno in _SWAPPED:
                raise DiffError(f"{shown(rel)} changed while the patch was made") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (expected is not None and stamp_of(st) != expected):
            os.close(fd)
            raise DiffError(f"{shown(rel)} changed while the patch was made")
        return fd
