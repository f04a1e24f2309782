"""Reading, writing and parsing cgroup interface files (v1 and v2 alike), and waiting for a v2 events file.

``statfs_magic`` tells a cgroup file system from any other. Every read is bounded. Two kernel formats are parsed, both strictly:

* flat keyed files (``cgroup.events``, ``memory.events``, ``pids.events``, ``cpu.stat``, v1's
  ``memory.oom_control``): one ``<key> <unsigned decimal>`` per line. A file with any other line (a blank line, a
  sign, a second space, a key twice, a value past 2**64 - 1) is refused whole with ``CgroupFileError``; keys the
  reader does not know are returned like the others (newer kernels add keys) and ignored by the callers, which
  pick only the keys they name.
* ``/proc/<pid>/cgroup``: ``<hierarchy id>:<controllers>:<path>`` per line; the v2 line is ``0::<path>``.
"""

from __future__ import annotations

import ctypes
import os
import re
import select
import time
from dataclasses import dataclass
from pathlib import Path

READ_LIMIT = 64 * 1024  # a flat keyed file or a limit: a few hundred bytes in practice
PROCS_READ_LIMIT = 4 * 1024 * 1024  # cgroup.procs: 8 bytes a pid, so about half a million processes
MAX_COUNTER = (1 << 64) - 1
CGROUP2_SUPER_MAGIC = 0x63677270
CGROUP_SUPER_MAGIC = 0x27E0EB  # a v1 hierarchy

_FLAT_LINE = re.compile(r"([a-z][a-z0-9_]{0,63}) (0|[1-9][0-9]{0,19})")
_PROC_CGROUP_LINE = re.compile(r"(0|[1-9][0-9]{0,9}):([A-Za-z0-9_=,]*):(/[^\n]*)")


_libc = ctypes.CDLL(None, use_errno=True)


class CgroupFileError(ValueError):
    """A cgroup file did not hold what the kernel writes there."""


def statfs_magic(path: Path) -> int | None:
    """The file system type (``f_type`` of statfs(2)) of ``path``; None when it cannot be read."""
    buffer = ctypes.create_string_buffer(256)  # struct statfs: 120 bytes on 64-bit Linux, f_type (a long) first
    if _libc.statfs(os.fsencode(path), buffer) != 0:
        return None
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


def read_file(path: Path, limit: int = READ_LIMIT) -> str:
    """The file's text, at most ``limit`` bytes (``CgroupFileError`` when there is more); ``OSError`` as raised."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > limit:
        raise CgroupFileError(f"{path} holds more than {limit} bytes")
    return data.decode("ascii", "replace")


def write_file(path: Path | str, value: int | str) -> None:
    """Write one value as the shell's ``echo VALUE > FILE`` does (a cgroup file takes each write whole)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def parse_flat_keyed(text: str) -> dict[str, int]:
    """A flat keyed cgroup file as {key: value} (see the module docstring for what is refused)."""
    found: dict[str, int] = {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    for number, line in enumerate(lines, 1):
        match = _FLAT_LINE.fullmatch(line)
        if match is None:
            raise CgroupFileError(f"line {number} is not '<key> <count>': {line[:80]!r}")
        key, value = match.group(1), int(match.group(2))
        if value > MAX_COUNTER:
            raise CgroupFileError(f"line {number}: {key} is past 2**64 - 1")
        if key in found:
            raise CgroupFileError(f"line {number}: {key} appears twice")
        found[key] = value
    return found


def parse_pids(text: str) -> set[int]:
    """``cgroup.procs``: one positive decimal pid per line; anything else is refused."""
    pids = set()
    for word in text.split("\n"):
        if not word:
            continue
        if not word.isascii() or not word.isdigit() or word.startswith("0") or len(word) > 10:
            raise CgroupFileError(f"not a pid in cgroup.procs: {word[:40]!r}")
        pids.add(int(word))
    return pids


@dataclass(frozen=True)
class ProcCgroupLine:
    """One line of ``/proc/<pid>/cgroup``."""

    hierarchy: int
    controllers: tuple[str, ...]  # v1: the hierarchy's controllers (``name=systemd`` too); v2: ()
    path: str  # absolute, relative to the hierarchy's root (as the reader's cgroup namespace sees it)


def parse_proc_cgroup(text: str) -> list[ProcCgroupLine]:
    """``/proc/<pid>/cgroup`` as its lines; a line of another shape refuses the whole file."""
    found = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, 1):
        match = _PROC_CGROUP_LINE.fullmatch(line)
        if match is None:
            raise CgroupFileError(f"line {number} of /proc/self/cgroup is not 'id:controllers:/path': {line[:80]!r}")
        controllers = tuple(match.group(2).split(",")) if match.group(2) else ()
        if "" in controllers:
            raise CgroupFileError(f"line {number} of /proc/self/cgroup names an empty controller")
        found.append(ProcCgroupLine(int(match.group(1)), controllers, match.group(3)))
    return found


def own_cgroup_lines(pid: int | str = "self") -> list[ProcCgroupLine]:
    """This process's (or ``pid``'s) cgroups; [] when /proc cannot say."""
    try:
        return parse_proc_cgroup(read_file(Path(f"/proc/{pid}/cgroup")))
    except (OSError, CgroupFileError):
        return []


def wait_for_key(path: Path, key: str, value: int, timeout: float) -> bool:
    """Block until the flat keyed file ``path`` says ``key value`` (True) or ``timeout`` seconds pass (False).

    A v2 events file (``cgroup.events``) notifies a change with POLLPRI; each read arms the next notification,
    so a change between the read and the poll wakes the poll at once. Runs on a thread (``asyncio.to_thread``).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLPRI | select.POLLERR)
        deadline = time.monotonic() + timeout
        while True:
            os.lseek(fd, 0, os.SEEK_SET)
            if parse_flat_keyed(os.read(fd, READ_LIMIT).decode("ascii", "replace")).get(key) == value:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            poller.poll(max(1, int(left * 1000)))
    finally:
        os.close(fd)


def tokens(path: Path) -> set[str]:
    """The space-separated words of a v2 list file (``cgroup.controllers``, ``cgroup.subtree_control``); an
    absent or unreadable file lists nothing."""
    try:
        return set(read_file(path).split())
    except (OSError, CgroupFileError):
        return set()
