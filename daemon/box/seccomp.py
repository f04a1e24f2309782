"""The box's seccomp filter: a hand-written classic-BPF program for x86_64, standard library only.

The program is a flat list of ``struct sock_filter`` instructions (``BPF_PROGRAM`` below is built once). It is
loaded by bwrap through ``--seccomp FD`` (the bytes of ``filter_bytes()`` in a memfd) and by the ns launcher
through ``prctl(PR_SET_SECCOMP)`` after ``PR_SET_NO_NEW_PRIVS``. What it does, in order:

1. ``seccomp_data.arch`` must be ``AUDIT_ARCH_X86_64``; any other ABI (i386 through ``int 0x80``) kills the process,
   because the syscall numbers differ and every rule below would be bypassed.
2. x32 syscalls (number has bit 30 set) fail with ``ENOSYS``, as on a kernel built without x32.
3. ``socket(AF_VSOCK, ...)`` fails with ``EAFNOSUPPORT``: vsock is not isolated by the network namespace and its
   only peer here is the host VMM (docs/box-isolation.md).
4. ``clone`` with any namespace flag, ``mknod``/``mknodat`` of a character or block device, and ``personality``
   other than ``PER_LINUX`` (0) or the query value (0xffffffff) fail with ``EPERM``.
5. ``clone3`` fails with ``ENOSYS`` (its flags live in memory a filter cannot read), so libc falls back to clone.
6. Every syscall in ``DENIED_SYSCALLS`` fails with ``EPERM``; everything else is allowed.

Only the low 32 bits of an argument are compared where the kernel itself reads an ``int`` (socket's domain,
clone's flags — ``lower_32_bits(clone_flags)`` in kernel/fork.c — mknod's mode, personality's persona).
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from tkbox_daemon.box.syscalls import (
    CLONE_NEWCGROUP,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
)

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
AF_VSOCK = 40

# struct seccomp_data offsets (little-endian x86_64): nr u32 @0, arch u32 @4, ip u64 @8, args[6] u64 @16.
OFFSET_NR = 0
OFFSET_ARCH = 4


def arg_low_offset(index: int) -> int:
    """Offset of the low 32 bits of syscall argument ``index`` in ``struct seccomp_data``."""
    return 16 + 8 * index


# Return values (include/uapi/linux/seccomp.h).
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# Classic BPF opcodes used here (include/uapi/linux/filter.h).
BPF_LD_W_ABS = 0x20
BPF_ALU_AND_K = 0x54
BPF_JMP_JEQ_K = 0x15
BPF_JMP_JGE_K = 0x35
BPF_JMP_JSET_K = 0x45
BPF_RET_K = 0x06

# Namespace flags clone(2) may not carry (CLONE_NEWTIME only exists for clone3/unshare, both refused anyway).
CLONE_NAMESPACE_FLAGS = (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER
                         | CLONE_NEWPID | CLONE_NEWNET)

S_IFMT = 0o170000
S_IFCHR = 0o020000
S_IFBLK = 0o060000
PER_LINUX = 0
PERSONALITY_QUERY = 0xFFFFFFFF

# x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl); tests cross-check them against the kernel
# headers. open_tree_attr (6.15) is newer than Debian 12's headers.
SYSCALL_NUMBERS: dict[str, int] = {
    "socket": 41, "clone": 56, "clone3": 435, "mknod": 133, "mknodat": 259, "personality": 135,
    "ptrace": 101, "syslog": 103, "vhangup": 153, "pivot_root": 155, "adjtimex": 159, "chroot": 161,
    "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
    "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176, "quotactl": 179,
    "lookup_dcookie": 212, "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "quotactl_fd": 443, "pidfd_getfd": 438, "open_tree_attr": 467,
}

# Refused outright with EPERM, whatever the arguments. Grouped by why (docs/box-isolation.md has the table).
DENIED_SYSCALLS: tuple[str, ...] = (
    # mounts and namespaces: the box's view of the world is fixed by the launcher
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "open_tree", "open_tree_attr", "mount_setattr",
    # looking into or steering other processes (pidfd_getfd takes another process's file descriptors)
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    # kernel keyrings, BPF, perf, userfaultfd: large attack surface, no job needs them
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    # kernel code, hardware, power, accounting, swap
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "iopl", "ioperm",
    "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd",
    # file handles bypass path-based confinement; dcookies and fanotify watch the whole system
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "fanotify_init",
    # kernel log and clocks
    "syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    # terminals
    "vhangup",
    # io_uring runs syscalls this filter never sees (until audited)
    "io_uring_setup", "io_uring_enter", "io_uring_register",
)


@dataclass(frozen=True)
class Instruction:
    """One ``struct sock_filter``: jt/jf are resolved offsets once assembled."""

    code: int
    k: int
    jt: int = 0
    jf: int = 0

    def pack(self) -> bytes:
        return struct.pack("<HBBI", self.code, self.jt, self.jf, self.k)


@dataclass(frozen=True)
class _Jump:
    """A conditional jump before assembly: true/false targets are labels (None = fall through)."""

    code: int
    k: int
    true: str | None
    false: str | None


class _Assembler:
    """Collects instructions and labels; resolves forward jumps into 8-bit offsets."""

    def __init__(self) -> None:
        self.items: list[Instruction | _Jump] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        if name in self.labels:
            raise ValueError(f"label {name} defined twice")
        self.labels[name] = len(self.items)

    def load(self, offset: int) -> None:
        self.items.append(Instruction(BPF_LD_W_ABS, offset))

    def and_k(self, mask: int) -> None:
        self.items.append(Instruction(BPF_ALU_AND_K, mask))

    def jump(self, code: int, k: int, true: str | None = None, false: str | None = None) -> None:
        self.items.append(_Jump(code, k, true, false))

    def ret(self, value: int) -> None:
        self.items.append(Instruction(BPF_RET_K, value))

    def assemble(self) -> list[Instruction]:
        out: list[Instruction] = []
        for index, item in enumerate(self.items):
            if isinstance(item, Instruction):
                out.append(item)
                continue
            out.append(Instruction(item.code, item.k, self._offset(index, item.true), self._offset(index, item.false)))
        return out

    def _offset(self, index: int, label: str | None) -> int:
        if label is None:
            return 0
        offset = self.labels[label] - index - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"jump from {index} to {label} is out of classic-BPF range ({offset})")
        return offset


def errno_return(code: int) -> int:
    """The SECCOMP_RET_ERRNO action that makes the syscall fail with ``code``."""
    return RET_ERRNO | (code & 0xFFFF)


def build_program(denied: Iterable[str] = DENIED_SYSCALLS) -> list[Instruction]:
    """The filter as instructions; ``denied`` names syscalls refused with EPERM regardless of arguments."""
    denied = tuple(denied)
    unknown = [name for name in denied if name not in SYSCALL_NUMBERS]
    if unknown:
        raise ValueError(f"no x86_64 number known for {unknown}")
    asm = _Assembler()
    asm.load(OFFSET_ARCH)
    asm.jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, false="kill")
    asm.load(OFFSET_NR)
    asm.jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, true="enosys")
    asm.jump(BPF_JMP_JEQ_K, SYSCALL_NUMBERS["socket"], true="socket")
    asm.jump(BPF_JMP_JEQ_K, SYSCALL_NUMBERS["clone"], true="clone")
    asm.jump(BPF_JMP_JEQ_K, SYSCALL_NUMBERS["clone3"], true="enosys")
    asm.jump(BPF_JMP_JEQ_K, SYSCALL_NUMBERS["mknod"], true="mknod")
    asm.jump(BPF_JMP_JEQ_K, SYSCALL_NUMBERS["mknodat"], true="mknodat")
    asm.jump(BPF_JMP_JEQ_K, SYSCALL_NUMBERS["personality"], true="personality")
    for name in denied:
        asm.jump(BPF_JMP_JEQ_K, SYSCALL_NUMBERS[name], true="eperm")
    asm.ret(RET_ALLOW)

    asm.label("socket")  # socket(domain, type, protocol)
    asm.load(arg_low_offset(0))
    asm.jump(BPF_JMP_JEQ_K, AF_VSOCK, true="eafnosupport")
    asm.ret(RET_ALLOW)

    asm.label("clone")  # clone(flags, stack, parent_tid, child_tid, tls) on x86_64
    asm.load(arg_low_offset(0))
    asm.jump(BPF_JMP_JSET_K, CLONE_NAMESPACE_FLAGS, true="eperm")
    asm.ret(RET_ALLOW)

    for name, mode_arg in (("mknod", 1), ("mknodat", 2)):  # FIFOs, sockets and regular files stay allowed
        asm.label(name)
        asm.load(arg_low_offset(mode_arg))
        asm.and_k(S_IFMT)
        asm.jump(BPF_JMP_JEQ_K, S_IFCHR, true="eperm")
        asm.jump(BPF_JMP_JEQ_K, S_IFBLK, true="eperm")
        asm.ret(RET_ALLOW)

    asm.label("personality")
    asm.load(arg_low_offset(0))
    asm.jump(BPF_JMP_JEQ_K, PER_LINUX, true="allow")
    asm.jump(BPF_JMP_JEQ_K, PERSONALITY_QUERY, true="allow")
    asm.ret(errno_return(errno.EPERM))

    asm.label("allow")
    asm.ret(RET_ALLOW)
    asm.label("eperm")
    asm.ret(errno_return(errno.EPERM))
    asm.label("eafnosupport")
    asm.ret(errno_return(errno.EAFNOSUPPORT))
    asm.label("enosys")
    asm.ret(errno_return(errno.ENOSYS))
    asm.label("kill")
    asm.ret(RET_KILL_PROCESS)
    program = asm.assemble()
    if len(program) > 4096:
        raise ValueError("seccomp program longer than BPF_MAXINSNS")
    return program


BPF_PROGRAM: tuple[Instruction, ...] = tuple(build_program())


def filter_bytes(program: Iterable[Instruction] = BPF_PROGRAM) -> bytes:
    """The program as the raw ``struct sock_filter[]`` bytes bwrap's ``--seccomp FD`` reads."""
    return b"".join(instruction.pack() for instruction in program)


def decode(raw: bytes) -> list[Instruction]:
    """Bytes back into instructions (for tests and for checking a filter file)."""
    if len(raw) % 8:
        raise ValueError("a classic-BPF program is a whole number of 8-byte instructions")
    return [Instruction(code, k, jt, jf) for code, jt, jf, k in struct.iter_unpack("<HBBI", raw)]
