"""The attacker's side of the escape suite (``e2e/test_escapes.py``): runs inside a real box, as the job.

It is copied into the box's workspace and run by Debian's ``/usr/bin/python3 -I -S`` (standard library only).
``run JSON`` tries each attempt named in ``{"attempts": [...], "args": {...}}`` and prints one JSON line per
attempt, ``{"id": ..., "result": ...}``, as soon as it is known (so a box that dies half-way still reports the
attempts before). A result is a short token: ``ok`` when the call succeeded, an errno name (``EPERM``) when it
failed, or a word the attempt defines (``SIGSYS``, ``absent``…). The table in ``escape_attempts.py`` says which
token each attempt must give; ``escape_probe_calls.py`` (copied beside it) holds the calls themselves. The other
modes serve single attempts the host runs as their own commands: ``listen`` (the other box's listener), ``hog
BYTES``, ``fill BYTES`` and ``escapes`` (terminal escapes in a patch).
"""

import json
import mmap
import os
import select
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's own folder off sys.path
from escape_probe_calls import (  # noqa: E402 - after the path fix above
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    NR,
    X32_BIT,
    abstract_connect,
    attempt,
    bind_port,
    capabilities,
    clone_with,
    connect_unix,
    exists_token,
    fork_bomb,
    guest_oom_own,
    guest_pidfd_getfd,
    i386_syscall,
    kill_pid1,
    libc,
    libc_call,
    mknod_device,
    name,
    net_devices,
    netlink_route_add,
    open_files,
    open_for,
    passwd_through_link,
    proc_pids,
    process_vm,
    read_file,
    setns_own_mount_ns,
    setuid_su,
    sockets_outside_channels,
    status_field,
    syscall,
    tcp_connect,
    udp_send,
    workspace_credentials,
    write_file,
)

