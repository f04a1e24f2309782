"""The guest's own privileges in its box: keep exactly the capabilities it needs, let no child inherit any.

The launcher starts the guest as in-box root (mapped to its own unprivileged host uid) holding a few
capabilities of the box's user namespace (the daemon's ``AGENT_CAPABILITIES``). At boot, before it reads a
single frame, the guest:

* empties the capability bounding set (needs CAP_SETPCAP), so no process started from it can ever gain a
  capability through execve, whatever it runs;
* clears the ambient set and the inheritable set, so nothing is carried across an exec;
* keeps in its permitted and effective sets only ``KEEP``: setuid and setgid (execs run as the job user), kill
  (signal the execs' groups), chown (the job's home and terminals), dac_read_search (read the workspace).

A job then starts through ``setgroups([])``, ``setregid`` and ``setreuid`` to the job user: every uid leaves 0,
which clears the permitted, effective and ambient sets by the kernel's rules, and the bounding set is already
empty. Standard library only (ctypes); the numbers are Linux's UAPI.
"""

from __future__ import annotations

import ctypes
import os

PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SYS_CAPGET = 125  # x86_64
SYS_CAPSET = 126
LINUX_CAPABILITY_VERSION_3 = 0x20080522

CAP_CHOWN = 0
CAP_DAC_READ_SEARCH = 2
CAP_KILL = 5
CAP_SETGID = 6
CAP_SETUID = 7
CAP_SETPCAP = 8
KEEP = (CAP_CHOWN, CAP_DAC_READ_SEARCH, CAP_KILL, CAP_SETGID, CAP_SETUID)


class CapabilityError(Exception):
    """The guest's privileges could not be set up as required; it must not serve."""


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise CapabilityError(f"{what}: {os.strerror(code)}")
    return result


def mask(capabilities: tuple[int, ...]) -> int:
    value = 0
    for capability in capabilities:
        value |= 1 << capability
    return value


def last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return 63


def current() -> dict[str, int]:
    """The calling thread's capability sets as masks: effective, permitted, inheritable, bounding."""
    libc = _libc()
    header = _Header(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    _check(libc.syscall(SYS_CAPGET, ctypes.byref(header), ctypes.byref(data)), "capget")
    sets = {name: getattr(data[0], name) | getattr(data[1], name) << 32
            for name in ("effective", "permitted", "inheritable")}
    bounding = 0
    for capability in range(last_capability() + 1):
        if libc.prctl(PR_CAPBSET_READ, capability, 0, 0, 0) == 1:
            bounding |= 1 << capability
    sets["bounding"] = bounding
    return sets


def restrict_to(keep: tuple[int, ...] = KEEP) -> dict[str, int]:
    """Empty the bounding, ambient and inheritable sets and keep only ``keep`` (see the module docstring).

    Raises :class:`CapabilityError` when a capability of ``keep`` is missing or a step fails; returns the sets
    as they are afterwards, read back from the kernel.
    """
    libc = _libc()
    wanted = mask(keep)
    before = current()
    if before["permitted"] & wanted != wanted:
        missing = wanted & ~before["permitted"]
        raise CapabilityError(f"the guest lacks capabilities it needs (mask {missing:#x}); the launcher must "
                              "start it as the box's root with them")
    for capability in range(last_capability() + 1):
        if before["bounding"] & (1 << capability):
            _check(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), f"dropping capability {capability}")
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing the ambient set")
    header = _Header(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    for index in (0, 1):
        part = (wanted >> (32 * index)) & 0xFFFF_FFFF
        data[index].effective = part
        data[index].permitted = part
        data[index].inheritable = 0
    _check(libc.syscall(SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)), "capset")
    after = current()
    if after["bounding"] or after["inheritable"] or after["permitted"] != wanted or after["effective"] != wanted:
        raise CapabilityError(f"capabilities are not as required after the drop: {after}")
    return after
