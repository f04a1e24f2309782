"""Real boxes with both real backends (bwrap and the ns launcher): every test runs against each.

The host side and the in-box probe are in ``box_lab``: each box runs the checks a test names and reports them
before the host inspects it from outside.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
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
from pathlib import Path

import pytest
from box_lab import BOUND_S, BOX_PYTHON, UID_REGISTRY, BoxLab, require_backend, tree_digest

from tkbox_daemon.box.backend import BoxLimits, BoxStartError
from tkbox_daemon.box.bwrap import BwrapBackend
from tkbox_daemon.box.cgroups import CGROUP_ROOT, PARENT_GROUP, available_controllers, leftover_groups
from tkbox_daemon.box.handle import process_state
from tkbox_daemon.box.nslauncher import NsBackend
from tkbox_daemon.box.uids import UidAllocator

pytestmark = pytest.mark.e2e


@pytest.fixture(params=["bwrap", "ns"])
def backend(request):
    require_backend(request.param)
    return BwrapBackend() if request.param == "bwrap" else NsBackend()


@pytest.fixture
def box_uids():
    """The guest's host uid and the job's, as the daemon hands them out."""
    allocator = UidAllocator(UID_REGISTRY)
    box_id = f"e2e-{os.getpid()}-{os.urandom(3).hex()}"
    uids = (allocator.allocate(box_id), allocator.allocate(box_id))
    yield uids
    for uid in uids:
        allocator.release(uid, box_id)


@pytest.fixture
def lab_dir():
    path = Path(tempfile.mkdtemp(prefix="tkb-", dir="/tmp"))  # short: Unix socket paths are limited
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def lab(lab_dir, backend, box_uids):
    return BoxLab(lab_dir, backend, box_uids)


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


GUEST_CAPABILITIES = f"{(1 << 0) | (1 << 2) | (1 << 5) | (1 << 6) | (1 << 7):016x}"  # chown dac_read kill setgid setuid


async def test_the_job_and_the_guest_run_as_two_unprivileged_host_uids(lab):
    async with lab.run(["identity"]) as run:
        host_view = run.host_status()  # the box waits for our "bye": it is alive while we look
        inside = run.results["identity"]
        uid_map = Path(f"/proc/{run.box.pid}/uid_map").read_text().split()
    # PID 1 (the guest's place): its own host uid, only the guest's capabilities, and those of its namespace only
    uid_fields = [int(value) for value in host_view["Uid"].split()]
    assert all(value == lab.uid >= 100_000 for value in uid_fields)
    assert all(int(value) == lab.uid for value in host_view["Gid"].split())
    assert host_view["CapEff"] == host_view["CapPrm"] == GUEST_CAPABILITIES
    assert host_view["CapBnd"] == host_view["CapInh"] == host_view["CapAmb"] == "0000000000000000"
    assert host_view["NoNewPrivs"] == "1" and host_view["Seccomp"] == "2"
    assert host_view["Groups"] == ""
    assert uid_map == ["0", str(lab.uid), "1", "1000", str(lab.job_uid), "1"]
    # the job: in-box 1000 on another host uid, no capability in any set
    assert lab.job_uid != lab.uid and lab.job_uid >= 100_000
    assert inside["uid"] == inside["gid"] == 1000 and inside["user"] == "box" and inside["pid"] != 1
    for key in ("CapEff", "CapPrm", "CapBnd"):
        assert inside["status"][key] == "0000000000000000", (key, inside["status"])
    assert inside["hostname"] == "box"


NAMESPACES = ("ipc", "cgroup", "pid", "uts", "mnt", "net", "user")
IPC_CREAT, IPC_EXCL, IPC_RMID = 0o1000, 0o2000, 0


def _shm_keys() -> set[int]:
    """The keys of the System V shared memory segments the caller's IPC namespace holds."""
    return {int(line.split()[0]) for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]}


def _namespace_args() -> dict:
    host_key, box_key = (int.from_bytes(os.urandom(4), "big") % (2**31 - 2) + 1 for _ in range(2))
    return {"kinds": NAMESPACES, "host_shm_key": host_key, "box_shm_key": box_key}


async def test_the_box_has_its_own_namespaces_system_v_ipc_and_cgroup_view(lab):
    libc = ctypes.CDLL(None, use_errno=True)
    args = _namespace_args()
    segment = libc.shmget(ctypes.c_int(args["host_shm_key"]), ctypes.c_size_t(4096),
                          ctypes.c_int(IPC_CREAT | IPC_EXCL | 0o666))  # readable by anyone: only the ns keeps it out
    assert segment >= 0, os.strerror(ctypes.get_errno())
    try:
        async with lab.run(["namespaces"], args) as run:
            seen = run.results["namespaces"]
            pid1 = {kind: os.readlink(f"/proc/{run.box.pid}/ns/{kind}") for kind in NAMESPACES}
            host_view = Path(f"/proc/{run.box.pid}/cgroup").read_text().splitlines()
            host_keys = _shm_keys()  # while the box, and the segment it made, live
    finally:
        libc.shmctl(ctypes.c_int(segment), ctypes.c_int(IPC_RMID), None)
    ours = {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in NAMESPACES}
    assert [kind for kind in NAMESPACES if pid1[kind] == ours[kind]] == []
    assert seen["links"] == pid1  # the job is in the box's namespaces, and in none of the host's
    assert seen["host_shm"] == "ENOENT" and seen["own_shm"] == "ok"
    assert args["host_shm_key"] not in seen["shm_keys"] and args["box_shm_key"] in seen["shm_keys"]
    assert args["box_shm_key"] not in host_keys and args["host_shm_key"] in host_keys
    # its own cgroup namespace: the box sees each of its cgroups as the root, the host sees where they are
    assert seen["cgroup"] and [line for line in seen["cgroup"] if line.split(":", 2)[2] != "/"] == []
    if available_controllers():
        assert any(line.endswith("/" + run.spec.box_id) for line in host_view), host_view


