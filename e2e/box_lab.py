"""The host side of the e2e boxes (``test_box_isolation``): the in-box probe, directories, the agent socket and
the box's results.

Each box's PID 1 is ``IN_BOX_CHECKS`` below, run by Debian's ``/usr/bin/python3`` in the guest's place (in-box
root with the guest's capabilities). It connects to the channel socket the host serves at
``/run/tkbox/agent.sock``, cuts its capabilities as the guest does, runs the checks the test names in a child
that became the job user (as every exec does), sends their results as one JSON line and then waits for the host's word (so the host can inspect the live box from outside first). Nothing
here waits on the clock for synchronisation: the host awaits the socket, pidfds and ``wait()``; timeouts only
bound how long a broken box may hang a test.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tkbox_daemon.box.backend import BoxLimits, BoxSpec
from tkbox_daemon.box.etcgen import generate_etc
from tkbox_daemon.box.idmap import mount_view
from tkbox_daemon.box.uids import HOST_UID_REGISTRY
from tkbox_daemon.box.workspace import build_base

BOX_PYTHON = "/usr/bin/python3"  # Debian's interpreter: never the pyenv shim
BOUND_S = 60  # how long a broken box may hang a test before it fails
UID_REGISTRY = HOST_UID_REGISTRY  # the daemons' own, host-wide: no uid twice at once on this host

IN_BOX_CHECKS = r'''
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def name(code):
    return errno.errorcode.get(code, str(code))

def attempt(action):
    try:
        action()
        return "ok"
    except OSError as error:
        return name(error.errno)

def raw(result):
    return "ok" if result >= 0 else name(ctypes.get_errno())

def syscall(number, *args):
    return raw(libc.syscall(number, *[ctypes.c_long(a) for a in args]))

def net(args):
    lines = open("/proc/net/dev").read().splitlines()[2:]
    tcp = socket.socket()
    tcp.settimeout(5)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return {"devices": sorted(line.split(":")[0].strip() for line in lines),
            "outside_tcp": attempt(lambda: tcp.connect(("192.0.2.1", 9))),
            "loopback_tcp": attempt(lambda: socket.create_connection(server.getsockname(), timeout=5).close()),
            "vsock": attempt(lambda: socket.socket(40, socket.SOCK_STREAM).close()),
            "sys_visible": os.path.exists("/sys/class/net")}

def privileged(args):
    CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x20000, 17
    def clone_newuser():
        result = libc.syscall(56, ctypes.c_long(CLONE_NEWUSER | SIGCHLD), 0, 0, 0, 0)
        if result == 0:
            os._exit(0)
        if result > 0:
            os.waitpid(result, 0)
        return raw(result)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return {
        "mount": raw(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
        "umount": raw(libc.umount2(b"/workspace", 2)),
        "unshare_user": raw(libc.unshare(CLONE_NEWUSER)),
        "unshare_mount": raw(libc.unshare(CLONE_NEWNS)),
        "ptrace": syscall(101, 0, 0, 0, 0),
        "clone_newuser": clone_newuser(),
        "clone3": syscall(435, 0, 0),
        "fork": "ok",
        "keyctl": syscall(250, 0, 0, 0, 0),
        "bpf": syscall(321, 0, 0, 0),
        "io_uring_setup": syscall(425, 1, 0),
        "chroot": raw(libc.chroot(b"/tmp")),
        "personality_no_aslr": syscall(135, 0x0040000),
        "personality_query": syscall(135, 0xFFFFFFFF),
        "mknod_char": attempt(lambda: os.mknod("/tmp/null2", 0o600 | 0o020000, os.makedev(1, 3))),
        "mkfifo": attempt(lambda: os.mkfifo("/tmp/fifo")),
        "x32_getpid": syscall(0x40000000 | 39),
    }

def identity(args):
    status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
    return {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "hostname": socket.gethostname(),
            "pid": os.getpid(), "user": __import__("pwd").getpwuid(os.getuid()).pw_name,
            "status": {key: status[key].strip() for key in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")}}

def host(args):
    def connect_host_socket():
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(args["host_socket"])
    return {"secret_exists": os.path.exists(args["secret"]),
            "secret_read": attempt(lambda: open(args["secret"]).read()),
            "shadow_exists": os.path.exists("/etc/shadow"),
            "host_socket": attempt(connect_host_socket),
            "dev": sorted(os.listdir("/dev")),
            "root": sorted(os.listdir("/"))}

def write(path, text="x"):
    with open(path, "w") as handle:
        handle.write(text)

def filesystem(args):
    out = {}
    for path in ("/usr/tkbox-probe", "/etc/tkbox-probe", "/tkbox-probe", "/run/tkbox/base/x", "/run/tkbox/upper/x"):
        out[path] = attempt(lambda: write(path))
    for path in ("/tmp/marker", "/var/tmp/marker", "/home/box/marker", "/run/marker"):
        out[path] = attempt(lambda: write(path))
    return out

def leftovers(args):
    return {path: os.path.exists(path) for path in ("/tmp/marker", "/var/tmp/marker", "/home/box/marker")}

def workspace(args):
    found = []
    for top, dirs, files in os.walk("/workspace"):
        found += [os.path.relpath(os.path.join(top, f), "/workspace") for f in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]]
    out = {"files": sorted(found), "base_files": sorted(os.listdir("/run/tkbox/base"))}
    if "hello.txt" in found:
        out["hello"] = open("/workspace/hello.txt").read()
        out["modify"] = attempt(lambda: write("/workspace/hello.txt", "changed in the box"))
        out["create"] = attempt(lambda: write("/workspace/made-in-box.txt", "new"))
        out["delete"] = attempt(lambda: os.unlink("/workspace/run.sh"))
        out["upper_after"] = sorted(os.listdir("/run/tkbox/upper"))
    return out

def base_attacks(args):
    """Every change a process might try on each file of the base, through each path it has to one."""
    out = {}
    for root in ("/run/tkbox/base", "/workspace"):
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            out[path] = {
                "write": attempt(lambda: open(path, "r+b").write(b"X")),
                "append": attempt(lambda: open(path, "ab").write(b"X")),
                "truncate": attempt(lambda: os.truncate(path, 0)),
                "chmod": attempt(lambda: os.chmod(path, 0o4777)),
                "chown": attempt(lambda: os.chown(path, 0, 0)),
                "utime": attempt(lambda: os.utime(path, (0, 0))),
                "xattr": attempt(lambda: os.setxattr(path, "user.tkbox", b"1")),
                "unlink": attempt(lambda: os.unlink(path)),
            }
    return out

def processes(args):
    return {"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))}

def limits(args):
    read_end, write_end = os.pipe()
    children, refused = [], None
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
    os.close(write_end)
    for pid in children:
        os.waitpid(pid, 0)
    try:
        hog = os.fork()
    except OSError as error:  # said, not raised: a crash here would look like a box that sent nothing
        return {"forked": len(children), "fork_refused": refused, "hog_signal": None, "hog_fork": name(error.errno)}
    if hog == 0:
        try:  # the OOM killer's first choice, so that it never takes the process that reports (raising is allowed)
            with open("/proc/self/oom_score_adj", "w") as adj:
                adj.write("1000")
        except OSError:
            pass
        block = bytearray(args["allocate_bytes"])
        for i in range(0, len(block), 4096):
            block[i] = 1
        os._exit(0)
    _, status = os.waitpid(hog, 0)
    return {"forked": len(children), "fork_refused": refused,
            "hog_signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}

def namespaces(args):
    """The job's namespaces (as links), its cgroups (as its cgroup namespace shows them), its oom_score_adj, and
    System V IPC: the host's segment must not be found, and one made here must stay here."""
    libc.shmget.restype = ctypes.c_int
    IPC_CREAT = 0o1000
    links = {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in args["kinds"]}
    found = libc.shmget(ctypes.c_int(args["host_shm_key"]), ctypes.c_size_t(0), ctypes.c_int(0))
    host_shm = "ok" if found >= 0 else name(ctypes.get_errno())
    made = libc.shmget(ctypes.c_int(args["box_shm_key"]), ctypes.c_size_t(4096), ctypes.c_int(IPC_CREAT | 0o600))
    own_shm = "ok" if made >= 0 else name(ctypes.get_errno())
    visible = [int(line.split()[0]) for line in open("/proc/sysvipc/shm").read().splitlines()[1:]]
    return {"links": links, "host_shm": host_shm, "own_shm": own_shm, "shm_keys": visible,
            "cgroup": open("/proc/self/cgroup").read().splitlines(),
            "oom_score_adj": int(open("/proc/self/oom_score_adj").read())}

