"""``tkbox doctor``: the checks on this machine agree with what the host states in its own files (read here
independently), each check reads its kernel files strictly (a fake /proc for the cases this host is not), the CLI
prints every check with its fix and exits 1 only when no backend works, and the daemon serves the same report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon_harness import running_daemon
from tkbox_daemon import host_checks
from tkbox_daemon.box import cgroups, probe
from tkbox_daemon.wire_host import HostCheck, HostReport
from tkbox_tui.cli import main
from tkbox_tui.cli.doctor import report_lines


def _by_name(report: HostReport) -> dict[str, HostCheck]:
    return {check.name: check for check in report.checks}


def test_tkbox_doctor_json_on_this_machine_matches_what_the_host_states():
    ran = subprocess.run([str(Path(sys.executable).parent / "tkbox"), "doctor", "--json"], capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    checks = _by_name(HostReport.from_json(json.loads(ran.stdout)))
    version = subprocess.run(["bwrap", "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    assert checks["backend bwrap"].status == "ok" and checks["backend bwrap"].detail["version"] == version
    overlay = "overlay" in Path("/proc/filesystems").read_text().split()
    assert (checks["overlayfs"].status == "ok") == overlay
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    v1_memory = any(fields[2] == "cgroup" and "memory" in fields[3].split(",") for fields in mounts)
    v2_root = any(fields[1] == "/sys/fs/cgroup" and fields[2] == "cgroup2" for fields in mounts)
    assert checks["cgroups"].detail["version"] == ("v1" if v1_memory else "v2" if v2_root else "none")
    assert ("memory" in checks["cgroups"].detail["enforced"]) == (v1_memory or v2_root)
    has_seccomp = re.search(r"^Seccomp:", Path("/proc/self/status").read_text(), re.MULTILINE) is not None
    assert (checks["seccomp"].status == "ok") == has_seccomp
    limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    assert (checks["user namespaces"].status == "ok") == (limit > 0)
    mkfs = any(Path(directory, "mkfs.ext4").exists() for directory in ("/sbin", "/usr/sbin"))
    own_disks = os.geteuid() == 0 and mkfs and Path("/dev/loop-control").exists()
    assert (checks["disk quota"].detail["method"], checks["disk quota"].status) == (
        ("loop-ext4", "ok") if own_disks else ("none", "degraded"))


def _proc(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(("files", "status", "fix_names"), [
    ({}, "missing", "CONFIG_USER_NS"),
    ({"sys/user/max_user_namespaces": "0\n"}, "missing", "user.max_user_namespaces"),
    ({"sys/user/max_user_namespaces": "100\n", "sys/kernel/unprivileged_userns_clone": "0\n"}, "missing",
     "kernel.unprivileged_userns_clone=1"),
    ({"sys/user/max_user_namespaces": "100\n", "sys/kernel/apparmor_restrict_unprivileged_userns": "1\n"},
     "degraded", "apparmor_restrict_unprivileged_userns=0"),
    ({"sys/user/max_user_namespaces": "100\n", "sys/kernel/unprivileged_userns_clone": "1\n"}, "ok", ""),
])
def test_user_namespaces_are_read_from_the_kernels_switches(tmp_path, files, status, fix_names):
    check = host_checks.check_user_namespaces(_proc(tmp_path, files))
    assert check.status == status and fix_names in check.fix


@pytest.mark.parametrize(("files", "status"), [
    ({"self/status": "Name:\tx\n"}, "missing"),
    ({"self/status": "Seccomp:\t0\n", "sys/kernel/seccomp/actions_avail": "trap log allow\n"}, "missing"),
    ({"self/status": "Seccomp:\t0\n", "sys/kernel/seccomp/actions_avail": "kill_process errno allow\n"}, "ok"),
])
def test_seccomp_needs_the_kernel_and_the_actions_the_filter_uses(tmp_path, files, status):
    assert host_checks.check_seccomp(_proc(tmp_path, files)).status == status


def test_overlayfs_absent_or_unreadable_is_missing(tmp_path):
    assert host_checks.check_overlayfs(_proc(tmp_path, {"filesystems": "nodev\tproc\n\text4\n"})).status == "missing"
    assert host_checks.check_overlayfs(tmp_path / "nowhere").status == "missing"


def test_a_missing_bwrap_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(host_checks.shutil, "which", lambda *args, **kwargs: None)
    check = host_checks.check_bwrap({"bwrap": probe.BackendProbe("bwrap", False, "bwrap is not installed")})
    assert check.status == "missing" and "apt-get install bubblewrap" in check.fix


def _fake_report(backend: str) -> HostReport:
    checks = (HostCheck("backend bwrap", "missing" if not backend else "ok", "bwrap \x1b[31mred", "install \x07it"),
              HostCheck("cgroups", "degraded", "none", "mount them", {"version": "none", "enforced": []}),
              HostCheck("disk quota", "ok", "loop", "", {"method": "loop"}))
    return HostReport(checks, backend, host_checks.summary_line(checks, backend), "Test OS, Linux 6.0")


@pytest.mark.parametrize(("backend", "status"), [("bwrap", 0), ("", 1)])
def test_the_cli_prints_each_check_and_its_fix_escaped_and_exits_1_without_a_backend(monkeypatch, capsys, backend,
                                                                                     status):
    monkeypatch.setattr(host_checks, "host_report", lambda **kwargs: _fake_report(backend))
    assert main.main(["doctor"]) == status
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert out.splitlines()[0] == "tkbox doctor: Test OS, Linux 6.0"
    assert "fix: mount them" in out and ("boxes cannot run here" in out) == (not backend)
    assert main.main(["doctor", "--json"]) == status
    assert json.loads(capsys.readouterr().out)["boxes_can_run"] == bool(backend)


def test_report_lines_show_fixes_only_for_checks_that_are_not_ok():
    lines = report_lines(_fake_report("bwrap"))
    assert sum(line.strip().startswith("fix:") for line in lines) == 1


async def test_the_daemon_serves_the_same_checks(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        served = await client.host_report()
        again = await client.host_report(refresh=True)
    here = host_checks.host_report()
    assert [check.name for check in served.checks] == [check.name for check in here.checks]
    assert [check.status for check in again.checks] == [check.status for check in here.checks]
    assert served.summary.startswith("host: boxes run with ")


def test_a_cgroup2_mount_is_read_as_v2_with_its_freezer_and_kill_and_the_limits_it_lacks(tmp_path):
    """This host's v1 controllers are all taken, so a cgroup2 mount made here offers none of memory, pids, cpu:
    the check says v2, pause by its freezer, kill by cgroup.kill, and names the limits not enforced."""
    mount = tmp_path / "cgroup2"
    mount.mkdir()
    subprocess.run(["mount", "-t", "cgroup2", "none", str(mount)], check=True)
    try:
        check = host_checks.check_cgroups(mount)
    finally:
        cgroups.forget_host(mount)
        subprocess.run(["umount", str(mount)], check=True)
    assert (check.detail["kind"], check.detail["version"]) == ("v2", "v2")
    assert (check.detail["pause"], check.detail["kill"]) == ("freezer", "cgroup.kill")
    assert check.detail["enforced"] == []  # memory, pids and cpu are bound to this host's v1 hierarchies
    assert check.status == "degraded" and "not enforced: memory, pids, cpu" in check.found
