"""Which ids the host already uses, so no box is handed one: accounts (``pwd``), groups (``grp``), the subordinate
ranges of ``/etc/subuid`` and ``/etc/subgid``, and the ids any live process runs with (``/proc``); and whether a
process named by pid, start time and boot is still the one that was.

A box's uid is also its gid, so each id is checked against users and groups, uids and gids alike.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
from collections.abc import Callable
from pathlib import Path

from tkbox_daemon.box.subids import IdRanges, SubidFile, SubidReader

STATUS_READ = 4096  # bytes of /proc/<pid>/status read: the Uid and Gid lines come early
STAT_READ = 4096  # bytes of /proc/<pid>/stat read
SUBUID = Path("/etc/subuid")
SUBGID = Path("/etc/subgid")
_BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def _read_bounded(path: str, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def account_of(ident: int) -> str | None:
    """``user NAME`` or ``group NAME`` when the host has an account or group with this id, else None."""
    try:
        return f"user {pwd.getpwuid(ident).pw_name}"
    except KeyError:
        pass
    try:
        return f"group {grp.getgrgid(ident).gr_name}"
    except KeyError:
        return None


def process_ids(proc: Path = Path("/proc")) -> set[int]:
    """Every uid and gid (real, effective, saved, file system) some live process of the host holds right now."""
    found: set[int] = set()
    try:
        entries = [entry.name for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return found
    for pid in entries:
        try:
            status = _read_bounded(f"{proc}/{pid}/status", STATUS_READ)
        except OSError:
            continue  # gone meanwhile
        for line in status.split(b"\n"):
            if line.startswith((b"Uid:", b"Gid:")):
                found.update(int(field) for field in line.split()[1:] if field.isdigit())
    return found


def boot_id() -> str:
    """This boot's id (a pid and start time name one process only within one boot)."""
    try:
        text = _read_bounded("/proc/sys/kernel/random/boot_id", 64).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if _BOOT_ID.match(text) else ""


def process_start(pid: int, proc: Path = Path("/proc")) -> int | None:
    """When ``pid`` started (clock ticks after boot), or None when no live process (a zombie is not) has it."""
    try:
        data = _read_bounded(f"{proc}/{pid}/stat", STAT_READ)
    except OSError:
        return None
    fields = data.rpartition(b")")[2].split()  # after the command name, which may hold spaces and parentheses
    if len(fields) < 20 or fields[0] in (b"Z", b"X") or not fields[19].isdigit():
        return None
    return int(fields[19])  # field 22 of stat(5); fields[0] is field 3


def is_running(pid: int, start: int, boot: str) -> bool:
    """Whether the process that had ``pid`` at ``start`` in boot ``boot`` still runs (not a later one of that pid)."""
    return boot == boot_id() and process_start(pid) == start


class HostIds:
    """The host's view of ids for the allocator; every source is injectable so tests can stand in for the host."""

    def __init__(self, *, subuid: Path = SUBUID, subgid: Path = SUBGID,
                 account: Callable[[int], str | None] = account_of,
                 processes: Callable[[], set[int]] = process_ids) -> None:
        self._readers = (SubidReader(subuid), SubidReader(subgid))
        self.account = account
        self.processes = processes

    def subid_files(self) -> tuple[SubidFile, ...]:
        """Both files as they are now (read again only if changed); raises ``SubidFileError``."""
        return tuple(reader.read() for reader in self._readers)

    @staticmethod
    def ranges(files: tuple[SubidFile, ...]) -> IdRanges:
        return IdRanges(r for file in files for r in file.ranges)
