"""cgroups for boxes: the interface every host kind implements, and the choice of implementation for this host.

A box gets its own group (``tkbox/<box_id>``) with its limits written before it starts; the launcher moves
itself (bwrap) or PID 1 (ns) into the group before any of the job runs, so every box process is born inside.
Two implementations stand behind ``BoxCgroup``:

* ``cgroups_v1.py``: the v1 hierarchies (memory with memsw, pids, cpu, freezer) mounted under the root;
* ``cgroups_v2.py``: the unified hierarchy (``memory.max`` and ``memory.swap.max``, ``pids.max``, ``cpu.max``,
  ``cgroup.freeze``, ``cgroup.kill``, ``cgroup.events``), in a subtree the daemon prepares (``cgroups_v2_tree.py``).

``detect_hierarchy`` tells the host kind from the file system at the root (statfs magic): ``v2`` when the root
itself is a cgroup2 mount, ``hybrid`` when v1 controllers sit beside a cgroup2 ``unified`` mount (tkbox then uses
v1: that is where the controllers are), ``v1``, or ``none``. A limit the host cannot enforce is skipped with one
warning naming it, and the box still starts (pause then falls back to signals, kill to the pid namespace).

The root is ``/sys/fs/cgroup`` unless ``configure_root`` (the daemon's ``--cgroup-root``, used by the tests to
point the daemon at a cgroup2 mount of their own) says otherwise.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from tkbox_daemon.box.backend import BoxLimits
from tkbox_daemon.box.cgroups_files import (
    CGROUP2_SUPER_MAGIC,
    CgroupFileError,
    own_cgroup_lines,
    parse_flat_keyed,
    statfs_magic,
    write_file,
)

log = logging.getLogger("tkbox.box.cgroups")

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_GROUP = "tkbox"
CONTROLLERS = ("memory", "pids", "cpu", "freezer")  # v1 hierarchy names; also the words of ``BoxCgroup.missing``
STATS_ONLY_CONTROLLERS = ("cpuacct",)
FREEZE_TIMEOUT_S = 10.0
HIERARCHY_KINDS = ("v2", "hybrid", "v1", "none")
WHAT_IS_LOST = {
    "memory": "memory limits are not enforced",
    "pids": "process-count limits are not enforced",
    "cpu": "CPU shares and quotas are not enforced",
    "freezer": "pause uses SIGSTOP/SIGCONT of each box process instead of the freezer",
}
_warned: set[str] = set()
_configured_root: Path | None = None
_hosts: dict[Path, CgroupHost] = {}


def requested_controllers(limits: BoxLimits) -> dict[str, bool]:
    """Which limit controllers ``limits`` needs (memory, pids, cpu): a box warns for each it needs and lacks."""
    return {"memory": limits.memory_bytes is not None, "pids": limits.pids_max is not None,
            "cpu": limits.cpu_shares is not None or limits.cpu_quota_us is not None}


def counters(text: str | None, name: str, version: str) -> dict[str, int]:
    """A flat-keyed cgroup file's counters (``{}`` when unread); a file not as the kernel writes it is warned about
    once and counts nothing."""
    if text is None:
        return {}
    try:
        return parse_flat_keyed(text)
    except CgroupFileError as error:
        warn_once(f"{version}-parse-{name}", f"cgroup file {name} is not as the kernel writes it ({error}); "
                                             "its counts are left out of box stats")
        return {}


def applied(box: BoxCgroup, limits: BoxLimits, version: str, where: str = "") -> BoxCgroup:
    """``box`` with ``limits`` applied, after one warning per controller it lacks (``where``: the group boxes
    live in, when it says more than the version)."""
    for name in box.missing:
        place = f" to boxes at {where}" if where else ""
        warn_once(f"{version}-missing-{name}", f"cgroup {version} controller {name} is not available{place}: "
                                               f"{WHAT_IS_LOST[name]} for boxes on this host")
    box.apply(limits)
    return box


def warn_once(key: str, message: str) -> None:
    """Log ``message`` once per daemon (a host fact, not a per-box one)."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


@dataclass(frozen=True)
class GuardFiles:
    """What a launcher's guard writes besides ``cgroup.procs`` (it runs forked, without the daemon's objects).

    ``leave_to``: the ``cgroup.procs`` a launcher that joined the box moves itself back to once the box exists, so
    pausing the box never pauses its guard. ``thaw``: (file, text) the guard writes after killing the box (a
    frozen v1 task dies only once thawed). ``kill``: v2's ``cgroup.kill``, written by a guard that is not itself
    in the box's group (it would kill the guard too).
    """

    leave_to: str | None = None
    thaw: tuple[str, str] | None = None
    kill: str | None = None


@dataclass(frozen=True)
class CgroupSummary:
    """What boxes get from cgroups on this host (``tkbox doctor``, the probe)."""

    kind: str  # one of HIERARCHY_KINDS
    version: str  # the implementation boxes use: "v1", "v2" or "none"
    enforced: tuple[str, ...]  # of memory, pids, cpu
    pause: str  # "freezer" (the kernel stops every process) or "signals" (SIGSTOP to each)
    kill: str  # "cgroup.kill", "cgroup" (SIGKILL to every member) or "pid namespace"
    detail: dict[str, object] = field(default_factory=dict)

    @property
    def not_enforced(self) -> tuple[str, ...]:
        return tuple(name for name in ("memory", "pids", "cpu") if name not in self.enforced)