CHECKS = {f.__name__: f for f in (net, privileged, identity, host, filesystem, leftovers, workspace, processes, limits,
                                  namespaces, base_attacks)}

def run_as_job(wanted, args):
    """As the guest does: keep only the guest's capabilities, then run the checks in a child that became the job
    user (in-box 1000, its own host uid, no capabilities); the results come back on a pipe."""
    sys.path.append("/run/tkbox")
    from guest.agent import become_agent
    from guest.boot import JobUser
    become_agent(JobUser(1000, 1000, "/home/box"))
    as_guest = {check: CHECKS[check](args) for check in args.get("as_guest", [])}  # in-box root, the guest's caps
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.closerange(3, write_end)  # as Popen(close_fds=True) in the guest: the job inherits only its stdio
        os.closerange(write_end + 1, 1 << 16)
        os.setgroups([])
        os.setresgid(1000, 1000, 1000)
        os.setresuid(1000, 1000, 1000)
        results = {}
        for check in wanted:
            try:
                results[check] = CHECKS[check](args)
            except Exception as error:
                results[check] = {"crashed": repr(error)}
        with os.fdopen(write_end, "wb") as out:
            out.write(json.dumps(results).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as results:
        data = results.read()
    os.waitpid(pid, 0)
    return json.dumps({**json.loads(data), **({"as_guest": as_guest} if as_guest else {})})

def main():
    wanted, args = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    inherited = {}  # what the launcher left open in PID 1 (the guest closes all of it at boot, as we do)
    for fd in os.listdir("/proc/self/fd"):
        try:
            inherited[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    os.closerange(3, 1 << 16)
    sock = socket.socket(socket.AF_UNIX)
    sock.connect("/run/tkbox/agent.sock")
    results = json.loads(run_as_job(wanted, args))
    results["inherited_fds"] = inherited
    sock.sendall(json.dumps(results).encode() + b"\n")
    stream = sock.makefile("rb")
    counter = 0
    for line in stream:  # the host either says "bye" or asks for ticks (pause/resume test)
        if line.strip() == b"bye":
            return
        counter += 1
        sock.sendall(b"%d\n" % counter)

main()
'''


def require_backend(name: str) -> None:
    if os.geteuid() != 0:
        pytest.fail("box backends need root (the daemon runs as root); run the e2e tests as root")
    if name == "bwrap" and shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin") is None:
        pytest.fail("bwrap is not installed: run scripts/setup.sh (it installs the Debian package bubblewrap)")
    if not os.access(BOX_PYTHON, os.X_OK):
        pytest.fail(f"{BOX_PYTHON} is missing: run scripts/setup.sh (Debian python3)")


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        digest.update(f"{path.relative_to(root)}:{info.st_mode}:{info.st_uid}".encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


class BoxLab:
    """Host side of the e2e boxes: directories, the agent socket, and the box's results."""

    def __init__(self, root: Path, backend, uids: tuple[int, int], checkout: Path | None = None, *,
                 link: bool = False) -> None:
        self.root, self.backend, self.count = root, backend, 0
        self.uid, self.job_uid = uids  # the guest's host uid, the job's
        if checkout is None:
            checkout = root / "checkout"
            checkout.mkdir()
            (checkout / "hello.txt").write_text("hello from the host")
            (checkout / "run.sh").write_text("#!/bin/sh\necho hi\n")
            os.chmod(checkout / "run.sh", 0o755)
        self.layers = root / "layers"  # closed to other users (0700), as the daemon keeps a box's layers
        self.layers.mkdir(mode=0o700)
        self.base = self.layers / "base"
        self.summary = build_base(checkout, self.base, box_uid=self.job_uid, link=link)
        if link:  # as the daemon does for a real box: the overlay's lower layer is the linked base's idmapped view
            owner = self.summary["owner"]
            (self.layers / "view").mkdir()
            mount_view(self.base, self.layers / "view", owner_uid=owner[0], owner_gid=owner[1], job_uid=self.job_uid)
            self.base = self.layers / "view"
        self.etc = root / "etc"
        generate_etc(self.etc)

    def spec(self, limits: BoxLimits | None = None) -> BoxSpec:
        self.count += 1
        box_dir = self.root / f"box{self.count}"
        box_dir.mkdir(mode=0o755)
        (box_dir / "state").mkdir(mode=0o755)
        rw = self.layers / f"box{self.count}"
        rw.mkdir(mode=0o755)
        for name in ("upper", "work"):
            (rw / name).mkdir(mode=0o755)
            os.chown(rw / name, self.job_uid, self.job_uid)
        return BoxSpec(box_id=f"e2e-{self.root.name[4:].lower()}-{self.count}", state_dir=box_dir / "state",
                       base_dir=self.base, upper_dir=rw / "upper", work_dir=rw / "work",
                       etc_dir=self.etc, box_uid=self.uid, job_uid=self.job_uid, channels={"agent": box_dir / "agent.sock"},
                       guest_dir=Path(__file__).resolve().parents[1] / "guest", limits=limits or BoxLimits())

    @asynccontextmanager
    async def run(self, checks: list[str], args: dict | None = None, *, limits: BoxLimits | None = None):
        spec = self.spec(limits)
        connected: asyncio.Future = asyncio.get_running_loop().create_future()
        server = await asyncio.start_unix_server(
            lambda reader, writer: connected.done() or connected.set_result((reader, writer)),
            path=str(spec.channels["agent"]))
        script = [BOX_PYTHON, "-I", "-S", "-c", IN_BOX_CHECKS, json.dumps(checks), json.dumps(args or {})]
        box = await self.backend.start(spec, script)
        run = BoxRun(box, spec)
        try:
            reader, writer = await asyncio.wait_for(connected, BOUND_S)
            line = await asyncio.wait_for(reader.readline(), BOUND_S)
            assert line, f"the box sent no results; box.log: {spec.log_path.read_text()}"
            run.results, run.reader, run.writer = json.loads(line), reader, writer
            yield run
            if run.returncode is None:
                writer.write(b"bye\n")
                await writer.drain()
                run.returncode = await asyncio.wait_for(box.wait(), BOUND_S)
        finally:
            if box.returncode is None:
                box.kill()
                await asyncio.wait_for(box.wait(), BOUND_S)
            if run.writer is not None:
                run.writer.close()
            server.close()
            await server.wait_closed()


class BoxRun:
    """One box of a test: its handle, the results its checks sent, and the open agent connection."""

    def __init__(self, box, spec: BoxSpec) -> None:
        self.box, self.spec = box, spec
        self.results: dict = {}
        self.returncode: int | None = None
        self.reader = self.writer = None

    def host_status(self) -> dict[str, str]:
        """The live box PID 1's /proc/<pid>/status, read from the host."""
        text = Path(f"/proc/{self.box.pid}/status").read_text()
        return {key: value.strip() for key, value in (line.split(":", 1) for line in text.splitlines())}
