"""The backend interface and the pieces around the launchers that need no box: spec validation, the mount plan
and its bwrap rendering, host-path checks, status parsing, the bounded log, cgroups, the test-only fake backend
and the probe."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tkbox_daemon.box import cgroups, probe
from tkbox_daemon.box.backend import BoxError, BoxLimits, BoxSpec, BoxStartError, check_argv
from tkbox_daemon.box.bwrap import BwrapBackend, bwrap_argv, parse_child_pid
from tkbox_daemon.box.cgroups import BoxCgroup
from tkbox_daemon.box.fake import FakeBackend
from tkbox_daemon.box.handle import LogPump
from tkbox_daemon.box.launch import parse_reported_pid
from tkbox_daemon.box.layout import Bind, BoxSources, Special, Symlink, Tmpfs

UID = 100_777
JOB_UID = 100_778


@pytest.fixture
def spec_dirs(tmp_path):
    """A spec whose host paths exist with the owners the backend requires."""
    for name in ("base", "upper", "work", "state", "guest"):
        (tmp_path / name).mkdir(mode=0o755)
    for name in ("base", "upper", "work"):
        os.chown(tmp_path / name, JOB_UID, JOB_UID)
    (tmp_path / "etc").mkdir(mode=0o755)
    agent = socket.socket(socket.AF_UNIX)
    agent.bind(str(tmp_path / "agent.sock"))
    yield BoxSpec(box_id="unit-1", state_dir=tmp_path / "state", base_dir=tmp_path / "base",
                  upper_dir=tmp_path / "upper", work_dir=tmp_path / "work", etc_dir=tmp_path / "etc",
                  box_uid=UID, job_uid=JOB_UID, channels={"agent": tmp_path / "agent.sock"},
                  guest_dir=tmp_path / "guest")
    agent.close()


def _spec(tmp_path: Path, **changes) -> BoxSpec:
    fields = {"box_id": "b1", "state_dir": tmp_path, "base_dir": tmp_path / "b", "upper_dir": tmp_path / "u",
              "work_dir": tmp_path / "w", "etc_dir": tmp_path / "e", "box_uid": UID,
              "job_uid": JOB_UID}
    fields.update(changes)
    return BoxSpec(**fields)


@pytest.mark.parametrize("changes", [
    {"box_uid": 0}, {"box_uid": 1000}, {"box_uid": True}, {"box_id": "../x"}, {"box_id": "UPPER"},
    {"base_dir": Path("relative")}, {"upper_dir": Path("/a/../b")}, {"work_dir": Path("/a:b")},
    {"channels": {"Bad Name": Path("/x")}}, {"channels": {"agent": Path("rel.sock")}},
    {"env": {"A=B": "x"}}, {"env": {"A": "nul\0"}}, {"cwd": "relative"}, {"log_limit_bytes": 10},
    {"hostname": "a b"}, {"hostname": "-x"}, {"hostname": ""},
])
def test_invalid_specs_are_refused(tmp_path, changes):
    with pytest.raises(ValueError):
        _spec(tmp_path, **changes)


@pytest.mark.parametrize("limits", [{"memory_bytes": 0}, {"pids_max": -1}, {"cpu_shares": 1},
                                    {"cpu_quota_us": 10}, {"cpu_period_us": 10}, {"memory_bytes": True}])
def test_invalid_limits_are_refused(limits):
    with pytest.raises(ValueError):
        BoxLimits(**limits)


def test_argv_must_be_absolute_strings():
    assert check_argv(["/usr/bin/python3", "-c", "pass"]) == ["/usr/bin/python3", "-c", "pass"]
    for bad in ([], ["python3"], ["/bin/sh", 1], ["/bin/sh", "a\0b"]):
        with pytest.raises(ValueError):
            check_argv(bad)


def test_the_plan_follows_the_box_contract(spec_dirs):
    sources = BoxSources.open(spec_dirs)
    try:
        plan = sources.plan()
    finally:
        sources.close()
    dests = [step.dest for step in plan]
    assert dests[0] == "/usr" and isinstance(plan[0], Bind) and plan[0].readonly
    for link in ("/bin", "/sbin", "/lib", "/lib64"):
        assert Symlink(link, "usr" + link) in plan
    assert {"/etc", "/tmp", "/var/tmp", "/run", "/home/box", "/proc", "/dev", "/workspace", "/run/tkbox/base",
            "/run/tkbox/upper", "/run/tkbox/guest", "/run/tkbox/agent.sock"} <= set(dests)
    assert dests.index("/run") < dests.index("/run/tkbox/base") < dests.index("/run/tkbox/agent.sock")
    assert all(step.readonly for step in plan if isinstance(step, Bind))
    assert Tmpfs("/tmp", 0o1777) in plan and Special("/workspace", "workspace") in plan
    assert "/" not in dests


def test_an_image_root_provides_usr_and_its_top_level_directories(spec_dirs, tmp_path):
    image = tmp_path / "image"
    (image / "usr" / "lib").mkdir(parents=True)
    (image / "bin").mkdir()  # not merged into /usr: bound as it is
    os.symlink("usr/lib", image / "lib")
    os.symlink("/etc", image / "sbin")  # a link out of what the box gets: left out
    spec = dataclasses.replace(spec_dirs, image_root=image)
    sources = BoxSources.open(spec)
    try:
        plan = sources.plan()
        assert os.path.samestat(os.fstat(plan[0].fd), os.stat(image / "usr"))
        bin_step = next(step for step in plan if step.dest == "/bin")
        assert isinstance(bin_step, Bind) and os.path.samestat(os.fstat(bin_step.fd), os.stat(image / "bin"))
    finally:
        sources.close()
    assert Symlink("/lib", "usr/lib") in plan
    assert not any(step.dest in ("/sbin", "/lib64") for step in plan)


def test_bwrap_argv_is_hardened_and_never_binds_the_host_root(spec_dirs):
    sources = BoxSources.open(spec_dirs)
    try:
        argv = bwrap_argv("/usr/bin/bwrap", spec_dirs, sources.plan(), workspace_fd=90, seccomp_fd=91,
                          status_fd=92, userns_fd=93, argv=["/usr/bin/python3", "-I"])
    finally:
        sources.close()
    for flag in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
                 "--die-with-parent", "--new-session", "--as-pid-1"):
        assert flag in argv
    assert "--unshare-user" not in argv and "--unshare-all" not in argv  # the user namespace is ours: --userns
    assert argv[argv.index("--userns") + 1] == "93"
    # every capability dropped, then exactly the guest's added back (the guest cuts its bounding set at boot)
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    added = [argv[i + 1] for i, flag in enumerate(argv) if flag == "--cap-add"]
    assert sorted(added) == ["CAP_CHOWN", "CAP_DAC_READ_SEARCH", "CAP_KILL", "CAP_SETGID", "CAP_SETPCAP",
                             "CAP_SETUID"]
    assert argv.index("--cap-drop") < min(i for i, flag in enumerate(argv) if flag == "--cap-add")
    assert argv[argv.index("--seccomp") + 1] == "91" and argv[argv.index("--json-status-fd") + 1] == "92"
    assert argv[argv.index("--uid") + 1] == "0" and "--share-net" not in argv  # the guest is the box's root
    # parents of mount points are made 0755 first (bwrap's own would be 0700 and keep the job user out)
    assert argv[argv.index("/home") - 2:argv.index("/home")] == ["0755", "--dir"]
    pairs = list(zip(argv, argv[1:], strict=False))
    assert ("--bind-fd", "90") in pairs and argv[argv.index("90") + 1] == "/workspace"
    assert ("--remount-ro", "/") in pairs
    assert not any(a in ("--ro-bind", "--bind", "--dev-bind") and b == "/" for a, b in pairs)
    assert argv[-3:] == ["--", "/usr/bin/python3", "-I"]


def test_host_paths_are_checked_and_symlinks_refused(spec_dirs, tmp_path):
    os.chown(spec_dirs.upper_dir, 0, 0)
    with pytest.raises(BoxStartError, match="upper_dir .* owned by uid 0"):
        BoxSources.open(spec_dirs)
    os.chown(spec_dirs.upper_dir, JOB_UID, JOB_UID)
    os.chmod(spec_dirs.etc_dir, 0o777)
    with pytest.raises(BoxStartError, match="writable by group or others"):
        BoxSources.open(spec_dirs)
    os.chmod(spec_dirs.etc_dir, 0o755)
    os.rename(spec_dirs.base_dir, tmp_path / "real-base")
    os.symlink(tmp_path / "real-base", spec_dirs.base_dir)
    with pytest.raises(BoxStartError, match="base_dir"):
        BoxSources.open(spec_dirs)
    os.unlink(spec_dirs.base_dir)
    os.rename(tmp_path / "real-base", spec_dirs.base_dir)
    os.unlink(tmp_path / "agent.sock")
    (tmp_path / "agent.sock").write_text("not a socket")
    with pytest.raises(BoxStartError, match="not a Unix socket"):
        BoxSources.open(spec_dirs)


def test_channel_sockets_are_handed_to_the_box_uid(spec_dirs):
    BoxSources.open(spec_dirs).close()
    info = spec_dirs.channels["agent"].stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (UID, UID, 0o600)


def test_reopening_detects_a_swapped_directory(spec_dirs, tmp_path):
    sources = BoxSources.open(spec_dirs)
    try:
        os.rename(spec_dirs.guest_dir, tmp_path / "old-guest")
        (tmp_path / "guest").mkdir()
        with pytest.raises(BoxStartError, match="changed while the box was starting"):
            sources.reopened_here()
    finally:
        sources.close()


def test_status_parsers():
    assert parse_child_pid(b'{ "child-pid": 42') is None
    assert parse_child_pid(b'{ "child-pid": 42, "pid-namespace": 1 }\n') == 42
    with pytest.raises(BoxStartError):
        parse_child_pid(b'{ "exit-code": 1 }\n')
    assert parse_reported_pid(b"P12") is None and parse_reported_pid(b"P12\n") == (12, None)
    assert parse_reported_pid(b"P12 7\n") == (12, 7) and parse_reported_pid(b"P1 2 3\n") is None


async def test_the_log_is_bounded_and_says_so(tmp_path):
    read_fd, write_fd = os.pipe()
    pump = LogPump(read_fd, tmp_path / "box.log", limit=4096)
    os.write(write_fd, b"a" * 3000)
    os.write(write_fd, b"b" * 3000)
    os.close(write_fd)
    await pump.finished()
    text = (tmp_path / "box.log").read_text()
    assert text.startswith("a" * 3000 + "b" * 1096)
    assert text.endswith("[tkbox: log truncated, 1904 bytes dropped]\n")


def test_cgroups_apply_limits_and_are_removed():
    if not {"memory", "pids", "cpu"} <= set(cgroups.available_controllers()):
        pytest.skip("needs cgroup v1 memory, pids and cpu controllers")
    group = BoxCgroup.create("unit-cg", BoxLimits(memory_bytes=64 << 20, pids_max=7, cpu_shares=256,
                                                  cpu_quota_us=50_000))
    try:
        assert (group.groups["memory"] / "memory.limit_in_bytes").read_text().strip() == str(64 << 20)
        assert (group.groups["pids"] / "pids.max").read_text().strip() == "7"
        assert (group.groups["cpu"] / "cpu.shares").read_text().strip() == "256"
        assert (group.groups["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        stats = group.stats()
        assert stats["pids"] == 0 and stats["pids_max"] == 7 and stats["memory_limit_bytes"] == 64 << 20
        member = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        try:
            group.join(member.pid)
            assert group.pids() == {member.pid} and group.stats()["pids"] == 1
            with pytest.raises(BoxError, match="already has processes"):  # a live box has this id
                BoxCgroup.create("unit-cg", BoxLimits())
            assert group.remove() is False  # busy: left in place
        finally:
            member.kill()
            member.wait()
    finally:
        assert group.remove() is True
    assert not any(path.exists() for path in group.groups.values())


def test_missing_controllers_degrade_with_a_warning(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(cgroups, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="tkbox.box.cgroups"):
        group = BoxCgroup.create("unit-none", BoxLimits(memory_bytes=1 << 20), root=tmp_path)
    assert group.groups == {} and group.missing == ["cpu", "freezer", "memory", "pids"]
    assert "memory limit requested but not enforced" in caplog.text
    assert "pause uses SIGSTOP/SIGCONT" in caplog.text
    assert group.pids() == set() and group.remove() is True


async def test_the_fake_backend_runs_unisolated_and_only_when_confirmed(spec_dirs):
    with pytest.raises(BoxError, match="tests only"):
        await FakeBackend().start(spec_dirs, [sys.executable, "-c", "pass"])
    backend = FakeBackend(i_understand_this_is_not_isolated=True)
    assert backend.isolated is False
    code = "import os,sys; print(os.environ['TKBOX_FAKE_CHANNEL_AGENT']); sys.exit(3)"
    box = await backend.start(spec_dirs, [sys.executable, "-c", code])
    assert await box.wait() == 3
    assert spec_dirs.log_path.read_text().strip() == str(spec_dirs.channels["agent"])


async def test_the_fake_backend_pauses_and_kills_its_process_group(spec_dirs):
    backend = FakeBackend(i_understand_this_is_not_isolated=True)
    # the box's own long-lived process, not a wait of the test
    box = await backend.start(spec_dirs, [sys.executable, "-c",
                                          "import time; print('up', flush=True); time.sleep(600)"])  # noqa: sleep-ok
    await box.pause()
    assert Path(f"/proc/{box.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    await box.resume()
    box.kill()
    assert await asyncio.wait_for(box.wait(), 30) == 128 + signal.SIGKILL


def test_probe_is_cached_and_never_offers_the_fake(monkeypatch):
    results = probe.probe_backends(refresh=True)
    assert set(results) == {"bwrap", "ns", "cgroups"}
    calls = []
    monkeypatch.setattr(probe, "probe_bwrap", lambda: calls.append(1))
    assert probe.probe_backends() == results and calls == []
    if results["bwrap"].usable:
        assert isinstance(probe.default_backend(), BwrapBackend)