async def test_box_processes_are_the_first_the_oom_killer_takes(lab):
    async with lab.run(["namespaces"], _namespace_args()) as run:
        pid1 = int(Path(f"/proc/{run.box.pid}/oom_score_adj").read_text())
        launcher = int(Path(f"/proc/{run.box.launcher_pid}/oom_score_adj").read_text())
        job = run.results["namespaces"]["oom_score_adj"]
    assert pid1 == job == 1000
    assert launcher < 1000  # the launcher (a copy of the daemon) keeps the daemon's value


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
            pid1_fds = {int(fd): os.readlink(f"/proc/{run.box.pid}/fd/{fd}")
                        for fd in os.listdir(f"/proc/{run.box.pid}/fd")}
    finally:
        listener.close()
        os.unlink(host_socket_path)
    assert seen["secret_exists"] is False and seen["secret_read"] == "ENOENT"
    assert seen["shadow_exists"] is False
    assert seen["host_socket"] in ("ENOENT", "ECONNREFUSED", "EACCES")
    assert "vsock" not in seen["dev"] and "kvm" not in seen["dev"] and "sda" not in seen["dev"]
    assert set(seen["root"]) <= {"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32", "etc", "tmp", "var",
                                 "run", "home", "proc", "dev", "workspace"}
    assert processes["pids"][0] == 1 and len(processes["pids"]) == 2  # the box's own processes only: PID 1, the job
    assert processes["fds"][:3] == [0, 1, 2] and len(processes["fds"]) == 5  # + the result pipe, the listing
    # PID 1: stdio and its agent socket; no host directory or memfd fd came through the launcher. bwrap leaves
    # the box's own user namespace fd (--userns) open; the guest closes everything but stdio at boot.
    assert sorted(pid1_fds) == [0, 1, 2, 3] and pid1_fds[3].startswith("socket:"), pid1_fds
    inherited = {int(fd): target for fd, target in run.results["inherited_fds"].items()}
    extra = {fd: target for fd, target in inherited.items() if fd > 2 and not target.startswith("/proc/")}
    assert all(target.startswith("user:[") for target in extra.values()) and len(extra) <= 1, inherited


async def test_root_is_read_only_and_tmp_is_private_to_one_box(lab):
    async with lab.run(["filesystem"]) as run:
        writes = run.results["filesystem"]
    for path in ("/usr/tkbox-probe", "/etc/tkbox-probe", "/tkbox-probe", "/run/tkbox/base/x", "/run/tkbox/upper/x"):
        assert writes[path] == "EROFS", (path, writes)
    for path in ("/tmp/marker", "/var/tmp/marker", "/home/box/marker"):
        assert writes[path] == "ok", (path, writes)
    assert writes["/run/marker"] == "EACCES"  # /run and /run/tkbox are the guest's
    async with lab.run(["leftovers"]) as second:
        assert second.results["leftovers"] == {"/tmp/marker": False, "/var/tmp/marker": False,
                                               "/home/box/marker": False}


async def test_workspace_writes_land_in_the_upper_dir_and_the_base_is_unchanged(lab):
    before = tree_digest(lab.base)
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
    assert (upper / "made-in-box.txt").stat().st_uid == lab.job_uid
    assert (lab.base / "hello.txt").read_text() == "hello from the host"
    assert tree_digest(lab.base) == before
    assert str(lab.root) not in Path("/proc/self/mountinfo").read_text()


async def test_a_git_checkout_brings_tracked_and_unignored_files_but_no_secrets(lab_dir, backend, box_uids):
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
    lab = BoxLab(lab_dir, backend, box_uids, checkout=checkout)
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
    # 160 MiB: room for the box's own Python and the page cache it is charged for when the host is busy (at 96 MiB
    # the checking process itself was sometimes the one killed), far below what the hog asks for
    limits = BoxLimits(memory_bytes=160 << 20, pids_max=12)
    async with lab.run(["limits"], {"fork_tries": 64, "allocate_bytes": 600 << 20}, limits=limits) as run:
        seen = run.results["limits"]
        stats = run.box.stats()
    assert seen["fork_refused"] == "EAGAIN" and seen["forked"] < 12
    assert seen["hog_signal"] == signal.SIGKILL
    assert stats["pids_max"] == 12 and stats["pids_refused"] >= 1
    assert stats["memory_limit_bytes"] == 160 << 20 and stats["oom_kills"] >= 1


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
              "etc_dir": str(spec.etc_dir), "box_uid": spec.box_uid, "job_uid": spec.job_uid,
              "channels": {},
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