class BoxCgroup(ABC):
    """The cgroup(s) of one box."""

    box_id: str
    missing: list[str]  # of CONTROLLERS: what this box goes without (``freezer``: pause by signals)

    @classmethod
    def create(cls, box_id: str, limits: BoxLimits, root: Path | None = None) -> BoxCgroup:
        """Make the box's group on the host at ``root`` and apply ``limits``; raises ``BoxError`` if a live
        group has this id."""
        return host(root).create(box_id, limits)

    @abstractmethod
    def apply(self, limits: BoxLimits) -> None:
        """Write ``limits`` into the box's group(s), warning once for each the host cannot enforce."""

    @abstractmethod
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a launcher writes a pid to (one per distinct hierarchy)."""

    def join(self, pid: int) -> None:
        """Move ``pid`` into the box's group(s)."""
        for path in self.procs_files():
            write_file(path, pid)

    @abstractmethod
    def pids(self) -> set[int]:
        """Every process in the box's group(s)."""

    @property
    @abstractmethod
    def has_freezer(self) -> bool:
        """Whether ``set_frozen`` works (else pause falls back to signals)."""

    @abstractmethod
    def guard_files(self) -> GuardFiles:
        """The files the launcher's guard uses (see ``GuardFiles``)."""

    @abstractmethod
    async def set_frozen(self, frozen: bool) -> None:
        """Freeze or thaw the box and wait until the kernel reports it (``BoxError`` after FREEZE_TIMEOUT_S)."""

    @abstractmethod
    def kill_all(self, spare: int | None = None) -> None:
        """SIGKILL every process of the box but ``spare``, so that even a frozen one dies."""

    @abstractmethod
    async def wait_empty(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until no process is left in the box's group(s)."""

    @abstractmethod
    def stats(self) -> dict[str, object]:
        """memory_bytes, memory_peak_bytes, memory_limit_bytes, pids, pids_max, pids_refused, cpu_usage_ns,
        cpu_throttled_periods, cpu_throttled_ns, oom_kills, frozen: each only when the host can say."""

    @abstractmethod
    def oom_kills(self) -> int | None:
        """The kernel's count of the box's out-of-memory kills (one file read), None when the host cannot say."""

    @abstractmethod
    def remove(self) -> bool:
        """Remove the box's group(s); False if one still has processes (then it is left in place)."""


class CgroupHost(ABC):
    """One host's cgroup file systems, as boxes use them."""

    version: ClassVar[str]
    root: Path

    @abstractmethod
    def create(self, box_id: str, limits: BoxLimits) -> BoxCgroup:
        """A fresh group for the box, limits applied (a leftover empty group of the same id is replaced)."""

    @abstractmethod
    def leftover(self, box_id: str) -> BoxCgroup:
        """The group(s) a box of this id left behind (a daemon that died with its boxes)."""

    @abstractmethod
    def summary(self) -> CgroupSummary:
        """What a box gets here, read without changing anything."""


def detect_hierarchy(root: Path) -> str:
    """The host kind at ``root``: ``v2``, ``hybrid``, ``v1`` or ``none`` (see the module docstring)."""
    if statfs_magic(root) == CGROUP2_SUPER_MAGIC:
        return "v2"
    from tkbox_daemon.box.cgroups_v1 import available_controllers as v1_controllers

    if not v1_controllers(root):
        return "none"
    return "hybrid" if statfs_magic(root / "unified") == CGROUP2_SUPER_MAGIC else "v1"


def configure_root(root: Path) -> str:
    """Use the cgroup file systems at ``root`` from now on (the daemon's ``--cgroup-root``); returns its kind.
    Raises ``ValueError`` naming what is wrong when ``root`` holds no cgroup file system."""
    global _configured_root
    if not root.is_absolute() or not root.is_dir():
        raise ValueError(f"cgroup root {root} is not an absolute path of a directory")
    kind = detect_hierarchy(root)
    if kind == "none":
        raise ValueError(f"no cgroup file system at {root}: give the directory where cgroup2 is mounted "
                         "(mount -t cgroup2 none DIR) or where the v1 hierarchies are")
    _configured_root = root
    return kind


def current_root() -> Path:
    """The root boxes use: ``configure_root``'s, else ``/sys/fs/cgroup``."""
    return _configured_root if _configured_root is not None else CGROUP_ROOT


def host(root: Path | None = None) -> CgroupHost:
    """The implementation for the host at ``root`` (default: ``current_root()``), made once per root."""
    root = current_root() if root is None else root
    found = _hosts.get(root)
    if found is None:
        if detect_hierarchy(root) == "v2":
            from tkbox_daemon.box.cgroups_v2_tree import V2Host

            found = V2Host(root)
        else:
            from tkbox_daemon.box.cgroups_v1 import V1Host

            found = V1Host(root)
        _hosts[root] = found
    return found


def forget_host(root: Path) -> None:
    """Drop the cached implementation of ``root`` (a test that unmounts its cgroup2 file system)."""
    _hosts.pop(root, None)


def available_controllers(root: Path | None = None) -> dict[str, Path]:
    """The usable v1 hierarchies by controller name at ``root`` ({} on a v2-only host)."""
    from tkbox_daemon.box.cgroups_v1 import available_controllers as v1_controllers

    return v1_controllers(current_root() if root is None else root)


def leftover_groups(box_id: str, root: Path | None = None) -> BoxCgroup:
    """The groups a box of this id left behind: ``pids()``, ``kill_all()`` and ``remove()`` work on them."""
    return host(root).leftover(box_id)


def own_group_path(controller: str) -> str:
    """This process's group in a v1 hierarchy, from /proc/self/cgroup ("/" when not listed)."""
    for line in own_cgroup_lines():
        if controller in line.controllers:
            return line.path
    return "/"
