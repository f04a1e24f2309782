"""cgroup v2: the subtree a daemon's boxes live in on the unified hierarchy, ``<parent>/tkbox``.

The parent is the daemon's own group when that group is delegated to it (systemd's ``Delegate=yes`` marks it
with the ``trusted.delegate`` or ``user.delegate`` extended attribute), else the root of the mount. Controllers
(memory, pids, cpu) are enabled through ``cgroup.subtree_control`` on the parent and on ``tkbox``. The
no-internal-process rule forbids enabling controllers below a non-root group that holds processes, so in a
delegated group the daemon first moves itself into a leaf, ``daemon``; ``tkbox`` itself never holds a process.
A controller the host does not offer, or that cannot be enabled, is skipped with one warning naming the limit
that is therefore not enforced. Each box's group is ``cgroups_v2.BoxCgroupV2``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tkbox_daemon.box.backend import BoxError, BoxLimits
from tkbox_daemon.box.cgroups import PARENT_GROUP, WHAT_IS_LOST, CgroupHost, CgroupSummary, applied, warn_once
from tkbox_daemon.box.cgroups_files import PROCS_READ_LIMIT, own_cgroup_lines, read_file, tokens, write_file
from tkbox_daemon.box.cgroups_v2 import LIMIT_CONTROLLERS, BoxCgroupV2

DAEMON_LEAF = "daemon"  # the daemon's own leaf in a delegated group (box groups live under tkbox/, never here)
DELEGATE_XATTRS = ("trusted.delegate", "user.delegate")
FREEZE_SINCE = (5, 2)  # kernel versions that brought cgroup.freeze and cgroup.kill
KILL_SINCE = (5, 14)

MakeDir = Callable[[Path], None]


def make_dir(path: Path) -> None:
    """mkdir as the kernel's cgroup file system takes it (the group's files appear with it)."""
    os.mkdir(path, 0o755)


def is_delegated(group: Path) -> bool:
    """Whether systemd (or whoever manages the tree) delegated ``group`` to its processes."""
    for name in DELEGATE_XATTRS:
        try:
            if os.getxattr(group, name) == b"1":
                return True
        except OSError:
            continue
    return False


@dataclass(frozen=True)
class Subtree:
    """Where this daemon's boxes go on a v2 mount."""

    parent: Path  # controllers are enabled here and in ``base``
    base: Path  # ``<parent>/tkbox``: the box groups' parent; holds no process
    home: Path  # the daemon's group (a launcher that joined a box goes back here)
    delegated: bool


