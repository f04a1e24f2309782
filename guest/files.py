"""Bounded read of one regular file under the workspace, resolving symlinks without ever leaving it.

The path is resolved one component at a time from an open descriptor of the workspace root (``openat`` with
``O_NOFOLLOW``), the way the kernel would, except that ``..`` at the root and symlinks pointing outside the
workspace are refused instead of followed. A component swapped for a symlink between the check and the open makes
the open fail (``ELOOP``), so a concurrent rename cannot redirect the read. Only regular files are read; a fifo or
device is refused before any read (the final open is non-blocking).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator

from .protocol import MAX_FILES_READ

MAX_SYMLINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class FileError(Exception):
    """The file cannot be read; ``code`` goes into the error response."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _os_error(exc: OSError, path: str) -> FileError:
    code = errno.errorcode.get(exc.errno or 0, "EIO")
    return FileError(code, f"{path}: {exc.strerror}")


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _relative_to_root(path: str, root: str) -> list[str]:
    """The components of an absolute ``path`` inside ``root``, or FileError if it is elsewhere."""
    root_parts, parts = _components(root), _components(path)
    if parts[:len(root_parts)] != root_parts:
        raise FileError("OUTSIDE_WORKSPACE", f"{path} is outside the workspace")
    return parts[len(root_parts):]


def open_in_workspace(root: str, path: str) -> int:
    """A read-only descriptor of the regular file ``path`` (relative, or absolute under ``root``)."""
    if "\0" in path:
        raise FileError("EINVAL", "path contains NUL")
    pending = _relative_to_root(path, root) if path.startswith("/") else _components(path)
    if not pending:
        raise FileError("EISDIR", f"{path} is the workspace itself")
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise _os_error(exc, root) from None
    stack = [root_fd]  # the directories walked through; stack[-1] is the current one
    hops = 0
    try:
        while pending:
            name = pending.pop(0)
            if name == "..":
                if len(stack) == 1:
                    raise FileError("OUTSIDE_WORKSPACE", f"{path} leads above the workspace")
                os.close(stack.pop())
                continue
            try:
                st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            except OSError as exc:
                raise _os_error(exc, path) from None
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise FileError("ELOOP", f"{path}: too many symlinks")
                target = os.readlink(name, dir_fd=stack[-1])
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                    pending = _relative_to_root(target, root) + pending
                else:
                    pending = _components(target) + pending
                continue
            if not pending:
                if not stat.S_ISREG(st.st_mode):
                    raise FileError("EISDIR" if stat.S_ISDIR(st.st_mode) else "NOT_REGULAR",
                                    f"{path} is not a regular file")
                try:
                    fd = os.open(name, _FILE_FLAGS, dir_fd=stack[-1])
                except OSError as exc:
                    raise _os_error(exc, path) from None
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    raise FileError("NOT_REGULAR", f"{path} is not a regular file")
                return fd
            if not stat.S_ISDIR(st.st_mode):
                raise FileError("ENOTDIR", f"{path}: {name} is not a directory")
            try:
                stack.append(os.open(name, _DIR_FLAGS, dir_fd=stack[-1]))
            except OSError as exc:
                raise _os_error(exc, path) from None
        raise FileError("EISDIR", f"{path} is a directory")
    finally:
        for fd in stack:
            os.close(fd)


class BoundedRead:
    """Reads at most ``max_bytes`` of one file in chunks; afterwards ``size`` and ``truncated`` are known."""

    def __init__(self, root: str, path: str, max_bytes: int, chunk: int = 256 * 1024) -> None:
        if not 0 <= max_bytes <= MAX_FILES_READ:
            raise FileError("EINVAL", f"max_bytes must be within 0..{MAX_FILES_READ}")
        self.max_bytes = max_bytes
        self.chunk = chunk
        self.size = 0
        self.truncated = False
        self._fd: int | None = open_in_workspace(root, path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def chunks(self) -> Iterator[bytes]:
        fd = self._fd
        if fd is None:
            return
        try:
            while self.size < self.max_bytes:
                data = os.read(fd, min(self.chunk, self.max_bytes - self.size))
                if not data:
                    return
                self.size += len(data)
                yield data
            self.truncated = bool(os.read(fd, 1))
        except OSError as exc:
            raise _os_error(exc, "read") from None
        finally:
            self.close()
