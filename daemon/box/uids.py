"""Host uids for boxes: box n runs as host uid ``FIRST_BOX_UID + n``, never 0, never a host account's uid.

A claim is a file ``<registry>/<uid>`` created with O_EXCL that names the box, so two daemons (or a daemon and
its restart) never hand out the same uid twice; releasing removes the file only if it still names that box.
The uid is also used as the box's host gid.
"""

from __future__ import annotations

import os
import pwd
import re
from pathlib import Path

FIRST_BOX_UID = 100_000
DEFAULT_UID_COUNT = 65_536
_MAX_UID = 0xFFFF_FFFE  # (uid_t)-1 is "no uid"
_BOX_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class UidsExhausted(Exception):
    """Every uid of the range is claimed."""


class UidAllocator:
    """Claims and releases box uids in ``[first, first + count)`` through a registry directory."""

    def __init__(self, registry: Path, *, first: int = FIRST_BOX_UID, count: int = DEFAULT_UID_COUNT) -> None:
        if first < FIRST_BOX_UID or count < 1 or first + count - 1 > _MAX_UID:
            raise ValueError(f"box uids must lie in [{FIRST_BOX_UID}, {_MAX_UID}]")
        self.registry = Path(registry)
        self.first = first
        self.count = count
        self.registry.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.registry.is_symlink() or not self.registry.is_dir():
            raise ValueError(f"uid registry {self.registry} is not a directory")

    def allocate(self, box_id: str) -> int:
        """Claim the lowest free uid for ``box_id``; raises ``UidsExhausted`` when none is left."""
        if not _BOX_ID.match(box_id):
            raise ValueError(f"invalid box id {box_id!r}")
        claimed = self.claimed()
        for uid in range(self.first, self.first + self.count):
            if uid in claimed or _is_host_account(uid):
                continue
            try:
                fd = os.open(self.registry / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                continue  # another allocator won the race for this one
            try:
                os.write(fd, box_id.encode() + b"\n")
            finally:
                os.close(fd)
            return uid
        raise UidsExhausted(f"all {self.count} box uids from {self.first} are in use")

    def release(self, uid: int, box_id: str) -> bool:
        """Give ``uid`` back if ``box_id`` holds it; False when it did not."""
        if self.owner(uid) != box_id:
            return False
        try:
            os.unlink(self.registry / str(uid))
        except FileNotFoundError:
            return False
        return True

    def owner(self, uid: int) -> str | None:
        """The box holding ``uid``, or None."""
        if not self.first <= uid < self.first + self.count:
            return None
        try:
            fd = os.open(self.registry / str(uid), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, OSError):
            return None
        try:
            return os.read(fd, 128).decode("ascii", "replace").strip() or None
        finally:
            os.close(fd)

    def claimed(self) -> dict[int, str]:
        """Every claim in the registry: uid -> box id."""
        out: dict[int, str] = {}
        for entry in os.scandir(self.registry):
            if entry.name.isdigit() and not entry.name.startswith("0"):
                uid = int(entry.name)
                owner = self.owner(uid)
                if owner is not None:
                    out[uid] = owner
        return out


def _is_host_account(uid: int) -> bool:
    """True when the host already has a user with this uid (then a box must not share it)."""
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
