"""cgroup v2 for one box: its group ``<subtree>/<box_id>`` on the unified hierarchy (the subtree and the choice of
where it lives: ``cgroups_v2_tree.py``).

Limits: ``memory.max`` and ``memory.swap.max`` 0 (the memory limit is the whole of memory plus swap, as v1's
memsw), ``pids.max``, ``cpu.max`` ("quota period") and ``cpu.weight`` (from v1 shares), each written only when the
group has that controller (else one warning per box names the limit not enforced). ``cgroup.freeze`` pauses (the
kernel says ``frozen 1`` in ``cgroup.events`` once every process has stopped: awaited, with a deadline);
``cgroup.kill`` kills every process at once (a frozen one too: v2 lets fatal signals through); ``populated 0``
in ``cgroup.events`` says the box is empty; ``memory.events`` counts out-of-memory kills. The freeze, kill, procs
and events files are core v2 and work without any controller.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
from pathlib import Path

from tkbox_daemon.box.backend import BoxError, BoxLimits
from tkbox_daemon.box.cgroups import (
    FREEZE_TIMEOUT_S,
    BoxCgroup,
    GuardFiles,
    counters,
    log,
    requested_controllers,
    warn_once,
)
from tkbox_daemon.box.cgroups_files import (
    PROCS_READ_LIMIT,
    CgroupFileError,
    parse_pids,
    read_file,
    tokens,
    wait_for_key,
    write_file,
)

LIMIT_CONTROLLERS = ("memory", "pids", "cpu")


def cpu_weight(shares: int) -> int:
    """v1 ``cpu.shares`` (2..262144, default 1024) as v2 ``cpu.weight`` (1..10000, default 100): the mapping
    systemd and runc use."""
    return max(1, min(10_000, 1 + ((shares - 2) * 9_999) // 262_142))


class BoxCgroupV2(BoxCgroup):
    """One box's v2 group (``group`` None: the box runs without one)."""

    def __init__(self, box_id: str, group: Path | None, home: Path | None) -> None:
        self.box_id = box_id
        self.group = group
        self.home = home
        self.controllers = tokens(group / "cgroup.controllers") if group is not None else set()
        self.missing = sorted([name for name in LIMIT_CONTROLLERS if name not in self.controllers]
                              + ([] if self.has_freezer else ["freezer"]))

    def apply(self, limits: BoxLimits) -> None:
        for name, needed in requested_controllers(limits).items():
            if needed and name not in self.controllers:
                log.warning("box %s: %s limit requested but not enforced (no %s controller in its cgroup v2 "
                            "group)", self.box_id, name, name)
        if limits.memory_bytes is not None and "memory" in self.controllers:
            self._write("memory.max", limits.memory_bytes)
            if self._has("memory.swap.max"):
                self._write("memory.swap.max", 0)  # the memory limit holds swap too: no escape to swap
            else:
                warn_once("v2-no-swap", "cgroup v2 has no swap accounting (memory.swap.max is absent): a box may "
                                        "use swap beyond its memory limit")
        if limits.pids_max is not None and "pids" in self.controllers:
            self._write("pids.max", limits.pids_max)
        if "cpu" in self.controllers:
            if limits.cpu_shares is not None:
                self._write("cpu.weight", cpu_weight(limits.cpu_shares))
            if limits.cpu_quota_us is not None:
                self._write("cpu.max", f"{limits.cpu_quota_us} {limits.cpu_period_us}")

    def _has(self, name: str) -> bool:
        return self.group is not None and (self.group / name).exists()

    def _write(self, name: str, value: int | str) -> None:
        assert self.group is not None
        write_file(self.group / name, value)

    def _read(self, name: str) -> str | None:
        if self.group is None:
            return None
        try:
            return read_file(self.group / name)
        except (OSError, CgroupFileError):
            return None

    def _counters(self, name: str) -> dict[str, int]:
        return counters(self._read(name), name, "v2")

    def oom_kills(self) -> int | None:
        return self._counters("memory.events").get("oom_kill")

    def _number(self, name: str) -> int | None:
        text = self._read(name)
        return int(text) if text is not None and text.strip().isdigit() else None

    def procs_files(self) -> list[str]:
        return [str(self.group / "cgroup.procs")] if self.group is not None else []

    def pids(self) -> set[int]:
        if self.group is None:
            return set()
        try:
            return parse_pids(read_file(self.group / "cgroup.procs", PROCS_READ_LIMIT))
        except (OSError, CgroupFileError):
            return set()

    @property
    def has_freezer(self) -> bool:
        return self._has("cgroup.freeze")

    def guard_files(self) -> GuardFiles:
        if self.group is None:
            return GuardFiles()
        return GuardFiles(leave_to=str(self.home / "cgroup.procs") if self.home is not None else None,
                          kill=str(self.group / "cgroup.kill") if self._has("cgroup.kill") else None)

    async def set_frozen(self, frozen: bool) -> None:
        assert self.group is not None
        self._write("cgroup.freeze", int(frozen))
        reached = await asyncio.to_thread(wait_for_key, self.group / "cgroup.events", "frozen", int(frozen),
                                          FREEZE_TIMEOUT_S)
        if not reached:
            raise BoxError(f"box {self.box_id}: cgroup.events did not say frozen {int(frozen)} within "
                           f"{FREEZE_TIMEOUT_S:g} s")

    def kill_all(self, spare: int | None = None) -> None:
        """``cgroup.kill`` when ``spare`` is not in the group (else SIGKILL to each other member)."""
        if self.group is None:
            return
        members = self.pids()
        if (spare is None or spare not in members) and self._has("cgroup.kill"):
            try:
                self._write("cgroup.kill", 1)
                return
            except FileNotFoundError:
                return  # the group is gone, and its processes with it
        for pid in members - {spare}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def wait_empty(self, timeout: float) -> bool:
        if self.group is None:
            return True
        try:
            return await asyncio.to_thread(wait_for_key, self.group / "cgroup.events", "populated", 0, timeout)
        except FileNotFoundError:
            return True

    def stats(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, name in (("memory_bytes", "memory.current"), ("memory_peak_bytes", "memory.peak"),
                          ("memory_limit_bytes", "memory.max"), ("pids", "pids.current"), ("pids_max", "pids.max")):
            value = self._number(name)
            if value is not None:
                out[key] = value
        swap = self._number("memory.swap.max")
        if swap is not None and "memory_limit_bytes" in out:
            out["memory_swap_limit_bytes"] = out["memory_limit_bytes"] + swap  # type: ignore[operator]
        quota = (self._read("cpu.max") or "").split()
        if len(quota) == 2 and quota[0].isdigit():
            out["cpu_quota_us"] = int(quota[0])
        for key, name, field, scale in (
            ("cpu_usage_ns", "cpu.stat", "usage_usec", 1000),
            ("cpu_throttled_periods", "cpu.stat", "nr_throttled", 1),
            ("cpu_throttled_ns", "cpu.stat", "throttled_usec", 1000),
            ("pids_refused", "pids.events", "max", 1),
        ):
            counters = self._counters(name)
            if field in counters:
                out[key] = counters[field] * scale
        oom_kills = self.oom_kills()
        if oom_kills is not None:
            out["oom_kills"] = oom_kills
        if self.has_freezer:
            out["frozen"] = self._counters("cgroup.events").get("frozen") == 1
        return out

    def remove(self) -> bool:
        if self.group is None:
            return True
        try:
            os.rmdir(self.group)
        except FileNotFoundError:
            return True
        except OSError as error:
            if error.errno != errno.EBUSY:
                raise
            return False
        return True