class V2Host(CgroupHost):
    """The unified hierarchy mounted at ``mount``. ``own`` (the daemon's group, default from /proc/self/cgroup),
    ``make_dir`` and ``self_pid`` are injectable so tests can point it at a directory imitating a v2 mount."""

    version = "v2"

    def __init__(self, mount: Path, *, own: str | None = None, make_dir: MakeDir = make_dir,
                 self_pid: int | None = None) -> None:
        self.root = mount
        self._own = own
        self._make_dir = make_dir
        self._self_pid = os.getpid() if self_pid is None else self_pid
        self._prepared: Subtree | None = None

    def own_path(self) -> str:
        if self._own is not None:
            return self._own
        for line in own_cgroup_lines():
            if line.hierarchy == 0 and not line.controllers:
                return line.path
        return "/"

    def locate(self) -> Subtree:
        """The subtree, as prepared or as it would be (nothing is written)."""
        if self._prepared is not None:
            return self._prepared
        own = self.own_path()
        own_dir = self.root / own.lstrip("/") if own != "/" else self.root
        delegated = own != "/" and is_delegated(own_dir)
        parent = own_dir if delegated else self.root
        return Subtree(parent, parent / PARENT_GROUP, own_dir, delegated)

    def prepare(self) -> Subtree:
        """Enable the controllers and make ``tkbox`` (once; see the module docstring)."""
        if self._prepared is not None:
            return self._prepared
        tree = self.locate()
        offered = tokens(tree.parent / "cgroup.controllers")
        wanted = [name for name in LIMIT_CONTROLLERS if name in offered]
        for name in LIMIT_CONTROLLERS:
            if name not in offered:
                warn_once(f"v2-{name}", f"cgroup v2 controller {name} is not offered at {tree.parent}: "
                                        f"{WHAT_IS_LOST[name]} for boxes on this host")
        home = tree.home
        if tree.delegated and wanted and read_file(tree.home / "cgroup.procs", PROCS_READ_LIMIT).strip():
            home = self._move_into_leaf(tree.home)
        enabled = _enable(tree.parent, wanted)
        try:
            self._make_dir(tree.base)
        except FileExistsError:
            pass
        _enable(tree.base, enabled)
        self._prepared = Subtree(tree.parent, tree.base, home, tree.delegated)
        return self._prepared

    def _move_into_leaf(self, own_dir: Path) -> Path:
        leaf = own_dir / DAEMON_LEAF
        try:
            self._make_dir(leaf)
        except FileExistsError:
            pass
        write_file(leaf / "cgroup.procs", self._self_pid)
        return leaf

    def create(self, box_id: str, limits: BoxLimits) -> BoxCgroupV2:
        group: Path | None = None
        try:
            tree = self.prepare()
            group = tree.base / box_id
            self._make_fresh(group)
        except OSError as error:
            warn_once("v2-mkdir", f"cannot make a cgroup v2 group for boxes ({error}): boxes run without cgroups")
            group, tree = None, self.locate()
        return applied(BoxCgroupV2(box_id, group, tree.home), limits, "v2", str(tree.base))

    def _make_fresh(self, group: Path) -> None:
        """Create ``group``; a leftover empty group of the same name (a crashed daemon's) is replaced."""
        try:
            self._make_dir(group)
            return
        except FileExistsError:
            pass
        if read_file(group / "cgroup.procs", PROCS_READ_LIMIT).strip():
            raise BoxError(f"cgroup {group} already has processes: box id in use")
        os.rmdir(group)
        self._make_dir(group)

    def leftover(self, box_id: str) -> BoxCgroupV2:
        tree = self.locate()
        group = tree.base / box_id
        return BoxCgroupV2(box_id, group if group.is_dir() else None, tree.home)

    def summary(self) -> CgroupSummary:
        tree = self.locate()
        writable = os.access(tree.parent, os.W_OK)
        if tree.base.is_dir():  # prepared (by this daemon or an earlier one): the kernel's own word
            enforced = tokens(tree.base / "cgroup.subtree_control")
        else:
            enforced = tokens(tree.parent / "cgroup.controllers") if writable else set()
        probe_dirs = [path for path in (tree.base, tree.home) if path != self.root and path.is_dir()]
        freeze = _core_file(probe_dirs, "cgroup.freeze", FREEZE_SINCE) and writable
        kill = _core_file(probe_dirs, "cgroup.kill", KILL_SINCE) and writable
        return CgroupSummary(
            kind="v2", version="v2" if writable else "none",
            enforced=tuple(name for name in LIMIT_CONTROLLERS if name in enforced),
            pause="freezer" if freeze else "signals",
            kill="cgroup.kill" if kill else "cgroup" if writable else "pid namespace",
            detail={"root": str(self.root), "subtree": str(tree.base), "delegated": tree.delegated,
                    "offered": sorted(tokens(tree.parent / "cgroup.controllers")), "writable": writable})


def _enable(group: Path, names: list[str]) -> list[str]:
    """Enable ``names`` for ``group``'s children; returns those enabled (each failure warned once)."""
    have = tokens(group / "cgroup.subtree_control")
    need = [name for name in names if name not in have]
    if not need:
        return list(names)
    control = group / "cgroup.subtree_control"
    try:
        write_file(control, " ".join(f"+{name}" for name in need))
        return list(names)
    except OSError:
        pass  # one of them failed and none was taken: enable one by one to name the culprit
    enabled = [name for name in names if name in have]
    for name in need:
        try:
            write_file(control, f"+{name}")
            enabled.append(name)
        except OSError as error:
            why = (" (the group holds processes: the no-internal-process rule)" if error.errno == errno.EBUSY
                   else "")
            warn_once(f"v2-{name}", f"cannot enable cgroup v2 controller {name} in {group}: "
                                    f"{error.strerror}{why}; {WHAT_IS_LOST[name]} for boxes on this host")
    return enabled


def _core_file(groups: list[Path], name: str, since: tuple[int, int]) -> bool:
    """Whether non-root groups here have the core file ``name`` (the root group has none of them)."""
    if groups:
        return (groups[0] / name).exists()
    release = os.uname().release.split(".")
    try:
        return (int(release[0]), int(release[1].split("-")[0])) >= since
    except (IndexError, ValueError):
        return False