PROBES = {
    # the guest
    "guest-ptrace-attach": lambda a: syscall(NR["ptrace"], 16, 1, 0, 0),  # PTRACE_ATTACH
    "guest-pidfd-getfd": guest_pidfd_getfd,
    "guest-process-vm-readv": lambda a: process_vm(NR["process_vm_readv"]),
    "guest-process-vm-writev": lambda a: process_vm(NR["process_vm_writev"]),
    "guest-proc-mem-read": lambda a: attempt(lambda: open_for("/proc/1/mem", os.O_RDONLY)),
    "guest-proc-mem-write": lambda a: attempt(lambda: open_for("/proc/1/mem", os.O_WRONLY)),
    "guest-proc-fd": lambda a: attempt(lambda: os.listdir("/proc/1/fd")),
    "guest-proc-fd-link": lambda a: attempt(lambda: os.readlink("/proc/1/fd/0")),
    "guest-proc-environ": lambda a: attempt(lambda: read_file("/proc/1/environ")),
    "guest-agent-socket": lambda a: attempt(lambda: connect_unix("/run/tkbox/agent.sock")),
    "guest-boot-socket": lambda a: attempt(lambda: connect_unix("/run/tkbox/boot.sock")),
    "guest-oom-pid1": lambda a: attempt(lambda: write_file("/proc/1/oom_score_adj", b"0")),
    "guest-oom-own": guest_oom_own,
    "guest-run-dir-write": lambda a: attempt(lambda: write_file("/run/tkbox/json.py", b"# shadows json\n")),
    "guest-code-write": lambda a: attempt(lambda: write_file("/run/tkbox/guest/__main__.py")),
    "guest-signal-stop": lambda a: kill_pid1(signal.SIGSTOP),
    "guest-signal-kill": lambda a: kill_pid1(signal.SIGKILL),
    "guest-signal-term": lambda a: kill_pid1(signal.SIGTERM),
    # network
    "net-devices": net_devices,
    "net-outside-tcp": lambda a: attempt(lambda: tcp_connect(("192.0.2.1", 443))),
    "net-outside-udp": lambda a: attempt(lambda: udp_send(("192.0.2.1", 53))),
    "net-outside-ipv6": lambda a: attempt(lambda: tcp_connect(("2001:db8::1", 443, 0, 0), socket.AF_INET6)),
    "net-raw-socket": lambda a: attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1).close()),
    "net-packet-socket": lambda a: attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()),
    "net-netlink-route": netlink_route_add,
    "net-bind-privileged": lambda a: attempt(lambda: bind_port(80)),
    "net-vsock": lambda a: attempt(lambda: socket.socket(40, socket.SOCK_STREAM).close()),  # never connect()
    # host sockets and files
    "host-abstract-socket": lambda a: attempt(lambda: abstract_connect(a["host_abstract"])),
    "host-run-sockets": sockets_outside_channels,
    "host-docker-socket": lambda a: attempt(lambda: connect_unix("/var/run/docker.sock")),
    "host-file": lambda a: attempt(lambda: read_file(a["host_secret"])),
    "host-shadow": lambda a: attempt(lambda: read_file("/etc/shadow")),
    "host-sys": lambda a: exists_token("/sys"),
    "host-root-home": lambda a: attempt(lambda: os.listdir("/root")),
    "host-proc-kcore": lambda a: attempt(lambda: read_file("/proc/kcore", 16)),
    "host-sysrq-trigger": lambda a: attempt(lambda: open_for("/proc/sysrq-trigger", os.O_WRONLY)),
    "host-processes": proc_pids,
    "workspace-credentials": workspace_credentials,
    "workspace-symlink-host-file": lambda a: attempt(lambda: read_file("/workspace/escape-link")),
    "workspace-symlink-passwd": passwd_through_link,
    # the read-only root
    "root-write-usr": lambda a: attempt(lambda: write_file("/usr/escape")),
    "root-write-etc": lambda a: attempt(lambda: write_file("/etc/escape")),
    "root-write-top": lambda a: attempt(lambda: write_file("/escape")),
    "root-write-base-layer": lambda a: attempt(lambda: write_file("/run/tkbox/base/escape")),
    "root-write-upper-layer": lambda a: attempt(lambda: write_file("/run/tkbox/upper/escape")),
    # capabilities
    "caps-zero": capabilities,
    "caps-no-new-privs": lambda a: status_field("NoNewPrivs"),
    "caps-seccomp": lambda a: status_field("Seccomp"),
    "caps-setuid-binary": setuid_su,
    # namespaces
    "ns-unshare-user": lambda a: syscall(NR["unshare"], CLONE_NEWUSER),
    "ns-unshare-net": lambda a: syscall(NR["unshare"], CLONE_NEWNET),
    "ns-clone-newpid": lambda a: clone_with(CLONE_NEWPID),
    "ns-clone-newuser": lambda a: clone_with(CLONE_NEWUSER | CLONE_NEWNS),
    "ns-clone3": lambda a: syscall(NR["clone3"], 0, 0),
    "ns-setns": setns_own_mount_ns,
    "ns-mount": lambda a: attempt(lambda: libc_call(libc.mount, b"none", b"/tmp", b"tmpfs", 0, None)),
    "ns-umount-workspace": lambda a: attempt(lambda: libc_call(libc.umount2, b"/workspace", 2)),
    "ns-pivot-root": lambda a: attempt(lambda: libc_call(libc.syscall, NR["pivot_root"], b".", b".")),
    "ns-chroot": lambda a: attempt(lambda: libc_call(libc.chroot, b"/tmp")),
    "ns-fsopen": lambda a: attempt(lambda: libc_call(libc.syscall, NR["fsopen"], b"tmpfs", 0)),
    # syscalls
    "sys-bpf": lambda a: syscall(NR["bpf"], 0, 0, 0),
    "sys-perf-event-open": lambda a: syscall(NR["perf_event_open"], 0, 0, -1, -1, 0),
    "sys-userfaultfd": lambda a: syscall(NR["userfaultfd"], 0),
    "sys-io-uring-setup": lambda a: syscall(NR["io_uring_setup"], 1, 0),
    "sys-keyctl": lambda a: syscall(NR["keyctl"], 0, 0, 0, 0),
    "sys-add-key": lambda a: syscall(NR["add_key"], 0, 0, 0, 0, 0),
    "sys-kexec-load": lambda a: syscall(NR["kexec_load"], 0, 0, 0, 0),
    "sys-init-module": lambda a: syscall(NR["init_module"], 0, 0, 0),
    "sys-finit-module": lambda a: syscall(NR["finit_module"], 0, 0, 0),
    "sys-personality": lambda a: syscall(NR["personality"], 0x0040000),  # ADDR_NO_RANDOMIZE
    "sys-mknod-device": mknod_device,
    "sys-open-by-handle-at": lambda a: syscall(NR["open_by_handle_at"], -100, 0, 0),
    "sys-syslog": lambda a: syscall(NR["syslog"], 3, 0, 0),  # SYSLOG_ACTION_READ_ALL
    "sys-clock-settime": lambda a: syscall(NR["clock_settime"], 0, 0),
    "sys-reboot": lambda a: syscall(NR["reboot"], 0, 0, 0, 0),
    "sys-ptrace-traceme": lambda a: syscall(NR["ptrace"], 0, 0, 0, 0),
    "sys-x32-abi": lambda a: syscall(X32_BIT | NR["getpid"]),
    "sys-i386-abi": i386_syscall,
    # other boxes
    "peer-signal": lambda a: syscall(NR["kill"], a["peer_pid"], signal.SIGKILL),
    "peer-proc": lambda a: attempt(lambda: read_file(f"/proc/{a['peer_pid']}/status")),
    "peer-kill-all": lambda a: syscall(NR["kill"], -1, signal.SIGKILL),
    "peer-abstract-socket": lambda a: attempt(lambda: abstract_connect("tkbox-escape-peer")),
    "peer-loopback-tcp": lambda a: attempt(lambda: tcp_connect(("127.0.0.1", a["peer_port"]))),
    "peer-tmp": lambda a: exists_token("/tmp/escape-peer-marker"),
    "peer-workspace": lambda a: attempt(lambda: read_file(a["peer_upper_file"])),
    "peer-channel": lambda a: attempt(lambda: connect_unix(a["peer_agent_socket"])),
    # resources
    "res-fork-bomb": fork_bomb,
    "res-open-files": open_files,
}


