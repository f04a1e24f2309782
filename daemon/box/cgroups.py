"""cgroup v1 for boxes: memory, pids, cpu and freezer groups at ``/sys/fs/cgroup/<controller>/tkbox/<box_id>``.

The daemon creates the groups and writes the limits before the box starts; the launcher moves itself (bwrap)
or PID 1 (ns) into every ``cgroup.procs`` before any of the job runs, so every box process is born inside.
A controller that is not mounted is skipped with one warning naming the limit that is therefore not enforced:
the box still starts (pause then falls back to signals, kill to the pid namespace). ``cpuacct`` is used for
stats only.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
from pathlib import Path

from tkbox_daemon.box.backend import BoxError, BoxLimits

log = logging.getLogger("tkbox.box.cgroups")

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_GROUP = "tkbox"
CONTROLLERS = ("memory", "pids", "cpu", "freezer")
STATS_ONLY_CONTROLLERS = ("cpuacct",)
FREEZE_TIMEOUT_S = 10.0
_warned: set[str] = set()


def available_controllers(root: Path = CGROUP_ROOT) -> dict[str, Path]:
    """The usable v1 hierarchies by controller name (``cpu`` and ``cpuacct`` may share one)."""
    found = {}
    for name in CONTROLLERS + STATS_ONLY_CONTROLLERS:
        hierarchy = root / name
        if (hierarchy / "cgroup.procs").is_file() and os.access(hierarchy, os.W_OK):
            found[name] = hierarchy
    return found


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


class BoxCgroup:
    """The cgroups of one box, one directory per available controller."""

    def __init__(self, box_id: str, groups: dict[str, Path]) -> None:
        self.box_id = box_id
        self.groups = groups  # controller -> this box's directory
        self.missing = sorted(set(CONTROLLERS) - set(groups))

    @classmethod
    def create(cls, box_id: str, limits: BoxLimits, root: Path = CGROUP_ROOT) -> BoxCgroup:
        """Make the box's groups and apply ``limits``; raises ``BoxError`` if a live group has this id."""
        hierarchies = available_controllers(root)
        groups: dict[str, Path] = {}
        made: dict[Path, Path] = {}  # real hierarchy -> group (cpu and cpuacct may be one hierarchy)
        for name, hierarchy in hierarchies.items():
            real = hierarchy.resolve()
            if real in made:
                groups[name] = made[real]
                continue
            parent = hierarchy / PARENT_GROUP
            group = parent / box_id
            try:
                parent.mkdir(mode=0o755, exist_ok=True)
                _make_fresh(group)
            except OSError as error:
                _warn_once(f"mkdir-{name}", f"cgroup controller {name} unusable ({error}); continuing without it")
                continue
            groups[name] = made[real] = group
        box = cls(box_id, groups)
        for name in box.missing:
            _warn_once(f"missing-{name}", f"cgroup v1 controller {name} is not available: "
                                          f"{_WHAT_IS_LOST[name]} for boxes on this host")
        box._apply(limits)
        return box

    def _apply(self, limits: BoxLimits) -> None:
        wanted = {
            "memory": limits.memory_bytes is not None,
            "pids": limits.pids_max is not None,
            "cpu": limits.cpu_shares is not None or limits.cpu_quota_us is not None,
        }
        for name, needed in wanted.items():
            if needed and name not in self.groups:
                log.warning("box %s: %s limit requested but not enforced (no %s cgroup)", self.box_id, name, name)
        if limits.memory_bytes is not None and "memory" in self.groups:
            self._write("memory", "memory.limit_in_bytes", limits.memory_bytes)
            if (self.groups["memory"] / "memory.memsw.limit_in_bytes").exists():
                self._write("memory", "memory.memsw.limit_in_bytes", limits.memory_bytes)  # no escape to swap
        if limits.pids_max is not None and "pids" in self.groups:
            self._write("pids", "pids.max", limits.pids_max)
        if "cpu" in self.groups:
            if limits.cpu_shares is not None:
                self._write("cpu", "cpu.shares", limits.cpu_shares)
            if limits.cpu_quota_us is not None:
                self._write("cpu", "cpu.cfs_period_us", limits.cpu_period_us)
                self._write("cpu", "cpu.cfs_quota_us", limits.cpu_quota_us)

    def _write(self, controller: str, name: str, value: int | str) -> None:
        path = self.groups[controller] / name
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            os.write(fd, str(value).encode())
        finally:
            os.close(fd)

    def _read(self, controller: str, name: str) -> str | None:
        group = self.groups.get(controller)
        if group is None:
            return None
        try:
            return (group / name).read_text()
        except OSError:
            return None

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a launcher writes its pid to (distinct hierarchies only)."""
        return sorted({str(group / "cgroup.procs") for group in self.groups.values()})

    def join(self, pid: int) -> None:
        """Move ``pid`` into every group of the box."""
        for path in self.procs_files():
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, str(pid).encode())
            finally:
                os.close(fd)

    def pids(self) -> set[int]:
        """Every process in any of the box's groups."""
        found: set[int] = set()
        for group in set(self.groups.values()):
            try:
                found.update(int(line) for line in (group / "cgroup.procs").read_text().split())
            except OSError:
                continue
        return found

    @property
    def has_freezer(self) -> bool:
        return "freezer" in self.groups

    def freezer_files(self) -> tuple[str, str] | None:
        """(the box's freezer.state, the cgroup.procs of the daemon's own freezer group): a launcher moves
        itself back there once the box exists, so pausing the box never freezes its launcher."""
        group = self.groups.get("freezer")
        if group is None:
            return None
        home = own_group_path("freezer")
        hierarchy = group.parent.parent
        return str(group / "freezer.state"), str(hierarchy / home.lstrip("/") / "cgroup.procs")

    def freezer_state(self) -> str | None:
        state = self._read("freezer", "freezer.state")
        return state.strip() if state is not None else None

    async def set_frozen(self, frozen: bool) -> None:
        """Freeze or thaw the box and wait until the kernel reports the new state."""
        want = "FROZEN" if frozen else "THAWED"
        self._write("freezer", "freezer.state", want)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FREEZE_TIMEOUT_S
        delay = 0.0005
        while self.freezer_state() != want:  # v1 has no notification for FREEZING -> FROZEN
            if loop.time() > deadline:
                raise BoxError(f"box {self.box_id}: freezer did not reach {want}")
            self._write("freezer", "freezer.state", want)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    def kill_all(self, spare: int | None = None) -> None:
        """SIGKILL every process of the box's groups but ``spare``; then thaw (a frozen v1 task only dies
        once thawed)."""
        for pid in self.pids() - {spare}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.has_freezer and self.freezer_state() != "THAWED":
            self._write("freezer", "freezer.state", "THAWED")

    def stats(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, controller, name in (
            ("memory_bytes", "memory", "memory.usage_in_bytes"),
            ("memory_peak_bytes", "memory", "memory.max_usage_in_bytes"),
            ("memory_limit_bytes", "memory", "memory.limit_in_bytes"),
            ("pids", "pids", "pids.current"),
            ("pids_max", "pids", "pids.max"),
            ("cpu_usage_ns", "cpuacct", "cpuacct.usage"),
        ):
            text = self._read(controller, name)
            if text is not None and text.strip().isdigit():
                out[key] = int(text)
        for key, controller, name, field in (
            ("oom_kills", "memory", "memory.oom_control", "oom_kill"),
            ("pids_refused", "pids", "pids.events", "max"),
        ):
            text = self._read(controller, name)
            for line in (text or "").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == field and parts[1].isdigit():
                    out[key] = int(parts[1])
        if self.has_freezer:
            out["frozen"] = self.freezer_state() == "FROZEN"
        return out

    def remove(self) -> bool:
        """Remove the box's groups; False if one still has processes (then it is left in place)."""
        removed = True
        for group in sorted(set(self.groups.values())):
            try:
                os.rmdir(group)
            except FileNotFoundError:
                continue
            except OSError as error:
                if error.errno != errno.EBUSY:
                    raise
                removed = False
        return removed


_WHAT_IS_LOST = {
    "memory": "memory limits are not enforced",
    "pids": "process-count limits are not enforced",
    "cpu": "CPU shares and quotas are not enforced",
    "freezer": "pause uses SIGSTOP/SIGCONT of each box process instead of the freezer",
}


def own_group_path(controller: str) -> str:
    """This process's group in a v1 hierarchy, from /proc/self/cgroup ("/" when not listed)."""
    try:
        with open("/proc/self/cgroup") as handle:
            for line in handle:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    return path
    except (OSError, ValueError):
        pass
    return "/"


def leftover_groups(box_id: str, root: Path = CGROUP_ROOT) -> BoxCgroup:
    """The groups a box of this id left behind (a daemon that died with its boxes): ``pids()``, ``kill_all()``
    and ``remove()`` work on them."""
    groups = {name: hierarchy / PARENT_GROUP / box_id for name, hierarchy in available_controllers(root).items()
              if (hierarchy / PARENT_GROUP / box_id).is_dir()}
    return BoxCgroup(box_id, groups)


def _make_fresh(group: Path) -> None:
    """Create ``group``; a leftover empty group of the same name (a crashed daemon's) is replaced."""
    try:
        group.mkdir(mode=0o755)
        return
    except FileExistsError:
        pass
    if (group / "cgroup.procs").read_text().strip():
        raise BoxError(f"cgroup {group} already has processes: box id in use")
    os.rmdir(group)
    group.mkdir(mode=0o755)
