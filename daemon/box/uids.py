"""Host uids for boxes, claimed host-wide: no two boxes of any daemons on this host ever run as the same uid.

Every claim is a file ``<registry>/<uid>`` (``uid_claims.py``: the box, and the daemon that claimed it) in one
registry for the whole host, ``/var/lib/tkbox/uids`` by default: a directory of root's that no one else may write
(checked, with the fix in the error), holding a lock file ``.lock``. Claiming, releasing and reclaiming happen
under an exclusive ``flock`` of it, so daemons in different processes never race; a claim is written to a temporary
file and linked into place, so it is whole or absent. A uid is handed out only if no claim names it, no host user
or group has it, no range of ``/etc/subuid`` or ``/etc/subgid`` holds it (read again at each claim when they
changed; a line that cannot be read stops every claim until it is fixed) and no live process runs with it (as any
of its uids or gids). The uid is also the box's host gid; uid 0 is impossible (the range starts at 100000).

Only the daemon that made a claim releases it (its box id and daemon name must match). A claim of another daemon
is reclaimed only when provably stale: the process that wrote it no longer runs, no process runs with the uid,
and that daemon's box registry names the box no more.

A daemon that is not root cannot write the host-wide registry (and cannot run a box as another uid at all: both
box backends need root); it is refused at start. Tests give a registry of their own (``DaemonPaths.uid_registry``
or the ``registry`` argument), which may then belong to the daemon's own user.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import secrets
import stat
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tkbox_daemon.box.host_ids import HostIds
from tkbox_daemon.box.subids import IdRanges, SubidFileError
from tkbox_daemon.box.uid_claims import (
    BOX_ID,
    MAX_CLAIM_BYTES,
    Claim,
    ClaimError,
    ClaimHolder,
    encode_claim,
    parse_claim,
)
from tkbox_daemon.signer.paths import PathError

FIRST_BOX_UID = 100_000
DEFAULT_UID_COUNT = 1 << 24  # wide enough to step past every subordinate range a host hands out
HOST_UID_REGISTRY = Path("/var/lib/tkbox/uids")
LOCK_NAME = ".lock"
_TEMP_PREFIX = ".claim-"
_MAX_UID = 0xFFFF_FFFE  # (uid_t)-1 is "no uid"
_UID_NAME = re.compile(r"[1-9][0-9]{0,9}\Z", re.ASCII)
_ONLY_ROOT = ("box uids are claimed host-wide, and only root may write their registry: run the daemon as root "
              "(both box backends need root too)")

log = logging.getLogger("tkbox.box")


class UidsExhausted(Exception):
    """Every uid of the range is claimed or used by the host."""


class UidRegistryError(PathError):
    """No uid can be claimed: the registry or the host's sub-id files cannot be used; the message says the fix."""


@dataclass
class ClaimListing:
    """Every claim in the registry, and the uids whose claim file cannot be read (never handed out, never freed)."""

    claims: dict[int, Claim] = field(default_factory=dict)
    unreadable: dict[int, str] = field(default_factory=dict)


def _check_ancestors(path: Path, owners: set[int]) -> None:
    """Each directory above the registry is owned by ``owners`` and writable by no one else unless sticky (``/tmp``),
    so no other user can move the registry away or put another in its place."""
    for ancestor in path.parents:
        try:
            info = os.lstat(ancestor)
        except OSError as exc:
            raise UidRegistryError(f"{ancestor} (above the uid registry {path}) cannot be examined ({exc.strerror}): "
                                   f"{_ONLY_ROOT if os.geteuid() else 'fix it'}") from None
        writable = info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX
        if not stat.S_ISDIR(info.st_mode) or info.st_uid not in owners or writable:
            mode = stat.S_IMODE(info.st_mode)
            raise UidRegistryError(f"{ancestor} (above the uid registry {path}) must be a directory of root's that "
                                   f"no one else may write (it is uid {info.st_uid}'s, mode {mode:o})")