def run(request):
    request = json.loads(request)
    for ident in request["attempts"]:
        try:
            result = PROBES[ident](request["args"])
        except Exception as error:  # noqa: BLE001 - reported, never hidden
            result = f"crashed: {type(error).__name__}: {error}"
        sys.stdout.write(json.dumps({"id": ident, "result": result}) + "\n")
        sys.stdout.flush()


def listen():
    """The peer box's side: an abstract socket, a loopback TCP port and a /tmp file, until stdin closes."""
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0tkbox-escape-peer")
    abstract.listen()
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    write_file("/tmp/escape-peer-marker", b"peer")
    write_file("/workspace/escape-peer-file", b"peer")
    sys.stdout.write(f"ready {tcp.getsockname()[1]}\n")
    sys.stdout.flush()
    select.select([sys.stdin], [], [])  # until the host closes our stdin
    sys.stdin.read()


def hog(size):
    """Allocate and touch ``size`` bytes: the box's memory limit must stop it (the kernel kills it)."""
    block = bytearray(size)
    for index in range(0, size, mmap.PAGESIZE):
        block[index] = 1
    sys.stdout.write("allocated\n")


def escapes():
    """Terminal escapes in a file's name and content, for the patch."""
    name_ = "/workspace/esc-\x1b]0;pwned\x07-\x1b[31mred.txt"
    text = "clear: \x1b[2J\x1b[H title: \x1b]0;owned\x07 bell: \x07 c1 csi: \x9b31m\n"
    write_file(name_, text.encode())


def fill_tmp(size):
    """Write ``size`` bytes to /tmp (a tmpfs: its pages are charged to the box's memory cgroup)."""
    chunk = b"\0" * (1 << 20)
    try:
        with open("/tmp/escape-fill", "wb") as handle:
            for _ in range(size // len(chunk)):
                handle.write(chunk)
        sys.stdout.write("written\n")
    except OSError as error:
        sys.stdout.write(f"refused {name(error.errno)}\n")
    finally:
        try:
            os.unlink("/tmp/escape-fill")
        except OSError:
            pass


def main():
    mode = sys.argv[1]
    if mode == "run":
        run(sys.argv[2])
    elif mode == "listen":
        listen()
    elif mode == "hog":
        hog(int(sys.argv[2]))
    elif mode == "fill":
        fill_tmp(int(sys.argv[2]))
    elif mode == "escapes":
        escapes()
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
