"""The box's seccomp program, decoded from its bytes and run in a small classic-BPF interpreter: structure, the
table of refused calls and arguments, and properties over arbitrary arguments."""

from __future__ import annotations

import errno
import re
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.box import seccomp
from tkbox_daemon.box.seccomp import (
    AUDIT_ARCH_X86_64,
    DENIED_SYSCALLS,
    RET_ALLOW,
    RET_KILL_PROCESS,
    SYSCALL_NUMBERS,
    decode,
    errno_return,
    filter_bytes,
)

ROOT = Path(__file__).resolve().parents[1]
AUDIT_ARCH_I386 = 0x40000003
EPERM = errno_return(errno.EPERM)
NR = SYSCALL_NUMBERS
U64 = st.integers(min_value=0, max_value=2**64 - 1)
SPECIAL = {"socket", "clone", "clone3", "mknod", "mknodat", "personality"}


def seccomp_data(nr: int, args: tuple[int, ...] = (), arch: int = AUDIT_ARCH_X86_64) -> bytes:
    args = tuple(args) + (0,) * (6 - len(args))
    return struct.pack("<IIQ6Q", nr, arch, 0x401000, *args)


def run_filter(raw: bytes, data: bytes) -> int:
    """Execute a classic-BPF seccomp program (only the instructions a seccomp filter may use)."""
    program = decode(raw)
    accumulator = index = 0
    for _ in range(len(program) + 1):  # forward-only jumps: more steps than instructions means a bug
        ins = program[index]
        cls = ins.code & 0x07
        if ins.code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            assert ins.k % 4 == 0 and ins.k + 4 <= len(data)
            accumulator = struct.unpack_from("<I", data, ins.k)[0]
        elif ins.code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            accumulator &= ins.k
        elif cls == 0x05:  # BPF_JMP
            op = ins.code & 0xF0
            taken = {0x10: accumulator == ins.k, 0x20: accumulator > ins.k, 0x30: accumulator >= ins.k,
                     0x40: bool(accumulator & ins.k)}[op]
            index += 1 + (ins.jt if taken else ins.jf)
            continue
        elif ins.code == 0x06:  # BPF_RET | BPF_K
            return ins.k
        else:
            raise AssertionError(f"unexpected opcode {ins.code:#x} at {index}")
        index += 1
    raise AssertionError("program did not return")


RAW = filter_bytes()


def verdict(name_or_nr: str | int, *args: int, arch: int = AUDIT_ARCH_X86_64) -> int:
    nr = NR[name_or_nr] if isinstance(name_or_nr, str) else name_or_nr
    return run_filter(RAW, seccomp_data(nr, args, arch))


def test_program_is_well_formed_classic_bpf():
    program = decode(RAW)
    assert len(RAW) == 8 * len(program) < 8 * 4096
    assert program[0].code == 0x20 and program[0].k == 4  # first look at the architecture
    for index, ins in enumerate(program):
        if ins.code & 0x07 == 0x05:
            for offset in (ins.jt, ins.jf):
                assert index + 1 + offset < len(program)
        assert ins.code in (0x20, 0x54, 0x15, 0x35, 0x45, 0x06)
    assert program[-1].code == 0x06
    assert decode(RAW) == list(seccomp.BPF_PROGRAM)


