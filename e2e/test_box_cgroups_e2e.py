"""The cgroup claims of docs/box-isolation.md that e2e/test_box_isolation.py leaves out, on real boxes and both
backends: the cpu limit (quota written, a busy box throttled by the kernel), memory plus swap (the memsw limit
written, a hog OOM-killed and the kill recorded as ``box.oom``), and pause through the freezer (the kernel's
frozen state, never SIGSTOP's ``T``).

The cgroup v2 path runs on a cgroup2 file system each test mounts itself (``mount -t cgroup2``: on a v1 host only
controllers no v1 hierarchy holds are offered there, but freeze, kill, procs and events are core v2): real
processes frozen, thawed and killed as a group, real boxes of both backends in a v2 group, and a real daemon
started with ``--cgroup-root`` on that mount. Every test removes the groups it made and unmounts what it mounted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from box_lab import BOUND_S, BOX_PYTHON, UID_REGISTRY, BoxLab, require_backend

from e2e.daemon_process import daemon_process, events, make_checkout, next_event
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tests.bundle_records import record_lines
from tkbox_daemon.box import cgroups
from tkbox_daemon.box.backend import BoxLimits
from tkbox_daemon.box.bwrap import BwrapBackend
from tkbox_daemon.box.cgroups_files import parse_flat_keyed, parse_proc_cgroup, wait_for_key
from tkbox_daemon.box.cgroups_v2 import BoxCgroupV2
from tkbox_daemon.box.cgroups_v2_tree import V2Host
from tkbox_daemon.box.handle import process_state
from tkbox_daemon.box.nslauncher import NsBackend
from tkbox_daemon.box.uids import UidAllocator
from tkbox_daemon.signer.client import SignerClient, new_request_id
from tkbox_daemon.signer.paths import SignerPaths

pytestmark = pytest.mark.e2e

V1 = cgroups.host(cgroups.CGROUP_ROOT).summary()
needs_v1 = pytest.mark.skipif(
    V1.version != "v1" or V1.enforced != ("memory", "pids", "cpu") or V1.pause != "freezer",
    reason=f"needs cgroup v1 memory, pids, cpu and freezer (this host: {V1.kind}, {V1.enforced}, {V1.pause}); "
           "the v2 tests below cover a v2 host")
SILENCE_BOUND_S = 0.3  # how long a frozen box is given to answer anyway (a bound on a negative, never a sync)
NOT_STOPPED_BY_SIGNAL = ("T", "t")


# ---- fixtures -------------------------------------------------------------------------------------------------

@pytest.fixture(params=["bwrap", "ns"])
def backend(request):
    require_backend(request.param)
    return BwrapBackend() if request.param == "bwrap" else NsBackend()


@pytest.fixture
def lab(backend):
    root = Path(tempfile.mkdtemp(prefix="tkb-", dir="/tmp"))  # short: Unix socket paths are limited
    os.chmod(root, 0o711)  # passable, as the daemon's box directories: bwrap reaches the box's sockets as its uid;
    # the layers stay below BoxLab's own 0700 directory
    allocator = UidAllocator(UID_REGISTRY)
    owner = f"e2e-{os.getpid()}-{os.urandom(3).hex()}"
    uids = (allocator.allocate(owner), allocator.allocate(owner))
    try:
        yield BoxLab(root, backend, uids)
    finally:
        for uid in uids:
            allocator.release(uid, owner)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cgroup2():
    """A cgroup2 file system mounted by this test (the host's one unified hierarchy, seen at a new place); the
    groups the test made under tkbox/ (and tkbox/ itself, when the test made it) removed, and the mount gone,
    afterwards."""
    if os.geteuid() != 0:
        pytest.fail("mounting cgroup2 needs root; run the e2e tests as root")
    mount = Path(tempfile.mkdtemp(prefix="tkb-cg2-", dir="/tmp"))
    subprocess.run(["mount", "-t", "cgroup2", "none", str(mount)], check=True)
    parent = mount / cgroups.PARENT_GROUP
    before = set(parent.iterdir()) if parent.is_dir() else None
    try:
        yield mount
    finally:
        cgroups.forget_host(mount)
        for group in set(parent.iterdir()) - (before or set()) if parent.is_dir() else ():
            if group.is_dir():
                _remove_group(group)
        if before is None and parent.is_dir():
            parent.rmdir()
        subprocess.run(["umount", str(mount)], check=True)
        mount.rmdir()


@pytest.fixture
def v2_root(cgroup2, monkeypatch):
    """Boxes started in this test use the cgroup2 mount, as a daemon started with --cgroup-root does."""
    monkeypatch.setattr(cgroups, "_configured_root", None)
    assert cgroups.configure_root(cgroup2) == "v2"
    return cgroup2


def _remove_group(group: Path) -> None:
    """Cleanup only: kill what a test left in a box group, wait for the kernel to say it is empty, remove it."""
    (group / "cgroup.kill").write_text("1")
    assert wait_for_key(group / "cgroup.events", "populated", 0, BOUND_S), f"{group} does not empty"
    group.rmdir()


# ---- a box whose PID 1 does one piece of work and reports it ---------------------------------------------------

PID1 = r'''
import json, os, socket, sys, time
work = json.loads(sys.argv[1])
report = {}
if work.get("burn_cpu_s"):
    start = time.process_time()
    while time.process_time() - start < work["burn_cpu_s"]:
        pass
    report["burned_s"] = time.process_time() - start
sock = socket.socket(socket.AF_UNIX)
sock.connect("/run/tkbox/agent.sock")
sock.sendall(json.dumps(report).encode() + b"\n")
sock.makefile("rb").readline()  # the host's "bye", once it has looked at the live box
'''


class WorkingBox:
    """One box of ``PID1``: its handle, its report, and the connection the host ends it through."""

    def __init__(self, lab: BoxLab, limits: BoxLimits, work: dict) -> None:
        self.lab, self.limits, self.work = lab, limits, work
        self.box = self.spec = self.writer = None
        self.report: dict = {}

    async def __aenter__(self) -> WorkingBox:
        self.spec = self.lab.spec(self.limits)
        connected = asyncio.get_running_loop().create_future()
        self.server = await asyncio.start_unix_server(
            lambda reader, writer: connected.done() or connected.set_result((reader, writer)),
            path=str(self.spec.channels["agent"]))
        self.box = await self.lab.backend.start(self.spec, [BOX_PYTHON, "-I", "-S", "-c", PID1,
                                                            json.dumps(self.work)])
        try:
            reader, self.writer = await asyncio.wait_for(connected, BOUND_S)
        except TimeoutError:
            self.box.kill()
            await asyncio.wait_for(self.box.wait(), BOUND_S)
            raise AssertionError(f"the box never connected; box.log: {self.spec.log_path.read_text()}") from None
        line = await asyncio.wait_for(reader.readline(), BOUND_S)
        assert line, f"the box sent no report; box.log: {self.spec.log_path.read_text()}"
        self.report = json.loads(line)
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            self.writer.write(b"bye\n")
            await self.writer.drain()
            assert await asyncio.wait_for(self.box.wait(), BOUND_S) == 0
        finally:
            if self.box.returncode is None:
                self.box.kill()
                await asyncio.wait_for(self.box.wait(), BOUND_S)
            self.writer.close()
            self.server.close()
            await self.server.wait_closed()


# ---- cgroup v1 (this host): cpu, memory+swap, the freezer --------------------------------------------------------

@needs_v1
async def test_the_cpu_quota_is_written_and_the_kernel_throttles_a_busy_box(lab):
    # 1 ms of CPU per 10 ms period: a box that burns 30 ms of CPU time overruns its quota whatever else runs
    limits = BoxLimits(cpu_quota_us=1000, cpu_period_us=10_000, cpu_shares=256)
    async with WorkingBox(lab, limits, {"burn_cpu_s": 0.03}) as running:
        group = running.box.cgroup.groups["cpu"]
        written = {name: (group / name).read_text().strip() for name in
                   ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares")}
        stats = running.box.stats()
    assert written == {"cpu.cfs_quota_us": "1000", "cpu.cfs_period_us": "10000", "cpu.shares": "256"}
    assert running.report["burned_s"] >= 0.03
    assert stats["cpu_quota_us"] == 1000
    assert stats["cpu_throttled_periods"] >= 1 and stats["cpu_throttled_ns"] > 0  # the kernel held it back


@needs_v1
async def test_pause_freezes_every_box_process_through_the_freezer_not_sigstop(lab):
    async with lab.run(["identity"]) as run:
        box = run.box
        freezer = box.cgroup.groups["freezer"]
        await _tick(run, 1)
        await box.pause()
        members = box.namespace_pids()
        states = {pid: process_state(pid) for pid in members}
        assert (freezer / "freezer.state").read_text().strip() == "FROZEN"
        assert members and set(states.values()) == {"D"}, states  # the kernel's frozen state, never SIGSTOP's T
        assert box.launcher_pid not in _procs(freezer)  # the guard is out of the freezer group: not paused
        assert process_state(box.launcher_pid) not in ("D", *NOT_STOPPED_BY_SIGNAL)
        await _silent_while_paused_then_answers(run, box, 2)
        assert (freezer / "freezer.state").read_text().strip() == "THAWED"


def _procs(group: Path) -> list[int]:
    return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]


async def _tick(run, expected: int) -> None:
    run.writer.write(b"tick\n")
    await run.writer.drain()
    assert await asyncio.wait_for(run.reader.readline(), BOUND_S) == b"%d\n" % expected


async def _silent_while_paused_then_answers(run, box, expected: int) -> None:
    run.writer.write(b"tick\n")
    await run.writer.drain()
    pending = asyncio.ensure_future(run.reader.readline())
    with pytest.raises(TimeoutError):  # a paused box answers nothing
        await asyncio.wait_for(asyncio.shield(pending), SILENCE_BOUND_S)
    await box.resume()
    assert await asyncio.wait_for(pending, BOUND_S) == b"%d\n" % expected


# ---- cgroup v2 on a mount the test makes --------------------------------------------------------------------

def test_the_host_kind_is_told_from_the_file_system(cgroup2):
    assert cgroups.detect_hierarchy(cgroup2) == "v2"
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        mounts[fields[4]] = fields[fields.index("-") + 1]
    under = {point: kind for point, kind in mounts.items() if point.startswith("/sys/fs/cgroup/")}
    expected = ("v2" if mounts.get("/sys/fs/cgroup") == "cgroup2" else
                "none" if "cgroup" not in under.values() else
                "hybrid" if mounts.get("/sys/fs/cgroup/unified") == "cgroup2" else "v1")
    assert cgroups.detect_hierarchy(Path("/sys/fs/cgroup")) == expected


TICKER = r'''
import os, select, sys
out = os.fdopen(1, "wb", buffering=0)
sys.stdin.buffer.readline()  # "fork": we are in the group now, so the child is born there
child = os.fork()
if child == 0:
    select.select([], [], [])
out.write(b"%d\n" % child)
count = 0
for line in sys.stdin.buffer:
    count += 1
    out.write(b"%d\n" % count)
'''


async def test_v2_freezes_thaws_and_kills_a_real_process_tree_as_one(cgroup2, caplog, monkeypatch):
    monkeypatch.setattr(cgroups, "_warned", set())
    host = V2Host(cgroup2)
    with caplog.at_level(logging.WARNING, logger="tkbox.box.cgroups"):
        group = host.create(f"e2e-v2-{os.urandom(3).hex()}", BoxLimits(memory_bytes=64 << 20, pids_max=16))
    offered = (cgroup2 / "cgroup.controllers").read_text().split()
    for name, lost in (("memory", "memory limits"), ("pids", "process-count limits"), ("cpu", "CPU shares")):
        if name not in offered:  # on a v1 host every limit's controller is bound to its v1 hierarchy
            assert caplog.text.count(f"cgroup v2 controller {name} is not offered") == 1
            assert f"{lost}" in caplog.text
    assert isinstance(group, BoxCgroupV2) and group.group == cgroup2 / "tkbox" / group.box_id
    assert group.has_freezer and group.guard_files().kill == str(group.group / "cgroup.kill")
    ticker = await asyncio.create_subprocess_exec(sys.executable, "-c", TICKER, stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE)
    try:
        group.join(ticker.pid)
        ticker.stdin.write(b"fork\n")
        child = int(await asyncio.wait_for(ticker.stdout.readline(), BOUND_S))
        child_pidfd = os.pidfd_open(child)
        assert group.pids() == {ticker.pid, child}
        assert _v2_path(ticker.pid) == _v2_path(child) == f"/tkbox/{group.box_id}"
        assert parse_flat_keyed((group.group / "cgroup.events").read_text())["populated"] == 1
        ticker.stdin.write(b"tick\n")
        assert await asyncio.wait_for(ticker.stdout.readline(), BOUND_S) == b"1\n"
        await group.set_frozen(True)  # returns once cgroup.events says frozen 1
        assert group.stats()["frozen"] is True
        assert process_state(ticker.pid) not in NOT_STOPPED_BY_SIGNAL
        assert process_state(child) not in NOT_STOPPED_BY_SIGNAL
        ticker.stdin.write(b"tick\n")
        pending = asyncio.ensure_future(ticker.stdout.readline())
        with pytest.raises(TimeoutError):  # frozen: no answer
            await asyncio.wait_for(asyncio.shield(pending), SILENCE_BOUND_S)
        await group.set_frozen(False)
        assert await asyncio.wait_for(pending, BOUND_S) == b"2\n"  # thawed: it goes on where it stopped
        assert group.stats()["frozen"] is False
        await group.set_frozen(True)
        group.kill_all()  # while frozen: v2 lets SIGKILL through
        assert await asyncio.wait_for(ticker.wait(), BOUND_S) == -signal.SIGKILL
        await _readable(child_pidfd)
        assert await group.wait_empty(BOUND_S) is True
        assert parse_flat_keyed((group.group / "cgroup.events").read_text())["populated"] == 0
        assert group.remove() is True and not group.group.exists()
    finally:
        if ticker.returncode is None:
            ticker.kill()
            await ticker.wait()


def _v2_path(pid: int | str) -> str:
    lines = parse_proc_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
    return next(line.path for line in lines if line.hierarchy == 0)


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await asyncio.wait_for(ready, BOUND_S)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def test_a_box_of_each_backend_lives_in_its_v2_group_pauses_by_cgroup_freeze_and_dies_by_cgroup_kill(
        lab, v2_root):
    async with lab.run(["identity"], limits=BoxLimits(pids_max=64)) as run:
        box = run.box
        group = box.cgroup.group
        assert isinstance(box.cgroup, BoxCgroupV2) and group == v2_root / "tkbox" / run.spec.box_id
        members = box.namespace_pids()
        assert members and members <= box.cgroup.pids()  # every box process is in the group ...
        assert box.launcher_pid not in box.cgroup.pids()  # ... but its guard, which pausing must not reach
        assert _v2_path(box.pid) == f"/tkbox/{run.spec.box_id}"
        await _tick(run, 1)
        await box.pause()
        assert parse_flat_keyed((group / "cgroup.events").read_text())["frozen"] == 1
        assert not {process_state(pid) for pid in box.namespace_pids()} & set(NOT_STOPPED_BY_SIGNAL)
        await _silent_while_paused_then_answers(run, box, 2)
        assert parse_flat_keyed((group / "cgroup.events").read_text())["frozen"] == 0
        await box.pause()
        box.kill()  # cgroup.kill, the box frozen
        run.returncode = await asyncio.wait_for(box.wait(), BOUND_S)
    assert run.returncode == 128 + signal.SIGKILL
    assert not group.exists() and box.namespace_pids() == set()


SUPERVISOR = r'''
import asyncio, json, sys
from pathlib import Path
from tkbox_daemon.box import cgroups
from tkbox_daemon.box.backend import BoxSpec
from tkbox_daemon.box.bwrap import BwrapBackend
from tkbox_daemon.box.nslauncher import NsBackend

async def main():
    fields = json.loads(sys.argv[1])
    cgroups.configure_root(Path(fields.pop("cgroup_root")))
    backend = BwrapBackend() if fields.pop("backend") == "bwrap" else NsBackend()
    argv = fields.pop("argv")
    spec = BoxSpec(**{k: (Path(v) if k.endswith("_dir") else v) for k, v in fields.items()})
    box = await backend.start(spec, argv)
    await box.pause()
    print(box.launcher_pid, box.pid, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
'''


async def test_a_paused_v2_box_dies_with_its_supervisor(lab, cgroup2):
    spec = lab.spec()
    fields = {"backend": lab.backend.name, "cgroup_root": str(cgroup2), "box_id": spec.box_id,
              "state_dir": str(spec.state_dir), "base_dir": str(spec.base_dir), "upper_dir": str(spec.upper_dir),
              "work_dir": str(spec.work_dir), "etc_dir": str(spec.etc_dir), "box_uid": spec.box_uid,
              "job_uid": spec.job_uid, "channels": {},
              "argv": [BOX_PYTHON, "-I", "-S", "-c", "import select; select.select([], [], [])"]}
    supervisor = await asyncio.create_subprocess_exec(sys.executable, "-c", SUPERVISOR, json.dumps(fields),
                                                      stdout=subprocess.PIPE)
    try:
        line = await asyncio.wait_for(supervisor.stdout.readline(), BOUND_S)
        launcher_pid, box_pid = (int(value) for value in line.split())
        group = cgroup2 / "tkbox" / spec.box_id
        assert parse_flat_keyed((group / "cgroup.events").read_text())["frozen"] == 1
        assert launcher_pid not in _procs(group)  # the guard left the group: the freeze did not take it
        pidfds = [os.pidfd_open(box_pid), os.pidfd_open(launcher_pid)]
        supervisor.kill()  # the launcher's guard takes the frozen box down with cgroup.kill, then exits
        await supervisor.wait()
        for pidfd in pidfds:
            await _readable(pidfd)
        assert wait_for_key(group / "cgroup.events", "populated", 0, BOUND_S)
    finally:
        if supervisor.returncode is None:
            supervisor.kill()
            await supervisor.wait()


# ---- real daemons ------------------------------------------------------------------------------------------------

@contextmanager
def _daemon_with_a_box(backend: str, tmp_path: Path, *daemon_args: str, limits: tuple[str, ...] = ()):
    tkbox("signer", "up")
    try:
        with daemon_process(*daemon_args, backend=backend) as daemon:
            checkout = make_checkout(tmp_path)
            info = tkbox_json("run", "--name", "cg", "--workspace", str(checkout), *limits)
            assert info["state"] == "running"
            yield daemon, info
    finally:
        tkbox("signer", "down", check=False)


def _exec(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([TKBOX, "exec", "cg", "--", *argv], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


def _containment(run_id: str, method: str) -> None:
    with SignerClient(SignerPaths.from_env().socket) as signer:
        signer.call(method, request_id=new_request_id(), run_id=run_id, reason=f"e2e: {method} through the cgroup")


def _last_seq() -> int:
    return max((event["seq"] for event in events()), default=0)


@needs_v1
@pytest.mark.parametrize(("backend_name", "start_ahead"), [("bwrap", "0"), ("bwrap", "1"), ("ns", "0")])
def test_a_daemons_box_gets_cpu_and_memory_plus_swap_limits_its_oom_kill_is_recorded_and_hold_freezes_it(
        backend_name, start_ahead, tmp_path):
    """Cold, and taken from the boxes started ahead (started with the default limits, given these at the take)."""
    require_backend(backend_name)
    limits = ("--memory", "160M", "--cpus", "1", "--pids", "64")
    with _daemon_with_a_box(backend_name, tmp_path, "--start-ahead", start_ahead, limits=limits) as (_, info):
        box_id = info["id"]
        created = [event for event in events("cg") if event["kind"] == "box.created"]
        assert created[0]["data"]["started_ahead"] is (start_ahead == "1")
        group = {name: cgroups.CGROUP_ROOT / name / cgroups.PARENT_GROUP / box_id for name in ("memory", "cpu",
                                                                                               "freezer", "pids")}
        read = {name: (group[controller] / name).read_text().strip() for controller, name in (
            ("memory", "memory.limit_in_bytes"), ("memory", "memory.memsw.limit_in_bytes"),
            ("cpu", "cpu.cfs_quota_us"), ("cpu", "cpu.cfs_period_us"), ("pids", "pids.max"))}
        assert read == {"memory.limit_in_bytes": str(160 << 20), "memory.memsw.limit_in_bytes": str(160 << 20),
                        "cpu.cfs_quota_us": "100000", "cpu.cfs_period_us": "100000", "pids.max": "64"}
        # a hog: killed inside the box's memory cgroup (swap is no way out), the box runs on, the kill recorded
        before = _last_seq()
        hog = _exec("/usr/bin/python3", "-c", "block = b'x' * (600 << 20)")
        assert hog.returncode == 137, hog.stderr
        oom = next_event("box.oom", "cg", after=before, bound_s=BOUND_S)
        assert oom["data"]["oom_kills"] >= 1 and oom["data"]["new"] >= 1
        assert _exec("echo", "still here").stdout == b"still here\n"
        # hold: the daemon pauses the box through the freezer
        before = _last_seq()
        _containment(info["run_id"], "hold")
        next_event("box.held", "cg", after=before, bound_s=BOUND_S)
        assert (group["freezer"] / "freezer.state").read_text().strip() == "FROZEN"
        members = _procs(group["freezer"])
        assert members and {process_state(pid) for pid in members} == {"D"}  # frozen, never SIGSTOP's T
        before = _last_seq()
        _containment(info["run_id"], "release")
        next_event("box.released", "cg", after=before, bound_s=BOUND_S)
        assert (group["freezer"] / "freezer.state").read_text().strip() == "THAWED"
        assert _exec("echo", "released").stdout == b"released\n"
        tkbox("stop", "cg")
        [stopped] = [event for event in events("cg") if event["kind"] == "box.stopped"]
        assert stopped["data"]["oom_kills"] >= 1  # the box's end says what its memory limit did
        assert oom["data"]["limit"] == "box_memory" and "box_memory" in oom["data"]["reason"]
        bundle = tmp_path / "cg.tkb"
        tkbox("export", "cg", "-o", str(bundle))
        lines = record_lines(bundle)
        observed = [record["event"]["data"] for record in map(json.loads, lines)
                    if record["event"]["type"] == "input.observed"]
        assert [(item["source"], item["trust"], item["must_keep"]) for item in observed
                if item["source"] == "tkbox.limit"] == [("tkbox.limit", "trusted", True)]  # the kill, in the run
        assert not any(path.exists() for path in group.values())


@pytest.mark.parametrize("backend_name", ["bwrap", "ns"])
def test_a_daemon_started_with_cgroup_root_on_a_cgroup2_mount_runs_its_boxes_there(backend_name, tmp_path,
                                                                                    cgroup2):
    require_backend(backend_name)
    with _daemon_with_a_box(backend_name, tmp_path, "--cgroup-root", str(cgroup2),
                            limits=("--pids", "64")) as (daemon, info):
        group = cgroup2 / "tkbox" / info["id"]
        assert group.is_dir() and info["pid"] in _procs(group)
        assert _v2_path(info["pid"]) == f"/tkbox/{info['id']}"
        # the job ran in the group from its first instruction: its cgroup namespace is rooted there
        inside = parse_proc_cgroup(_exec("cat", "/proc/self/cgroup").stdout.decode())
        assert [line.path for line in inside if line.hierarchy == 0] == ["/"]
        before = _last_seq()
        _containment(info["run_id"], "hold")
        next_event("box.held", "cg", after=before, bound_s=BOUND_S)
        assert parse_flat_keyed((group / "cgroup.events").read_text())["frozen"] == 1
        members = _procs(group)
        assert members and not {process_state(pid) for pid in members} & set(NOT_STOPPED_BY_SIGNAL)
        before = _last_seq()
        _containment(info["run_id"], "release")
        next_event("box.released", "cg", after=before, bound_s=BOUND_S)
        assert parse_flat_keyed((group / "cgroup.events").read_text())["frozen"] == 0
        assert _exec("echo", "thawed").stdout == b"thawed\n"
        tkbox("stop", "cg")
        assert not group.exists()
        assert "boxes use the cgroup v2 hierarchy at" in daemon.log.read_text()
