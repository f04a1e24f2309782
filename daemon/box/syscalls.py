"""The Linux calls Python's ``os`` module lacks (3.11), through ctypes: namespaces, mounts, prctl, seccomp.

Every wrapper raises ``OSError`` with the call's name on failure. They are used in the launcher children that
``launch.py`` forks, so they allocate little and never import anything at call time.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.syscall.restype = ctypes.c_long

CLONE_FS = 0x00000200
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_SHARED = 1 << 20
MNT_DETACH = 0x2

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
SECCOMP_MODE_FILTER = 2

SYS_PIVOT_ROOT = 155
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _b(value: str | bytes | None) -> bytes | None:
    return os.fsencode(value) if isinstance(value, str) else value


def raw_syscall(number: int, *args: object) -> tuple[int, int]:
    """A system call by number (for calls libc has no wrapper for): its result, and errno when it failed."""
    result = int(_libc.syscall(ctypes.c_long(number), *args))
    return result, (ctypes.get_errno() if result < 0 else 0)


def checked_syscall(number: int, *args: object, what: str, error: type[OSError] = OSError) -> int:
    """``raw_syscall``, raising ``error`` (errno, "what: strerror") when it fails."""
    result, code = raw_syscall(number, *args)
    if result < 0:
        raise error(code, f"{what}: {os.strerror(code)}")
    return result


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    """Enter the namespace behind ``fd`` (a namespace file or a pidfd) of type ``nstype``."""
    _check(_libc.setns(fd, nstype), f"setns({nstype:#x})")


def mount(source: str | bytes | None, target: str | bytes, fstype: str | bytes | None, flags: int = 0,
          data: str | bytes | None = None) -> None:
    _check(_libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount {fstype or ''} on {target!r}")


def bind(source: str | bytes, target: str | bytes, *, readonly: bool, flags: int = MS_NOSUID | MS_NODEV) -> None:
    """Bind ``source`` on ``target``; the second (remount) step is what makes a bind read-only."""
    mount(source, target, None, MS_BIND)
    mount(None, target, None, MS_REMOUNT | MS_BIND | flags | (MS_RDONLY if readonly else 0))


def umount2(target: str | bytes, flags: int) -> None:
    _check(_libc.umount2(_b(target), flags), f"umount2({target!r})")


def fallocate(fd: int, length: int) -> None:
    """Reserve ``length`` bytes on disk for ``fd``'s file (fallocate(2), mode 0). Where the file system cannot,
    it fails with EOPNOTSUPP (glibc's ``posix_fallocate`` would write zeros instead, slowly)."""
    _check(_libc.fallocate(fd, 0, 0, length), "fallocate")


def pivot_root(new_root: str | bytes, put_old: str | bytes) -> None:
    _check(_libc.syscall(SYS_PIVOT_ROOT, _b(new_root), _b(put_old)), "pivot_root")


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return _check(_libc.prctl(option, arg2, arg3, 0, 0), f"prctl({option})")


def sethostname(name: str) -> None:
    raw = name.encode()
    _check(_libc.sethostname(raw, len(raw)), "sethostname")


def set_parent_death_signal(signum: int) -> None:
    """Deliver ``signum`` when the parent thread exits (cleared by credential changes: set it again after)."""
    prctl(PR_SET_PDEATHSIG, signum)


def set_child_subreaper() -> None:
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_dumpable() -> None:
    """A uid change makes /proc/self root-owned (not dumpable); this gives it back to the process."""
    prctl(PR_SET_DUMPABLE, 1)


def set_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def drop_bounding_set(last_cap: int, keep: frozenset[int] = frozenset()) -> None:
    """Remove every capability but ``keep`` from the bounding set (needs CAP_SETPCAP: call while still root)."""
    for cap in range(last_cap + 1):
        if cap not in keep:
            prctl(PR_CAPBSET_DROP, cap)


def last_capability() -> int:
    """The highest capability number the running kernel knows."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 40


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp_filter(program: bytes) -> None:
    """Install a classic-BPF seccomp filter on the calling thread (no_new_privs must be set first)."""
    if not program or len(program) % 8:
        raise ValueError("seccomp program must be a non-empty array of 8-byte instructions")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "seccomp filter")


def bring_loopback_up() -> None:
    """``ip link set lo up`` for the calling process's network namespace (SIOCGIFFLAGS/SIOCSIFFLAGS)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def write_proc_file(path: str, data: str) -> None:
    """One write(2) of ``data`` (uid_map and friends must be written in a single call)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)
    except OSError as error:
        raise OSError(error.errno, f"writing {path}: {error.strerror}") from None


def close_fds_except(keep: set[int]) -> None:
    """Close every fd >= 3 not in ``keep`` (so no host fd reaches the box)."""
    low = 3
    for fd in sorted(fd for fd in keep if fd >= 3):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