def _open_registry(registry: Path) -> int:
    euid = os.geteuid()
    owners = {0, euid}
    path = Path(os.path.realpath(Path(registry).absolute().parent)) / Path(registry).name
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        hint = _ONLY_ROOT if euid else "fix the directory above it"
        raise UidRegistryError(f"the uid registry {path} cannot be made ({exc.strerror}): {hint}") from None
    _check_ancestors(path, owners)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink, or a file where the directory should be
            raise UidRegistryError(f"the uid registry {path} is a symbolic link or not a directory: remove it, and "
                                   "the daemon makes the directory") from None
        hint = _ONLY_ROOT if euid else "fix its owner and mode"
        raise UidRegistryError(f"the uid registry {path} cannot be opened ({exc.strerror}): {hint}") from None
    info = os.fstat(fd)
    if info.st_uid not in owners or info.st_mode & 0o022:
        os.close(fd)
        mode = stat.S_IMODE(info.st_mode)
        raise UidRegistryError(f"the uid registry {path} must be root's and writable by no one else (it is uid "
                               f"{info.st_uid}'s, mode {mode:o}): run chown root:root {path} && chmod 700 {path}")
    return fd


def _close_all(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class UidAllocator:
    """Claims and releases box uids in ``[first, first + count)`` in a host-wide registry, for ``holder``."""

    def __init__(self, registry: Path = HOST_UID_REGISTRY, *, holder: ClaimHolder | None = None,
                 first: int = FIRST_BOX_UID, count: int = DEFAULT_UID_COUNT, host: HostIds | None = None) -> None:
        if first < FIRST_BOX_UID or count < 1 or first + count - 1 > _MAX_UID:
            raise ValueError(f"box uids must lie in [{FIRST_BOX_UID}, {_MAX_UID}]")
        self.registry = Path(registry)
        self.holder = holder or ClaimHolder.this_process()
        self.first, self.count = first, count
        self.host = host or HostIds()
        self._dir_fd = _open_registry(self.registry)
        try:
            self._lock_fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                                    dir_fd=self._dir_fd)
        except OSError as exc:
            os.close(self._dir_fd)
            raise UidRegistryError(f"the lock {self.registry / LOCK_NAME} cannot be opened ({exc.strerror}): "
                                   f"{_ONLY_ROOT if os.geteuid() else 'remove it'}") from None
        self._closer = weakref.finalize(self, _close_all, self._lock_fd, self._dir_fd)
        self._reported: set[tuple[int, str]] = set()
        self._thread_lock = threading.Lock()

    def close(self) -> None:
        self._closer()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # flock excludes other open files of the lock (other allocators, other processes); threads sharing this
        # allocator share its open file, so they take the thread lock first.
        with self._thread_lock:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)  # held only while the registry is read or written
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def allocate(self, box_id: str) -> int:
        """Claim the lowest free uid for ``box_id``. Raises ``UidsExhausted`` when none is left, and
        ``UidRegistryError`` while ``/etc/subuid`` or ``/etc/subgid`` cannot be read whole."""
        return self._allocate(box_id, 1)[0]

    def allocate_pair(self, box_id: str) -> tuple[int, int]:
        """Claim the two lowest free uids for ``box_id`` (a box's guest and its jobs), both or neither, in one pass
        (one read of the registry and of the host's processes, which is most of a claim's cost). Raises as
        ``allocate``."""
        first, second = self._allocate(box_id, 2)
        return first, second

    def _allocate(self, box_id: str, count: int) -> list[int]:
        if not BOX_ID.match(box_id):
            raise ValueError(f"invalid box id {box_id!r}")
        with self._locked():
            ranges = self._subid_ranges()
            listing = self._list()
            in_use = self.host.processes()
            uids = self._free(listing, ranges, in_use, count)
            if uids is None and self._reclaim(listing, in_use):
                uids = self._free(self._list(), ranges, in_use, count)
            if uids is None:
                raise UidsExhausted(f"all {self.count} box uids from {self.first} are claimed or used by the host; "
                                    f"remove boxes you no longer need (tkbox rm)")
            written: list[int] = []
            try:
                for uid in uids:
                    try:
                        self._write(Claim(uid, box_id, self.holder))
                    except FileExistsError:
                        raise UidRegistryError(f"uid {uid} was claimed in {self.registry} without its lock: something "
                                               "other than tkbox writes there; find it and stop it") from None
                    written.append(uid)
            except BaseException:
                for uid in written:  # both or neither
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(str(uid), dir_fd=self._dir_fd)
                raise
            return uids

    def _free(self, listing: ClaimListing, ranges: IdRanges, in_use: set[int], count: int) -> list[int] | None:
        """The ``count`` lowest free uids, or None when there are fewer."""
        found: list[int] = []
        while len(found) < count:
            uid = self._first_free(listing, ranges, in_use | set(found))
            if uid is None:
                return None
            found.append(uid)
        return found

    def release(self, uid: int, box_id: str) -> bool:
        """Give ``uid`` back if ``box_id`` of this holder's daemon holds it; False when it did not."""
        with self._locked():
            claim = self._read(str(uid)) if _UID_NAME.match(str(uid)) else None
            if not isinstance(claim, Claim) or claim.box != box_id or claim.holder.daemon != self.holder.daemon:
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(uid), dir_fd=self._dir_fd)
                return True
            return False

    def owner(self, uid: int) -> str | None:
        """The box holding ``uid`` (for any daemon), or None."""
        with self._locked():
            claim = self._read(str(uid)) if _UID_NAME.match(str(uid)) else None
        return claim.box if isinstance(claim, Claim) else None

    def claimed(self) -> dict[int, str]:
        """This holder's daemon's claims: uid -> box id."""
        with self._locked():
            listing = self._list()
        return {uid: claim.box for uid, claim in listing.claims.items() if claim.holder.daemon == self.holder.daemon}

    def listing(self) -> ClaimListing:
        """Every claim in the registry, of every daemon."""
        with self._locked():
            return self._list()

    def reclaim_stale(self) -> list[Claim]:
        """Free the claims of other daemons that are provably stale (see the module docstring); returns them."""
        with self._locked():
            return self._reclaim(self._list(), self.host.processes())

    def _subid_ranges(self) -> IdRanges:
        try:
            files = self.host.subid_files()
        except SubidFileError as exc:
            raise UidRegistryError(f"no box uid can be claimed: {exc}; tkbox must know which ids the host gave "
                                   "away") from None
        problems = "; ".join(file.describe_problems() for file in files if file.problems)
        if problems:
            raise UidRegistryError(f"no box uid can be claimed: {problems}. Fix or delete those lines (each is "
                                   "NAME_OR_UID:START:COUNT, in decimal): tkbox cannot tell which ids they give away")
        return HostIds.ranges(files)

    def _first_free(self, listing: ClaimListing, ranges: IdRanges, in_use: set[int]) -> int | None:
        taken = listing.claims.keys() | listing.unreadable.keys()
        uid, end = self.first, self.first + self.count
        while uid < end:
            past = ranges.end_of(uid)
            if past != uid:
                uid = past  # past a subordinate range in one step
                continue
            if uid not in taken and uid not in in_use and self.host.account(uid) is None:
                return uid
            uid += 1
        return None

    def _reclaim(self, listing: ClaimListing, in_use: set[int]) -> list[Claim]:
        freed = []
        for uid, claim in sorted(listing.claims.items()):
            holder = claim.holder
            if holder.daemon == self.holder.daemon:
                continue  # one's own claims are the daemon's to settle (``recovery.py``)
            if uid in in_use or holder.running() or holder.names_box(claim.box):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(uid), dir_fd=self._dir_fd)
                freed.append(claim)
                log.info("uid %d reclaimed from box %s of %s: that daemon is gone and so is the box", uid, claim.box,
                         holder.daemon)
        return freed

    def _list(self) -> ClaimListing:
        listing = ClaimListing()
        for entry in os.scandir(self._dir_fd):
            name = entry.name
            if name.startswith(_TEMP_PREFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=self._dir_fd)  # a claim cut short: every write happens under the lock
                continue
            if not _UID_NAME.match(name) or int(name) > _MAX_UID:
                continue
            claim = self._read(name)
            if isinstance(claim, Claim):
                listing.claims[claim.uid] = claim
            elif claim is not None:
                listing.unreadable[int(name)] = claim
                if (int(name), claim) not in self._reported:
                    self._reported.add((int(name), claim))
                    log.warning("uid claim %s cannot be read (%s): the uid stays taken until the file is mended or "
                                "deleted by hand", self.registry / name, claim)
        return listing

    def _read(self, name: str) -> Claim | str | None:
        """The claim in file ``name``, why it cannot be read, or None when there is none."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=self._dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"cannot be opened: {exc.strerror}"
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return "not a regular file"
            data = os.read(fd, MAX_CLAIM_BYTES + 1)
        except OSError as exc:
            return f"cannot be read: {exc.strerror}"
        finally:
            os.close(fd)
        try:
            return parse_claim(data, uid=int(name))
        except ClaimError as exc:
            return str(exc)

    def _write(self, claim: Claim) -> None:
        temp = f"{_TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=self._dir_fd)
        try:
            try:
                os.write(fd, encode_claim(claim))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(temp, str(claim.uid), src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)  # whole, or not at all
        finally:
            os.unlink(temp, dir_fd=self._dir_fd)
