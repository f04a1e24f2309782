"""cgroup v1 for boxes: memory (with memsw), pids, cpu and freezer groups at ``<root>/<controller>/tkbox/<box_id>``.

Each controller is its own hierarchy; ``cpu`` and ``cpuacct`` may share one (``cpuacct`` serves stats only). A
hierarchy that is not mounted or not writable is skipped with one warning naming the limit that is therefore not
enforced. The memory limit also caps memory plus swap (``memory.memsw.limit_in_bytes``), so a box cannot escape
its limit into swap; without swap accounting (``swapaccount=0``) that is said once.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
from pathlib import Path

from tkbox_daemon.box.backend import BoxError, BoxLimits
from tkbox_daemon.box.cgroups import (
    CONTROLLERS,
    FREEZE_TIMEOUT_S,
    PARENT_GROUP,
    STATS_ONLY_CONTROLLERS,
    BoxCgroup,
    CgroupHost,
    CgroupSummary,
    GuardFiles,
    applied,
    counters,
    log,
    own_group_path,
    requested_controllers,
    warn_once,
)
from tkbox_daemon.box.cgroups_files import (
    CGROUP2_SUPER_MAGIC,
    PROCS_READ_LIMIT,
    CgroupFileError,
    parse_pids,
    read_file,
    statfs_magic,
    write_file,
)


def available_controllers(root: Path) -> dict[str, Path]:
    """The usable v1 hierarchies by controller name (``cpu`` and ``cpuacct`` may share one)."""
    found = {}
    for name in CONTROLLERS + STATS_ONLY_CONTROLLERS:
        hierarchy = root / name
        if (hierarchy / "cgroup.procs").is_file() and os.access(hierarchy, os.W_OK):
            found[name] = hierarchy
    return found


class V1Host(CgroupHost):
    """The v1 hierarchies under ``root`` (also a hybrid host's: its controllers are here)."""

    version = "v1"

    def __init__(self, root: Path) -> None:
        self.root = root

    def create(self, box_id: str, limits: BoxLimits) -> BoxCgroupV1:
        groups: dict[str, Path] = {}
        made: dict[Path, Path] = {}  # real hierarchy -> group (cpu and cpuacct may be one hierarchy)
        for name, hierarchy in available_controllers(self.root).items():
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
                warn_once(f"mkdir-{name}", f"cgroup controller {name} unusable ({error}); continuing without it")
                continue
            groups[name] = made[real] = group
        return applied(BoxCgroupV1(box_id, groups), limits, "v1")

    def leftover(self, box_id: str) -> BoxCgroupV1:
        groups = {name: hierarchy / PARENT_GROUP / box_id
                  for name, hierarchy in available_controllers(self.root).items()
                  if (hierarchy / PARENT_GROUP / box_id).is_dir()}
        return BoxCgroupV1(box_id, groups)

    def summary(self) -> CgroupSummary:
        controllers = available_controllers(self.root)
        kind = ("none" if not controllers else
                "hybrid" if statfs_magic(self.root / "unified") == CGROUP2_SUPER_MAGIC else "v1")
        return CgroupSummary(
            kind=kind, version="v1" if controllers else "none",
            enforced=tuple(name for name in ("memory", "pids", "cpu") if name in controllers),
            pause="freezer" if "freezer" in controllers else "signals",
            kill="cgroup" if controllers else "pid namespace",
            detail={"root": str(self.root), "controllers": sorted(controllers),
                    "memsw": (self.root / "memory" / "memory.memsw.limit_in_bytes").exists()})


class BoxCgroupV1(BoxCgroup):
    """The v1 groups of one box, one directory per available controller."""

    def __init__(self, box_id: str, groups: dict[str, Path]) -> None:
        self.box_id = box_id
        self.groups = groups  # controller -> this box's directory
        self.missing = sorted(set(CONTROLLERS) - set(groups))

    def apply(self, limits: BoxLimits) -> None:
        for name, needed in requested_controllers(limits).items():
            if needed and name not in self.groups:
                log.warning("box %s: %s limit requested but not enforced (no %s cgroup)", self.box_id, name, name)
        if limits.memory_bytes is not None and "memory" in self.groups:
            names = ["memory.limit_in_bytes"]
            if (self.groups["memory"] / "memory.memsw.limit_in_bytes").exists():
                # no escape to swap; memory+swap is never below memory alone, so when a limit is raised (a box
                # started ahead, taken for a bigger one) memory+swap goes first
                names.append("memory.memsw.limit_in_bytes")
                if limits.memory_bytes > int(self._read("memory", "memory.memsw.limit_in_bytes") or 0):
                    names.reverse()
            for name in names:
                self._write("memory", name, limits.memory_bytes)
            if len(names) == 1:
                warn_once("v1-no-memsw", "cgroup v1 has no swap accounting (memory.memsw.limit_in_bytes is absent; "
                                         "boot with swapaccount=1): a box may use swap beyond its memory limit")
        if limits.pids_max is not None and "pids" in self.groups:
            self._write("pids", "pids.max", limits.pids_max)
        if "cpu" in self.groups:
            if limits.cpu_shares is not None:
                self._write("cpu", "cpu.shares", limits.cpu_shares)
            if limits.cpu_quota_us is not None:
                self._write("cpu", "cpu.cfs_period_us", limits.cpu_period_us)
                self._write("cpu", "cpu.cfs_quota_us", limits.cpu_quota_us)

    def _write(self, controller: str, name: str, value: int | str) -> None:
        write_file(self.groups[controller] / name, value)

    def _read(self, controller: str, name: str) -> str | None:
        group = self.groups.get(controller)
        if group is None:
            return None
        try:
            return read_file(group / name)
        except (OSError, CgroupFileError):
            return None

    def _counters(self, controller: str, name: str) -> dict[str, int]:
        return counters(self._read(controller, name), name, "v1")

    def oom_kills(self) -> int | None:
        return self._counters("memory", "memory.oom_control").get("oom_kill")

    def procs_files(self) -> list[str]:
        return sorted({str(group / "cgroup.procs") for group in self.groups.values()})

    def pids(self) -> set[int]:
        found: set[int] = set()
        for group in set(self.groups.values()):
            try:
                found |= parse_pids(read_file(group / "cgroup.procs", PROCS_READ_LIMIT))
            except (OSError, CgroupFileError):
                continue
        return found

    @property
    def has_freezer(self) -> bool:
        return "freezer" in self.groups

    def guard_files(self) -> GuardFiles:
        group = self.groups.get("freezer")
        if group is None:
            return GuardFiles()
        hierarchy = group.parent.parent
        home = hierarchy / own_group_path("freezer").lstrip("/") / "cgroup.procs"
        return GuardFiles(leave_to=str(home), thaw=(str(group / "freezer.state"), "THAWED"))

    def freezer_state(self) -> str | None:
        state = self._read("freezer", "freezer.state")
        return state.strip() if state is not None else None

    async def set_frozen(self, frozen: bool) -> None:
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
        """Then thaw: a frozen v1 task dies only once thawed."""
        for pid in self.pids() - {spare}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.has_freezer and self.freezer_state() != "THAWED":
            self._write("freezer", "freezer.state", "THAWED")

    async def wait_empty(self, timeout: float) -> bool:
        """v1 has no notification for an emptied group: looks again at growing intervals."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 0.0005
        while self.pids():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
            delay = min(delay * 2, 0.02)
        return True

    def stats(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, controller, name in (
            ("memory_bytes", "memory", "memory.usage_in_bytes"),
            ("memory_peak_bytes", "memory", "memory.max_usage_in_bytes"),
            ("memory_limit_bytes", "memory", "memory.limit_in_bytes"),
            ("memory_swap_limit_bytes", "memory", "memory.memsw.limit_in_bytes"),
            ("pids", "pids", "pids.current"),
            ("pids_max", "pids", "pids.max"),
            ("cpu_usage_ns", "cpuacct", "cpuacct.usage"),
            ("cpu_quota_us", "cpu", "cpu.cfs_quota_us"),
        ):
            text = self._read(controller, name)
            if text is not None and text.strip().isdigit():
                out[key] = int(text)
        for key, controller, name, field in (
            ("pids_refused", "pids", "pids.events", "max"),
            ("cpu_throttled_periods", "cpu", "cpu.stat", "nr_throttled"),
            ("cpu_throttled_ns", "cpu", "cpu.stat", "throttled_time"),
        ):
            counters = self._counters(controller, name)
            if field in counters:
                out[key] = counters[field]
        oom_kills = self.oom_kills()
        if oom_kills is not None:
            out["oom_kills"] = oom_kills
        if self.has_freezer:
            out["frozen"] = self.freezer_state() == "FROZEN"
        return out

    def remove(self) -> bool:
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


def _make_fresh(group: Path) -> None:
    """Create ``group``; a leftover empty group of the same name (a crashed daemon's) is replaced."""
    try:
        group.mkdir(mode=0o755)
        return
    except FileExistsError:
        pass
    if read_file(group / "cgroup.procs", PROCS_READ_LIMIT).strip():
        raise BoxError(f"cgroup {group} already has processes: box id in use")
    os.rmdir(group)
    group.mkdir(mode=0o755)
