"""``/proc/<pid>/mountinfo`` read strictly: which mounts a mount namespace holds, where, from which device.

The kernel writes one line per mount (proc(5)): mount id, parent id, ``major:minor``, the root of the mount within
its file system (or, for a namespace file, its name), the mount point, the mount's options, optional fields ended by ``-``, the file system type, the
source and the super block's options. Paths have space, tab, newline and backslash written as ``\\ooo`` octal
escapes; nothing else is escaped. A line that does not have this shape is an error, never skipped: the callers
unmount by what they read here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

MAX_MOUNTINFO_BYTES = 16 << 20  # a namespace with tens of thousands of mounts still fits
_ESCAPE = re.compile(rb"\\([0-7]{3})")
_ESCAPED = {b" ": b"\\040", b"\t": b"\\011", b"\n": b"\\012", b"\\": b"\\134"}
_DEVICE = re.compile(rb"^(\d{1,10}):(\d{1,10})$")


class MountinfoError(ValueError):
    """A mountinfo line is not of the kernel's shape."""


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo. ``root`` and ``mount_point`` are bytes (a path need not be UTF-8)."""

    mount_id: int
    parent_id: int
    major: int
    minor: int
    root: bytes
    mount_point: bytes
    options: frozenset[bytes]  # per-mount options: ro/rw, nosuid, nodev, noexec, relatime …
    fstype: bytes
    source: bytes
    super_options: bytes

    def below(self, directory: bytes) -> bool:
        """Whether this mount's point lies strictly below ``directory`` (an absolute path, no trailing slash)."""
        prefix = directory.rstrip(b"/") + b"/"
        return self.mount_point.startswith(prefix) and self.mount_point != prefix  # "/" is not below "/"


def escape(path: bytes) -> bytes:
    """A path as the kernel writes it in mountinfo."""
    return b"".join(_ESCAPED.get(path[i:i + 1], path[i:i + 1]) for i in range(len(path)))


def unescape(field: bytes) -> bytes:
    """The path behind a mountinfo field (``\\ooo`` octal escapes decoded)."""
    return _ESCAPE.sub(lambda match: bytes([int(match.group(1), 8) & 0xFF]), field)


def parse_line(line: bytes) -> Mount:
    fields = line.split(b" ")
    try:
        separator = fields.index(b"-", 6)
    except ValueError:
        raise MountinfoError(f"no '-' separator in mountinfo line {line[:200]!r}") from None
    if len(fields) != separator + 4:
        raise MountinfoError(f"mountinfo line has {len(fields) - separator - 1} fields after '-', not 3: "
                             f"{line[:200]!r}")
    device = _DEVICE.match(fields[2])
    # the root is a path within the file system, or for a namespace file something like "net:[4026532186]"
    if not (fields[0].isdigit() and fields[1].isdigit() and device and fields[3] and fields[4].startswith(b"/")):
        raise MountinfoError(f"malformed mountinfo line {line[:200]!r}")
    return Mount(int(fields[0]), int(fields[1]), int(device.group(1)), int(device.group(2)), unescape(fields[3]),
                 unescape(fields[4]), frozenset(fields[5].split(b",")), unescape(fields[separator + 1]),
                 unescape(fields[separator + 2]), fields[separator + 3])


def parse(text: bytes) -> list[Mount]:
    """Every mount of a mountinfo file's bytes, in the kernel's order (parents before children)."""
    if text and not text.endswith(b"\n"):
        raise MountinfoError("mountinfo does not end with a newline (cut short?)")
    return [parse_line(line) for line in text.split(b"\n")[:-1]] if text else []


def read(pid: int | str = "self") -> list[Mount]:
    """The mounts of ``pid``'s mount namespace (bounded read)."""
    fd = os.open(f"/proc/{pid}/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_MOUNTINFO_BYTES:
                raise MountinfoError(f"/proc/{pid}/mountinfo is over {MAX_MOUNTINFO_BYTES} bytes")
    finally:
        os.close(fd)
    return parse(b"".join(chunks))


def points_below(mounts: list[Mount], directory: str | bytes) -> list[bytes]:
    """Mount points strictly below ``directory``, deepest first (the order to unmount them in), each once."""
    wanted = os.fsencode(directory)
    found = {mount.mount_point for mount in mounts if mount.below(wanted)}
    return sorted(found, key=lambda point: (-point.count(b"/"), point))
