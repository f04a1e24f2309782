"""The attacker's primitives for the escape suite's in-box probe (``escape_probe.py``): raw system calls, files,
sockets and children, each turned into a short result token, and the attempts that need more than one call.

Standard library only: it runs inside the box under Debian's ``/usr/bin/python3 -I -S``, as the job.
"""

import ctypes
import errno
import mmap
import os
import signal
import socket
import struct
import subprocess

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl).
NR = {
    "kill": 62, "ptrace": 101, "syslog": 103, "vhangup": 153, "pivot_root": 155, "adjtimex": 159, "chroot": 161,
    "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "reboot": 169, "iopl": 172,
    "init_module": 175, "clock_settime": 227, "kexec_load": 246, "add_key": 248, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320,
    "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "open_tree": 428, "fsopen": 430, "pidfd_open": 434,
    "clone3": 435, "pidfd_getfd": 438, "clone": 56, "personality": 135, "getpid": 39,
}
X32_BIT = 0x40000000
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
SIGCHLD = 17
BOUND_S = 5  # no single network wait inside the box may take longer


def name(code):
    return errno.errorcode.get(code, str(code))


def attempt(action):
    """``ok`` or the errno name of the OSError ``action`` raised."""
    try:
        action()
        return "ok"
    except OSError as error:
        return name(error.errno)


def syscall(number, *args):
    """One raw system call: ``ok`` or the errno name."""
    result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    return "ok" if result >= 0 else name(ctypes.get_errno())


def syscall_value(number, *args):
    result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    if result < 0:
        raise OSError(ctypes.get_errno(), "syscall failed")
    return result


def read_file(path, limit=1 << 16):
    with open(path, "rb") as handle:
        return handle.read(limit)


def write_file(path, data=b"x"):
    with open(path, "wb") as handle:
        handle.write(data)


def open_for(path, flags):
    os.close(os.open(path, flags))


def in_child(action):
    """Run ``action`` in a forked child; the child's fate as a token (``exit:N`` or the killing signal)."""
    pid = os.fork()
    if pid == 0:
        try:
            code = action()
        except BaseException:  # noqa: B902 - the child must end in _exit
            code = 99
        os._exit(code or 0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return f"exit:{os.WEXITSTATUS(status)}"


# ---- the guest (PID 1) -------------------------------------------------------------------------------------


def guest_pidfd_getfd(args):
    """Open a pidfd of PID 1 and try to copy each of its first 32 fds (the agent socket is one of them)."""
    try:
        pidfd = syscall_value(NR["pidfd_open"], 1, 0)
    except OSError as error:
        return name(error.errno)
    results = set()
    try:
        for target in range(32):
            result = libc.syscall(ctypes.c_long(NR["pidfd_getfd"]), ctypes.c_long(pidfd), ctypes.c_long(target),
                                  ctypes.c_long(0))
            if result >= 0:
                os.close(result)
                results.add("ok")
            else:
                results.add(name(ctypes.get_errno()))
    finally:
        os.close(pidfd)
    return "ok" if "ok" in results else "/".join(sorted(results))


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def process_vm(number):
    buffer = ctypes.create_string_buffer(64)
    local = IoVec(ctypes.addressof(buffer), 64)
    remote = IoVec(0x400000, 64)
    result = libc.syscall(ctypes.c_long(number), ctypes.c_long(1), ctypes.byref(local), ctypes.c_long(1),
                          ctypes.byref(remote), ctypes.c_long(1), ctypes.c_long(0))
    return "ok" if result >= 0 else name(ctypes.get_errno())


def guest_oom_own(args):
    """Lower our own oom_score_adj to the minimum; the result says whether it ever went below 0.

    Lowering below ``oom_score_adj_min`` needs CAP_SYS_RESOURCE. The launcher would pin that minimum at the box's
    1000, but on this VM the daemon lacks CAP_SYS_RESOURCE, so the minimum stays the daemon's (0): what holds is
    that PID 1's value cannot be written at all (guest-oom-pid1) and that ours never goes below 0.
    """
    outcome = attempt(lambda: write_file("/proc/self/oom_score_adj", b"-1000"))
    value = int(read_file("/proc/self/oom_score_adj").strip())
    return "below-zero" if value < 0 else outcome


def connect_unix(path):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(BOUND_S)
        sock.connect(path)


def kill_pid1(signum):
    return syscall(NR["kill"], 1, signum)


# ---- network -----------------------------------------------------------------------------------------------


def tcp_connect(address, family=socket.AF_INET):
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(BOUND_S)
        sock.connect(address)


def udp_send(address):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"x", address)


def net_devices(args):
    lines = read_file("/proc/net/dev").decode().splitlines()[2:]
    return ",".join(sorted(line.split(":")[0].strip() for line in lines))


def netlink_route_add(args):
    """RTM_NEWROUTE for a default route through lo; the kernel's answer (an NLMSG_ERROR) as a token."""
    rtm_newroute, nlm_flags = 24, 0x1 | 0x4 | 0x200 | 0x400  # REQUEST | ACK | EXCL | CREATE
    rtmsg = struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 0, 0, 254, 3, 253, 1, 0)
    oif = struct.pack("=HHI", 8, 4, 1)  # RTA_OIF = ifindex 1 (lo)
    body = rtmsg + oif
    message = struct.pack("=IHHII", 16 + len(body), rtm_newroute, nlm_flags, 1, 0) + body
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as sock:  # NETLINK_ROUTE
        sock.settimeout(BOUND_S)
        sock.bind((0, 0))
        sock.send(message)
        reply = sock.recv(65536)
    length, kind = struct.unpack_from("=IH", reply)
    if kind != 2 or length < 20:  # NLMSG_ERROR
        return f"reply-type-{kind}"
    (code,) = struct.unpack_from("=i", reply, 16)
    return "ok" if code == 0 else name(-code)