@pytest.mark.parametrize(
    "call, args, expected",
    [
        ("socket", (40, 1, 0), errno_return(errno.EAFNOSUPPORT)),  # AF_VSOCK
        ("socket", (40 | 1 << 32, 1, 0), errno_return(errno.EAFNOSUPPORT)),  # the kernel reads an int
        ("socket", (2, 1, 0), RET_ALLOW),  # AF_INET (no route anyway)
        ("socket", (1, 1, 0), RET_ALLOW),  # AF_UNIX: the channels
        ("socket", (16, 3, 0), RET_ALLOW),  # AF_NETLINK
        ("clone", (0x10000000 | 17,), EPERM),  # CLONE_NEWUSER | SIGCHLD
        ("clone", (0x00020000 | 17,), EPERM),  # CLONE_NEWNS
        ("clone", (0x40000000,), EPERM),  # CLONE_NEWNET
        ("clone", (17,), RET_ALLOW),  # fork
        ("clone", (0x003D0F00,), RET_ALLOW),  # pthread_create's flags
        ("clone", (17 | 1 << 40,), RET_ALLOW),  # high bits are not flags (lower_32_bits in the kernel)
        ("clone3", (0, 88), errno_return(errno.ENOSYS)),
        ("mknod", (0, 0o020600, 0x103), EPERM),  # character device
        ("mknodat", (-100 & (2**64 - 1), 0, 0o060600, 0), EPERM),  # block device
        ("mknod", (0, 0o010600, 0), RET_ALLOW),  # FIFO
        ("mknodat", (3, 0, 0o100600, 0), RET_ALLOW),  # regular file
        ("mknodat", (3, 0, 0o140600, 0), RET_ALLOW),  # socket inode
        ("personality", (0,), RET_ALLOW),
        ("personality", (0xFFFFFFFF,), RET_ALLOW),  # query
        ("personality", (0x0040000,), EPERM),  # ADDR_NO_RANDOMIZE
        ("personality", (0x0400000,), EPERM),  # READ_IMPLIES_EXEC
        ("ptrace", (16, 1, 0, 0), EPERM),
        ("mount", (0, 0, 0, 0, 0), EPERM),
        ("unshare", (0,), EPERM),
        ("io_uring_setup", (8, 0), EPERM),
        (0, (0, 0, 0), RET_ALLOW),  # read
        (59, (0, 0, 0), RET_ALLOW),  # execve
        (57, (), RET_ALLOW),  # fork
        (0x40000000 | 39, (), errno_return(errno.ENOSYS)),  # x32 getpid
        (0x40000000 | 165, (), errno_return(errno.ENOSYS)),  # x32 mount
        (0xFFFFFFFF, (), errno_return(errno.ENOSYS)),
    ],
)
def test_table_of_calls(call, args, expected):
    assert verdict(call, *args) == expected


def test_a_foreign_architecture_is_killed_whatever_the_number():
    for nr in (0, 1, 11, 102, 359):  # i386 read, exit, execve, socketcall, socket
        assert verdict(nr, arch=AUDIT_ARCH_I386) == RET_KILL_PROCESS


@given(name=st.sampled_from(DENIED_SYSCALLS), args=st.tuples(*[U64] * 6))
def test_every_denied_call_is_refused_for_any_arguments(name, args):
    assert verdict(name, *args) == EPERM


REFUSED_NUMBERS = {NR[name] for name in DENIED_SYSCALLS} | {NR[name] for name in SPECIAL}


@given(nr=st.integers(min_value=0, max_value=470).filter(lambda n: n not in REFUSED_NUMBERS),
       args=st.tuples(*[U64] * 6))
def test_other_calls_are_allowed_for_any_arguments(nr, args):
    assert verdict(nr, *args) == RET_ALLOW


@given(flags=U64, rest=st.tuples(*[U64] * 4))
def test_clone_is_refused_exactly_when_a_namespace_flag_is_set(flags, rest):
    expected = EPERM if flags & 0xFFFFFFFF & seccomp.CLONE_NAMESPACE_FLAGS else RET_ALLOW
    assert verdict("clone", flags, *rest) == expected


@given(domain=U64, rest=st.tuples(U64, U64))
def test_socket_is_refused_exactly_for_af_vsock(domain, rest):
    expected = errno_return(errno.EAFNOSUPPORT) if domain & 0xFFFFFFFF == 40 else RET_ALLOW
    assert verdict("socket", domain, *rest) == expected


@given(mode=U64)
def test_mknod_refuses_devices_only(mode):
    kind = mode & 0o170000
    expected = EPERM if kind in (0o020000, 0o060000) else RET_ALLOW
    assert verdict("mknod", 0, mode, 0) == expected
    assert verdict("mknodat", 3, 0, mode, 0) == expected


def test_syscall_numbers_match_the_kernel_headers():
    header = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
    if not header.exists():
        pytest.fail(f"{header} is missing: run scripts/setup.sh (it installs the Debian package linux-libc-dev)")
    known = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define __NR_(\w+) (\d+)", header.read_text())}
    for name, number in SYSCALL_NUMBERS.items():
        if name in known:
            assert known[name] == number, name
    assert set(SYSCALL_NUMBERS) - set(known) <= {"open_tree_attr"}  # 6.15, newer than Debian 12's headers


def test_docs_list_every_refused_call():
    text = (ROOT / "docs" / "box-isolation.md").read_text()
    for name in (*DENIED_SYSCALLS, "clone3", "AF_VSOCK", "mknod", "personality"):
        assert f"`{name}`" in text, name


def test_unknown_names_are_rejected():
    with pytest.raises(ValueError):
        seccomp.build_program(("not_a_syscall",))
