"""Real boxes with both real backends (bwrap and the ns launcher): every test runs against each.

Each box's PID 1 is ``IN_BOX_CHECKS`` below, run by Debian's ``/usr/bin/python3``. It connects to the channel
socket the host serves at ``/run/tkbox/agent.sock``, runs the checks the test names, sends their results as one
JSON line and then waits for the host's word (so the host can inspect the live box from outside first). Nothing
here waits on the clock for synchronisation: the host awaits the socket, pidfds and ``wait()``; timeouts only
bound how long a broken box may hang a test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tkbox_daemon.box.backend import BoxLimits, BoxSpec, BoxStartError
from tkbox_daemon.box.bwrap import BwrapBackend
from tkbox_daemon.box.cgroups import CGROUP_ROOT, PARENT_GROUP, available_controllers, leftover_groups
from tkbox_daemon.box.etcgen import generate_etc
from tkbox_daemon.box.handle import process_state
from tkbox_daemon.box.nslauncher import NsBackend
from tkbox_daemon.box.uids import UidAllocator
from tkbox_daemon.box.workspace import build_base

pytestmark = pytest.mark.e2e

BOX_PYTHON = "/usr/bin/python3"  # Debian's interpreter: never the pyenv shim
BOUND_S = 60  # how long a broken box may hang a test before it fails
UID_REGISTRY = Path(tempfile.gettempdir()) / "tkbox-e2e-uids"  # shared by xdist workers: no uid twice at once

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
    hog = os.fork()
    if hog == 0:
        block = bytearray(args["allocate_bytes"])
        for i in range(0, len(block), 4096):
            block[i] = 1
        os._exit(0)
    _, status = os.waitpid(hog, 0)
    return {"forked": len(children), "fork_refused": refused,
            "hog_signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}

CHECKS = {f.__name__: f for f in (net, privileged, identity, host, filesystem, leftovers, workspace, processes, limits)}

def main():
    wanted, args = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    sock = socket.socket(socket.AF_UNIX)
    sock.connect("/run/tkbox/agent.sock")
    results = {}
    for check in wanted:
        try:
            results[check] = CHECKS[check](args)
        except Exception as error:
            results[check] = {"crashed": repr(error)}
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


def _require_backend(name: str) -> None:
    if os.geteuid() != 0:
        pytest.fail("box backends need root (the daemon runs as root); run the e2e tests as root")
    if name == "bwrap" and shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin") is None:
        pytest.fail("bwrap is not installed: run scripts/setup.sh (it installs the Debian package bubblewrap)")
    if not os.access(BOX_PYTHON, os.X_OK):
        pytest.fail(f"{BOX_PYTHON} is missing: run scripts/setup.sh (Debian python3)")


@pytest.fixture(params=["bwrap", "ns"])
def backend(request):
    _require_backend(request.param)
    return BwrapBackend() if request.param == "bwrap" else NsBackend()


@pytest.fixture
def box_uid():
    allocator = UidAllocator(UID_REGISTRY)
    box_id = f"e2e-{os.getpid()}-{os.urandom(3).hex()}"
    uid = allocator.allocate(box_id)
    yield uid
    allocator.release(uid, box_id)


@pytest.fixture
def lab_dir():
    path = Path(tempfile.mkdtemp(prefix="tkb-", dir="/tmp"))  # short: Unix socket paths are limited
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        digest.update(f"{path.relative_to(root)}:{info.st_mode}:{info.st_uid}".encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


class BoxLab:
    """Host side of the e2e boxes: directories, the agent socket, and the box's results."""

    def __init__(self, root: Path, backend, uid: int, checkout: Path | None = None) -> None:
        self.root, self.backend, self.uid, self.count = root, backend, uid, 0
        if checkout is None:
            checkout = root / "checkout"
            checkout.mkdir()
            (checkout / "hello.txt").write_text("hello from the host")
            (checkout / "run.sh").write_text("#!/bin/sh\necho hi\n")
            os.chmod(checkout / "run.sh", 0o755)
        self.base = root / "base"
        self.summary = build_base(checkout, self.base, box_uid=uid)
        self.etc = root / "etc"
        generate_etc(self.etc)

    def spec(self, limits: BoxLimits | None = None) -> BoxSpec:
        self.count += 1
        box_dir = self.root / f"box{self.count}"
        box_dir.mkdir(mode=0o755)
        for name in ("upper", "work", "state"):
            (box_dir / name).mkdir(mode=0o755)
        for name in ("upper", "work"):
            os.chown(box_dir / name, self.uid, self.uid)
        return BoxSpec(box_id=f"e2e-{self.root.name[4:].lower()}-{self.count}", state_dir=box_dir / "state",
                       base_dir=self.base, upper_dir=box_dir / "upper", work_dir=box_dir / "work",
                       etc_dir=self.etc, box_uid=self.uid, channels={"agent": box_dir / "agent.sock"},
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


@pytest.fixture
def lab(lab_dir, backend, box_uid):
    return BoxLab(lab_dir, backend, box_uid)


async def test_network_is_loopback_only_and_vsock_is_refused(lab):
    async with lab.run(["net"]) as run:
        net = run.results["net"]
    assert net["devices"] == ["lo"]
    assert net["outside_tcp"] == "ENETUNREACH"  # no route: nothing is ever sent
    assert net["loopback_tcp"] == "ok"
    assert net["vsock"] == "EAFNOSUPPORT"
    assert net["sys_visible"] is False
    assert run.returncode == 0


async def test_privileged_calls_are_refused_by_seccomp(lab):
    async with lab.run(["privileged"]) as run:
        calls = run.results["privileged"]
    for call in ("mount", "umount", "unshare_user", "unshare_mount", "ptrace", "clone_newuser", "keyctl", "bpf",
                 "io_uring_setup", "chroot", "personality_no_aslr", "mknod_char"):
        assert calls[call] == "EPERM", (call, calls)
    assert calls["clone3"] == "ENOSYS" and calls["x32_getpid"] == "ENOSYS"
    assert calls["fork"] == "ok" and calls["mkfifo"] == "ok" and calls["personality_query"] == "ok"


async def test_the_box_runs_as_an_unprivileged_host_uid_without_capabilities(lab):
    async with lab.run(["identity"]) as run:
        host_view = run.host_status()  # the box waits for our "bye": it is alive while we look
        inside = run.results["identity"]
    uid_fields = [int(value) for value in host_view["Uid"].split()]
    assert all(value == lab.uid >= 100_000 for value in uid_fields)
    assert all(int(value) == lab.uid for value in host_view["Gid"].split())
    assert host_view["CapEff"] == "0000000000000000" and host_view["CapPrm"] == "0000000000000000"
    assert host_view["NoNewPrivs"] == "1" and host_view["Seccomp"] == "2"
    assert host_view["Groups"] == ""
    assert inside["uid"] == inside["gid"] == 1000 and inside["user"] == "box" and inside["pid"] == 1
    assert inside["status"]["CapEff"] == "0000000000000000" and inside["status"]["CapBnd"] == "0000000000000000"
    assert inside["hostname"] == "box"


async def test_host_files_sockets_and_processes_are_out_of_reach(lab, lab_dir):
    secret = lab_dir / "secret.txt"
    secret.write_text("host secret")
    os.chmod(secret, 0o644)  # readable by anyone on the host: only the box's root keeps it out
    host_socket_path = f"/run/tkbox-e2e-{os.getpid()}-{os.urandom(3).hex()}.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(host_socket_path)
    os.chmod(host_socket_path, 0o666)
    listener.listen()
    try:
        async with lab.run(["host", "processes"], {"secret": str(secret), "host_socket": host_socket_path}) as run:
            seen, processes = run.results["host"], run.results["processes"]
    finally:
        listener.close()
        os.unlink(host_socket_path)
    assert seen["secret_exists"] is False and seen["secret_read"] == "ENOENT"
    assert seen["shadow_exists"] is False
    assert seen["host_socket"] in ("ENOENT", "ECONNREFUSED", "EACCES")
    assert "vsock" not in seen["dev"] and "kvm" not in seen["dev"] and "sda" not in seen["dev"]
    assert set(seen["root"]) <= {"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32", "etc", "tmp", "var",
                                 "run", "home", "proc", "dev", "workspace"}
    assert processes["pids"] == [1]  # /proc shows the box's own processes only
    assert processes["fds"] in ([0, 1, 2, 3], [0, 1, 2, 3, 4])  # stdio, the socket, the listing: no host fd


async def test_root_is_read_only_and_tmp_is_private_to_one_box(lab):
    async with lab.run(["filesystem"]) as run:
        writes = run.results["filesystem"]
    for path in ("/usr/tkbox-probe", "/etc/tkbox-probe", "/tkbox-probe", "/run/tkbox/base/x", "/run/tkbox/upper/x"):
        assert writes[path] == "EROFS", (path, writes)
    for path in ("/tmp/marker", "/var/tmp/marker", "/home/box/marker", "/run/marker"):
        assert writes[path] == "ok", (path, writes)
    async with lab.run(["leftovers"]) as second:
        assert second.results["leftovers"] == {"/tmp/marker": False, "/var/tmp/marker": False,
                                               "/home/box/marker": False}


async def test_workspace_writes_land_in_the_upper_dir_and_the_base_is_unchanged(lab):
    before = _tree_digest(lab.base)
    async with lab.run(["workspace"]) as run:
        mounts = Path("/proc/self/mountinfo").read_text()
        seen = run.results["workspace"]
        upper = run.spec.upper_dir
    assert str(lab.root) not in mounts  # the overlay lives in the launcher's mount namespace only
    assert seen["files"] == ["hello.txt", "run.sh"] and seen["base_files"] == ["hello.txt", "run.sh"]
    assert seen["hello"] == "hello from the host"
    assert seen["modify"] == seen["create"] == seen["delete"] == "ok"
    assert seen["upper_after"] == ["hello.txt", "made-in-box.txt", "run.sh"]
    whiteout = (upper / "run.sh").lstat()  # overlayfs records the deletion as a 0/0 character device
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == 0
    assert (upper / "hello.txt").read_text() == "changed in the box"
    assert (upper / "made-in-box.txt").read_text() == "new"
    assert (upper / "made-in-box.txt").stat().st_uid == lab.uid
    assert (lab.base / "hello.txt").read_text() == "hello from the host"
    assert _tree_digest(lab.base) == before
    assert str(lab.root) not in Path("/proc/self/mountinfo").read_text()


async def test_a_git_checkout_brings_tracked_and_unignored_files_but_no_secrets(lab_dir, backend, box_uid):
    checkout = lab_dir / "repo"
    checkout.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(checkout)]
    subprocess.run([*git, "init", "-q"], check=True)
    (checkout / ".gitignore").write_text(".env\nbuild/\n")
    (checkout / "app.py").write_text("print('app')\n")
    (checkout / ".env").write_text("TOKEN=do-not-copy\n")
    (checkout / "deploy.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (checkout / "build").mkdir()
    (checkout / "build" / "out.bin").write_text("ignored")
    subprocess.run([*git, "add", ".gitignore", "app.py", "deploy.pem"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)
    (checkout / "notes.md").write_text("untracked, not ignored\n")
    lab = BoxLab(lab_dir, backend, box_uid, checkout=checkout)
    async with lab.run(["workspace"]) as run:
        files = run.results["workspace"]["files"]
    assert files == [".gitignore", "app.py", "notes.md"]
    assert {"path": "deploy.pem", "reason": "credential file"} in lab.summary["excluded"]


async def test_a_pid1_that_cannot_be_executed_is_reported(lab):
    spec = dataclasses.replace(lab.spec(), channels={})
    try:
        box = await lab.backend.start(spec, ["/usr/bin/tkbox-no-such-program"])
    except BoxStartError as error:  # the ns launcher sees the failed exec itself
        assert lab.backend.name == "ns", str(error)
        assert "FileNotFoundError" in str(error) and "tkbox-no-such-program" in str(error)
    else:  # bwrap reports the failed exec on its stderr and exits 1
        assert lab.backend.name == "bwrap"
        assert await asyncio.wait_for(box.wait(), BOUND_S) == 1
        assert "tkbox-no-such-program" in spec.log_path.read_text()


async def test_the_agent_socket_from_the_host_is_reachable_inside(lab):
    async with lab.run(["identity"]) as run:  # run() itself is the proof: results arrived over agent.sock
        run.writer.write(b"tick\n")
        await run.writer.drain()
        assert await asyncio.wait_for(run.reader.readline(), BOUND_S) == b"1\n"


@pytest.mark.skipif(not {"memory", "pids"} <= set(available_controllers()), reason="needs cgroup v1 memory+pids")
async def test_memory_and_pid_limits_apply(lab):
    limits = BoxLimits(memory_bytes=96 << 20, pids_max=12)
    async with lab.run(["limits"], {"fork_tries": 64, "allocate_bytes": 400 << 20}, limits=limits) as run:
        seen = run.results["limits"]
        stats = run.box.stats()
    assert seen["fork_refused"] == "EAGAIN" and seen["forked"] < 12
    assert seen["hog_signal"] == signal.SIGKILL
    assert stats["pids_max"] == 12 and stats["pids_refused"] >= 1
    assert stats["memory_limit_bytes"] == 96 << 20 and stats["oom_kills"] >= 1


async def test_kill_leaves_no_process_and_no_cgroup_behind(lab):
    async with lab.run(["identity"]) as run:
        box = run.box
        namespace_before = box.namespace_pids()
        box.kill()
        run.returncode = await asyncio.wait_for(box.wait(), BOUND_S)
    assert namespace_before == {box.pid}
    assert run.returncode == 128 + signal.SIGKILL
    assert not Path(f"/proc/{box.pid}").exists() and not Path(f"/proc/{box.launcher_pid}").exists()
    assert box.namespace_pids() == set()
    for controller in available_controllers():
        assert not (CGROUP_ROOT / controller / PARENT_GROUP / run.spec.box_id).exists()


@pytest.mark.parametrize("mechanism", ["freezer", "signals"])
async def test_pause_stops_progress_and_resume_continues(lab, mechanism):
    async with lab.run(["identity"]) as run:
        box = run.box
        freezer = box.cgroup.groups.pop("freezer", None) if mechanism == "signals" and box.cgroup else None
        try:
            run.writer.write(b"tick\n")
            await run.writer.drain()
            assert await asyncio.wait_for(run.reader.readline(), BOUND_S) == b"1\n"
            await box.pause()
            state = Path(f"/proc/{box.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            assert state in ("T", "D") if mechanism == "freezer" else state == "T"
            run.writer.write(b"tick\n")
            await run.writer.drain()
            with pytest.raises(TimeoutError):  # a paused box answers nothing (a bound, not a synchronisation)
                await asyncio.wait_for(asyncio.shield(pending := asyncio.ensure_future(run.reader.readline())),
                                       0.3)
            await box.resume()
            assert await asyncio.wait_for(pending, BOUND_S) == b"2\n"
        finally:
            if freezer is not None:
                box.cgroup.groups["freezer"] = freezer


SUPERVISOR = r'''
import asyncio, json, sys
from pathlib import Path
from tkbox_daemon.box.backend import BoxSpec
from tkbox_daemon.box.bwrap import BwrapBackend
from tkbox_daemon.box.nslauncher import NsBackend

async def main():
    fields = json.loads(sys.argv[1])
    backend = BwrapBackend() if fields.pop("backend") == "bwrap" else NsBackend()
    argv, pause = fields.pop("argv"), fields.pop("pause")
    spec = BoxSpec(**{k: (Path(v) if k.endswith("_dir") else v) for k, v in fields.items()})
    box = await backend.start(spec, argv)
    if pause:
        await box.pause()
    print(box.launcher_pid, box.pid, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
'''


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
async def test_the_box_dies_with_its_supervisor(lab, paused):
    spec = lab.spec()
    fields = {"backend": lab.backend.name, "pause": paused, "box_id": spec.box_id, "state_dir": str(spec.state_dir),
              "base_dir": str(spec.base_dir), "upper_dir": str(spec.upper_dir), "work_dir": str(spec.work_dir),
              "etc_dir": str(spec.etc_dir), "box_uid": spec.box_uid, "channels": {},
              "argv": [BOX_PYTHON, "-I", "-S", "-c", "import select; select.select([], [], [])"]}
    supervisor = await asyncio.create_subprocess_exec(sys.executable, "-c", SUPERVISOR, json.dumps(fields),
                                                      stdout=subprocess.PIPE)
    try:
        line = await asyncio.wait_for(supervisor.stdout.readline(), BOUND_S)
        launcher_pid, box_pid = (int(value) for value in line.split())
        box_pidfd = os.pidfd_open(box_pid)
        launcher_pidfd = os.pidfd_open(launcher_pid)
        supervisor.kill()
        await supervisor.wait()
        for pidfd in (box_pidfd, launcher_pidfd):  # a pidfd turns readable when its process has exited
            ready = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().add_reader(pidfd, lambda ready=ready: ready.done() or ready.set_result(1))
            try:
                await asyncio.wait_for(ready, BOUND_S)
            finally:
                asyncio.get_running_loop().remove_reader(pidfd)
                os.close(pidfd)
        leftovers = leftover_groups(spec.box_id)
        assert all(process_state(pid) in (None, "Z") for pid in leftovers.pids())  # at most unreaped zombies
    finally:
        if supervisor.returncode is None:
            supervisor.kill()
            await supervisor.wait()
        _remove_leftover_groups(spec.box_id)


CLEANUP_RETRY_SECONDS = 0.01


def _remove_leftover_groups(box_id: str) -> None:
    """Cleanup only: the dead supervisor cannot remove its box's cgroups; the host's init reaps the launcher
    zombie (which still counts in the group) in its own time."""
    leftovers = leftover_groups(box_id)
    for _ in range(500):
        if leftovers.remove():
            return
        time.sleep(CLEANUP_RETRY_SECONDS)  # no event tells when the host's init has reaped it