def bind_port(port):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


# ---- host sockets and files --------------------------------------------------------------------------------


def abstract_connect(label):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(BOUND_S)
        sock.connect("\0" + label)


def sockets_outside_channels(args):
    """Every Unix socket under /run and /var/run but the box's own channels: ``none`` when there is none."""
    own = {"/run/tkbox/agent.sock", "/run/tkbox/boot.sock", "/run/tkbox/egress.sock"}
    found = []
    for top in ("/run", "/var/run"):
        for directory, _dirs, files in os.walk(top, onerror=lambda error: None):
            for entry in files:
                path = os.path.join(directory, entry)
                try:
                    is_socket = (os.lstat(path).st_mode & 0o170000) == 0o140000
                except OSError:
                    continue
                if is_socket and path not in own:
                    found.append(path)
    return ",".join(sorted(found)) or "none"


def exists_token(path):
    return "present" if os.path.lexists(path) else "absent"


def proc_pids(args):
    """The pids /proc shows, without our own: ``1`` when only the guest is there besides us."""
    pids = sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) != os.getpid())
    return ",".join(str(pid) for pid in pids)


def passwd_through_link(args):
    """Read /workspace/passwd-link (a symlink the host made to its own /etc/passwd)."""
    text = read_file("/workspace/passwd-link").decode(errors="replace")
    users = sorted(line.split(":", 1)[0] for line in text.splitlines() if line)
    return "box-passwd" if set(users) <= {"root", "box", "nobody"} else "host-passwd:" + ",".join(users[:8])


def workspace_credentials(args):
    names = [".git", ".env", "id_rsa", "deploy.pem"]
    present = [entry for entry in names if os.path.lexists(os.path.join("/workspace", entry))]
    return ",".join(present) or "absent"


# ---- capabilities ------------------------------------------------------------------------------------------


def status_field(key):
    for line in read_file("/proc/self/status").decode().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return "missing"


def capabilities(args):
    values = {status_field(key) for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    return "0" if values == {"0000000000000000"} else ",".join(sorted(values))


def setuid_su(args):
    """Run the host's setuid-root ``su`` (no password on stdin) and look at its effective uid while it runs."""
    if not os.path.exists("/usr/bin/su"):
        return "no-su"
    child = subprocess.Popen(["/usr/bin/su", "root", "-c", "id -u"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        euid = None
        try:
            uids = [line for line in read_file(f"/proc/{child.pid}/status").decode().splitlines()
                    if line.startswith("Uid:")]
            euid = int(uids[0].split()[2]) if uids else None
        except OSError:
            pass
        output, _ = child.communicate(b"", timeout=BOUND_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return "root" if euid == 0 or output.strip() == b"0" else "not-root"


# ---- syscalls ----------------------------------------------------------------------------------------------


def clone_with(flags):
    result = libc.syscall(ctypes.c_long(NR["clone"]), ctypes.c_long(flags | SIGCHLD), ctypes.c_long(0),
                          ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    if result == 0:
        os._exit(0)
    if result > 0:
        os.waitpid(result, 0)
        return "ok"
    return name(ctypes.get_errno())


def setns_own_mount_ns(args):
    fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    try:
        return syscall(NR["setns"], fd, 0)
    finally:
        os.close(fd)


def mknod_device(args):
    return attempt(lambda: os.mknod("/tmp/escape-null", 0o600 | 0o020000, os.makedev(1, 3)))


def i386_syscall(args):
    """``int 0x80`` (the i386 ABI) from a child: the filter kills it (SIGSYS) whatever the number means there."""
    code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax, 20 (i386 getpid); int 0x80; ret
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    function = ctypes.CFUNCTYPE(ctypes.c_int)(address)
    return in_child(lambda: (function(), 0)[1])


# ---- resources ---------------------------------------------------------------------------------------------


def fork_bomb(args):
    """Fork (children wait on a pipe) until the kernel refuses; ``EAGAIN`` below the box's pids limit."""
    read_end, write_end = os.pipe()
    children, refused = [], "not-refused"
    try:
        for _ in range(args["fork_tries"]):
            try:
                pid = os.fork()
            except OSError as error:
                refused = name(error.errno)
                break
            if pid == 0:
                os.close(write_end)
                os.read(read_end, 1)
                os._exit(0)
            children.append(pid)
    finally:
        os.close(write_end)
        for pid in children:
            os.waitpid(pid, 0)
        os.close(read_end)
    return refused


def open_files(args):
    """Open /dev/null until the kernel refuses: ``EMFILE`` (the per-process fd limit)."""
    fds, refused = [], "not-refused"
    try:
        for _ in range(1 << 20):
            try:
                fds.append(os.open("/dev/null", os.O_RDONLY))
            except OSError as error:
                refused = name(error.errno)
                break
    finally:
        for fd in fds:
            os.close(fd)
    return refused


def libc_call(function, *args):
    if function(*args) < 0:
        raise OSError(ctypes.get_errno(), "refused")
