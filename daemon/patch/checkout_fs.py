"""Reading the user's checkout through directory descriptors, never through a symlink, with bounds.

- ``CheckoutFs``: the file-system calls the checkout writer makes, each relative to a directory descriptor. Its
  ``before(op, name)`` hook runs before every call; tests override it to fail a chosen call or to change the
  tree just before it, instead of patching ``os``.
- ``open_directory``: walks a path's directories from the root descriptor, one ``openat(O_NOFOLLOW|O_DIRECTORY)``
  per component (optionally creating missing ones), and says which component was a symlink or not a directory.
- ``look``: what is at one name in a directory (``Found``): nothing, a file (its bytes read, bounded by
  ``ReadBudget``, hashed, checked to be the same inode before and after opening), a symlink (its target), a
  directory, or something else (a fifo, socket or device, never opened).
- ``read_preimages(root, paths)``: the pre-image of each path, for the caller; ``CheckoutRefused`` names every
  path that cannot be read safely.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tkbox_guest.layers import shown

from .. import limits
from .checkout_plan import ABSENT, FileImage, PreImage, SymlinkImage, path_components

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
READ_CHUNK = 1 * limits.MIB
DIR_MODE = 0o755


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None


_LIBC = _libc()


class CheckoutFs:
    """The calls the writer makes (Linux ``*at`` calls on bytes names). Subclass and override ``before`` to inject
    a failure (raise ``OSError``) or a change to the tree before a chosen call."""

    def before(self, op: str, name: bytes | None) -> None:
        """Runs before each call: ``op`` is the method's name, ``name`` the entry it touches (None for a fd)."""

    def open(self, name: bytes | str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
        self.before("open", os.fsencode(name))
        return os.open(name, flags | os.O_CLOEXEC, mode, dir_fd=dir_fd)

    def lstat(self, name: bytes, *, dir_fd: int) -> os.stat_result:
        self.before("lstat", name)
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)

    def fstat(self, fd: int) -> os.stat_result:
        self.before("fstat", None)
        return os.fstat(fd)

    def read(self, fd: int, size: int) -> bytes:
        self.before("read", None)
        return os.read(fd, size)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.before("write", None)
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        self.before("fsync", None)
        os.fsync(fd)

    def syncfs(self, fd: int) -> None:
        """Flush everything written to the file system that holds ``fd`` (Linux ``syncfs``; ``sync`` without it)."""
        self.before("syncfs", None)
        if _LIBC is None or not hasattr(_LIBC, "syncfs"):
            os.sync()
        elif _LIBC.syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))

    def fchmod(self, fd: int, mode: int) -> None:
        self.before("fchmod", None)
        os.fchmod(fd, mode)

    def readlink(self, name: bytes, *, dir_fd: int) -> bytes:
        self.before("readlink", name)
        return os.readlink(name, dir_fd=dir_fd)

    def symlink(self, target: bytes, name: bytes, *, dir_fd: int) -> None:
        self.before("symlink", name)
        os.symlink(target, name, dir_fd=dir_fd)

    def mkdir(self, name: bytes, mode: int, *, dir_fd: int) -> None:
        self.before("mkdir", name)
        os.mkdir(name, mode, dir_fd=dir_fd)

    def rename(self, source: bytes, target: bytes, *, dir_fd: int) -> None:
        """Rename within one directory (``renameat`` with the same descriptor on both sides)."""
        self.before("rename", target)
        os.rename(source, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def unlink(self, name: bytes, *, dir_fd: int) -> None:
        self.before("unlink", name)
        os.unlink(name, dir_fd=dir_fd)

    def rmdir(self, name: bytes, *, dir_fd: int) -> None:
        self.before("rmdir", name)
        os.rmdir(name, dir_fd=dir_fd)

    def scandir(self, fd: int) -> Iterator[bytes]:
        """The names in the directory ``fd``, one at a time (a caller may stop early)."""
        self.before("scandir", None)
        with os.scandir(fd) as entries:
            for entry in entries:
                yield os.fsencode(entry.name)


class ReadBudget:
    """Bounds on the checkout bytes read: per file, and all together (they are held for a rollback)."""

    def __init__(self, max_file_bytes: int = limits.CHECKOUT_FILE_BYTES.default,
                 max_total_bytes: int = limits.CHECKOUT_READ_BYTES.default) -> None:
        self.max_file_bytes, self.max_total_bytes = max_file_bytes, max_total_bytes
        self.total = 0

    def refusal(self, size: int) -> str | None:
        """Why a file of ``size`` bytes may not be read, or None (and then it is counted)."""
        if size > self.max_file_bytes:
            return limits.CHECKOUT_FILE_BYTES.refusal(f"it has {size} bytes")
        if self.total + size > self.max_total_bytes:
            return limits.CHECKOUT_READ_BYTES.refusal(f"{self.total + size} bytes with this file")
        self.total += size
        return None


@dataclass(frozen=True)
class Found:
    """What ``look`` found at a name: ``kind`` is absent, file, symlink, directory, other or error.

    ``image`` is the pre-image for absent, file (with its ``content``) and symlink; ``permissions`` the file's
    permission bits; ``detail`` says what an ``other`` or ``error`` is.
    """

    kind: str
    image: PreImage | None = None
    permissions: int = 0
    detail: str = ""

    def describe(self) -> str:
        if self.image is not None:
            return self.image.describe()
        return {"directory": "a directory"}.get(self.kind, self.detail)


ABSENT_FOUND = Found("absent", ABSENT)


def _special(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "not a regular file, symlink or directory"


def git_mode(st_mode: int) -> int:
    """The mode git records for a regular file: 0o755 when the owner may execute it, else 0o644."""
    return 0o755 if st_mode & stat.S_IXUSR else 0o644


def _read_file(fs: CheckoutFs, dir_fd: int, name: bytes, before: os.stat_result, budget: ReadBudget) -> Found:
    refusal = budget.refusal(before.st_size)
    if refusal:
        return Found("error", detail=refusal)
    fd = fs.open(name, READ_FLAGS, dir_fd=dir_fd)
    try:
        opened = fs.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(opened.st_mode):
            return Found("error", detail="it was replaced while being read")
        chunks, size = [], 0
        while True:
            chunk = fs.read(fd, min(READ_CHUNK, before.st_size + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > before.st_size:
                return Found("error", detail="it grew while being read")
    finally:
        os.close(fd)
    if size != before.st_size:
        return Found("error", detail="it shrank while being read")
    content = b"".join(chunks)
    return Found("file", FileImage.of(content, git_mode(opened.st_mode), keep=True),
                 permissions=stat.S_IMODE(opened.st_mode))


def look(fs: CheckoutFs, dir_fd: int, name: bytes, budget: ReadBudget) -> Found:
    """What is at ``name`` in the directory ``dir_fd``, never following a symlink; errors become ``Found``."""
    try:
        found = fs.lstat(name, dir_fd=dir_fd)
        if stat.S_ISLNK(found.st_mode):
            return Found("symlink", SymlinkImage(fs.readlink(name, dir_fd=dir_fd)))
        if stat.S_ISDIR(found.st_mode):
            return Found("directory")
        if stat.S_ISREG(found.st_mode):
            return _read_file(fs, dir_fd, name, found, budget)
        return Found("other", detail=_special(found.st_mode))
    except FileNotFoundError:
        return ABSENT_FOUND
    except OSError as exc:
        return Found("error", detail=f"cannot read it: {os.strerror(exc.errno or errno.EIO)}")


@dataclass(frozen=True)
class Blocked:
    """``open_directory`` stopped at ``parts[:depth]``: it is ``missing``, a ``symlink``, ``not a directory`` or
    ``unreadable`` (``detail`` says why)."""

    depth: int
    why: str
    detail: str = ""

    def describe(self, parts: tuple[bytes, ...]) -> str:
        where = shown(b"/".join(parts[:self.depth]))
        if self.why == "symlink":
            return f"parent {where} is a symlink"
        if self.why == "unreadable":
            return f"parent {where} cannot be opened: {self.detail}"
        return f"parent {where} is {self.why}"


def open_directory(fs: CheckoutFs, root_fd: int, parts: tuple[bytes, ...], *,
                   created: list[tuple[bytes, ...]] | None = None,
                   dir_modes: dict[tuple[bytes, ...], int] | None = None) -> int | Blocked:
    """A new descriptor of the directory ``parts`` (``()`` is the root), opened one component at a time from
    ``root_fd`` with ``O_NOFOLLOW``, or where and why the walk stopped.

    With ``created`` (a list), missing directories are made, 0755 or the mode ``dir_modes`` gives (then set
    exactly), and appended to it; an error making one is raised, not returned.
    """
    fd = os.dup(root_fd)
    for depth in range(1, len(parts) + 1):
        name = parts[depth - 1]
        try:
            try:
                child = fs.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if created is None:
                    return Blocked(depth, "missing")
                mode = (dir_modes or {}).get(parts[:depth])
                fs.mkdir(name, DIR_MODE if mode is None else mode, dir_fd=fd)
                created.append(parts[:depth])
                child = fs.open(name, DIR_FLAGS, dir_fd=fd)
                if mode is not None:
                    fs.fchmod(child, mode)
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                if created is not None:
                    raise
                return Blocked(depth, "unreadable", os.strerror(exc.errno or errno.EIO))
            try:
                is_link = stat.S_ISLNK(fs.lstat(name, dir_fd=fd).st_mode)
            except OSError:
                is_link = False
            return Blocked(depth, "symlink" if is_link else "not a directory")
        finally:
            os.close(fd)
        fd = child
    return fd


class CheckoutRefused(Exception):
    """The checkout is not as expected or cannot be read safely; ``problems`` pairs each path with what is
    wrong. Nothing was written."""

    def __init__(self, problems: list[tuple[bytes, str]], what: str = "the checkout cannot be read safely") -> None:
        self.problems = problems
        super().__init__(f"{what}: " + "; ".join(f"{shown(path)}: {text}" for path, text in problems))


class CheckoutError(OSError):
    """The checkout's root cannot be opened as a directory."""


def open_root(fs: CheckoutFs, root: str | os.PathLike[str] | bytes) -> int:
    """The checkout root's descriptor: its path is resolved this once (symlinks in it followed), then every other
    name is opened relative to it."""
    try:
        return fs.open(os.fsencode(root), os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise CheckoutError(exc.errno, f"cannot open the checkout {shown(os.fsencode(root))} as a directory: "
                                       f"{os.strerror(exc.errno or errno.EIO)}") from None


def read_preimages(root: str | os.PathLike[str] | bytes, paths: Iterable[bytes], *,
                   budget: ReadBudget | None = None, fs: CheckoutFs | None = None) -> dict[bytes, PreImage]:
    """The pre-image of each path in the checkout at ``root``: ``ABSENT`` (also for a directory, or below a
    missing one or a file, as git sees it), a ``FileImage`` with its ``content``, or a ``SymlinkImage``.

    Bounded by ``budget`` (``limits.CHECKOUT_FILE_BYTES``, ``limits.CHECKOUT_READ_BYTES``). Raises ``PlanError``
    for a bad path, ``CheckoutError`` if the root cannot be opened, and ``CheckoutRefused`` naming every path
    below a symlink, over a bound, unreadable, or that is a fifo, socket or device.
    """
    fs = fs or CheckoutFs()
    budget = budget or ReadBudget()
    wanted = {path: path_components(path) for path in paths}
    images: dict[bytes, PreImage] = {}
    problems: list[tuple[bytes, str]] = []
    root_fd = open_root(fs, root)
    try:
        for path, parts in wanted.items():
            parent = open_directory(fs, root_fd, parts[:-1])
            if isinstance(parent, Blocked):
                if parent.why in ("missing", "not a directory"):
                    images[path] = ABSENT
                else:
                    problems.append((path, parent.describe(parts)))
                continue
            try:
                found = look(fs, parent, parts[-1], budget)
            finally:
                os.close(parent)
            if found.kind == "directory":
                images[path] = ABSENT
            elif found.image is None:
                problems.append((path, f"is {found.detail}" if found.kind == "other" else found.detail))
            else:
                images[path] = found.image
    finally:
        os.close(root_fd)
    if problems:
        raise CheckoutRefused(problems)
    return images
