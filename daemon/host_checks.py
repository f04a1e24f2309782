"""``tkbox doctor``: what this host gives a box, each capability checked where the host states it, with the fix for
what is missing (wire schema: ``wire_host.py``).

The checks read the kernel's own files (``/proc/filesystems``, ``/proc/sys/...``, ``/proc/self/status``) and reuse
the backends' probes (``box/probe.py``: a real sandbox is started once), so the report says what a box would get
here, not what the host is assumed to have. Every file read is bounded; a file that cannot be read is reported as
such, never guessed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .box import cgroups, disk, probe
from .wire_host import HostCheck, HostReport

PROC = Path("/proc")
READ_LIMIT = 64 * 1024
VERSION_TIMEOUT_S = 10
SECCOMP_ACTIONS_NEEDED = ("kill_process", "errno")


def _read(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(READ_LIMIT).decode("ascii", "replace")
    except OSError:
        return None


def bwrap_version(path: str) -> str:
    """``bubblewrap 0.8.0`` → ``0.8.0``; "" when it does not say."""
    try:
        result = subprocess.run([path, "--version"], capture_output=True, timeout=VERSION_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    match = re.fullmatch(rb"bubblewrap (\d+(?:\.\d+){1,3})\s*", result.stdout[:200])
    return match.group(1).decode() if match else ""


def check_bwrap(probes: dict[str, probe.BackendProbe]) -> HostCheck:
    result = probes["bwrap"]
    path = str(result.detail.get("path") or shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin") or "")
    version = bwrap_version(path) if path else ""
    detail = {"path": path, "version": version}
    if result.usable:
        return HostCheck("backend bwrap", "ok", f"bubblewrap {version or '(version unknown)'} at {path}",
                         detail=detail)
    fix = ("install it: apt-get install bubblewrap (scripts/setup.sh does)" if not path else
           "allow unprivileged user namespaces (see the user namespaces check), or use the ns backend as root")
    return HostCheck("backend bwrap", "missing", result.reason, fix, detail)


def check_ns(probes: dict[str, probe.BackendProbe]) -> HostCheck:
    result = probes["ns"]
    if result.usable:
        return HostCheck("backend ns", "ok", "the built-in launcher starts boxes here (root, overlayfs, namespaces)")
    return HostCheck("backend ns", "missing", result.reason,
                     "run the daemon as root on a kernel with overlayfs and user namespaces")


def check_user_namespaces(proc: Path = PROC) -> HostCheck:
    limit = _read(proc / "sys/user/max_user_namespaces")
    debian_switch = _read(proc / "sys/kernel/unprivileged_userns_clone")
    apparmor = _read(proc / "sys/kernel/apparmor_restrict_unprivileged_userns")
    detail = {"max_user_namespaces": (limit or "").strip(), "unprivileged_userns_clone": (debian_switch or "").strip(),
              "apparmor_restrict_unprivileged_userns": (apparmor or "").strip()}
    if limit is None:
        return HostCheck("user namespaces", "missing", "the kernel has no user namespaces "
                         "(/proc/sys/user/max_user_namespaces is absent)", "use a kernel built with CONFIG_USER_NS",
                         detail)
    if limit.strip() == "0":
        return HostCheck("user namespaces", "missing", "user.max_user_namespaces is 0",
                         "sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it)", detail)
    if debian_switch is not None and debian_switch.strip() == "0":
        return HostCheck("user namespaces", "missing", "kernel.unprivileged_userns_clone is 0: only root may create "
                         "user namespaces (bwrap cannot run as a box's uid)",
                         "sysctl -w kernel.unprivileged_userns_clone=1", detail)
    if apparmor is not None and apparmor.strip() == "1":
        return HostCheck("user namespaces", "degraded", "AppArmor restricts unprivileged user namespaces",
                         "give bwrap an AppArmor profile that allows userns, or sysctl -w "
                         "kernel.apparmor_restrict_unprivileged_userns=0", detail)
    return HostCheck("user namespaces", "ok", f"up to {limit.strip()} per user", detail=detail)


def check_seccomp(proc: Path = PROC) -> HostCheck:
    status = _read(proc / "self/status") or ""
    actions = (_read(proc / "sys/kernel/seccomp/actions_avail") or "").split()
    detail = {"actions_avail": actions}
    if not re.search(r"^Seccomp:\s", status, re.MULTILINE):
        return HostCheck("seccomp", "missing", "the kernel has no seccomp (no Seccomp line in /proc/self/status)",
                         "use a kernel built with CONFIG_SECCOMP_FILTER: boxes would run without their syscall filter",
                         detail)
    lacking = [action for action in SECCOMP_ACTIONS_NEEDED if action not in actions]
    if lacking:
        return HostCheck("seccomp", "missing", f"seccomp lacks the actions {', '.join(lacking)}",
                         "use a kernel whose seccomp offers kill_process and errno", detail)
    return HostCheck("seccomp", "ok", "filters with kill_process and errno", detail=detail)


def check_overlayfs(proc: Path = PROC) -> HostCheck:
    filesystems = _read(proc / "filesystems")
    if filesystems is None:
        return HostCheck("overlayfs", "missing", "cannot read /proc/filesystems", "check /proc is mounted")
    if "overlay" in filesystems.split():
        return HostCheck("overlayfs", "ok", "overlay is available (the ns backend's workspace layers)")
    return HostCheck("overlayfs", "missing", "overlay is not in /proc/filesystems",
                     "modprobe overlay (the ns backend needs it; bwrap builds its own layers)")


def check_cgroups(root: Path | None = None) -> HostCheck:
    """The cgroup hierarchy boxes use here and which limits it enforces (``box/cgroups.py``'s own reading)."""
    summary = cgroups.host(root).summary()
    detail = {"kind": summary.kind, "version": summary.version, "enforced": list(summary.enforced),
              "not_enforced": list(summary.not_enforced), "pause": summary.pause, "kill": summary.kill}
    how = f"pause by {summary.pause}, kill by {summary.kill}"
    if summary.version == "none":
        return HostCheck("cgroups", "degraded", f"no usable cgroups ({summary.kind} host): no memory, pids or cpu "
                         f"limit; {how}", "run the daemon as root, with a writable cgroup hierarchy (on cgroup v2: "
                         "a delegated subtree, e.g. systemd-run --scope -p Delegate=yes tkbox daemon)", detail)
    found = (f"cgroup {summary.version} ({summary.kind} host): "
             f"{', '.join(summary.enforced) or 'no limit'} enforced; {how}")
    if summary.not_enforced or summary.pause != "freezer":
        missing = ", ".join(summary.not_enforced) or "the freezer"
        fix = ("enable the missing controllers for the daemon's subtree (cgroup.subtree_control), or give it a "
               "delegated one" if summary.version == "v2" else "mount the missing controllers")
        return HostCheck("cgroups", "degraded", f"{found}; not enforced: {missing}", fix, detail)
    return HostCheck("cgroups", "ok", found, detail=detail)


def check_disk_quota() -> HostCheck:
    """Whether each box gets its own size-limited disk here (``box/disk.py``'s own probe)."""
    support = disk.probe()
    detail = {"method": support.method}
    if support.enforced:
        return HostCheck("disk quota", "ok", f"{support.method}: {support.found}", detail=detail)
    return HostCheck("disk quota", "degraded", f"box_disk is not enforced: {support.found}", support.fix, detail)


def host_report(*, refresh: bool = False) -> HostReport:
    """Every check, in the order ``tkbox doctor`` prints them (runs the backends' probes once per process)."""
    probes = probe.probe_backends(refresh=refresh)
    checks = (check_bwrap(probes), check_ns(probes), check_user_namespaces(), check_seccomp(), check_cgroups(),
              check_disk_quota(), check_overlayfs())
    backend = "bwrap" if probes["bwrap"].usable else "ns" if probes["ns"].usable else ""
    return HostReport(checks, backend, summary_line(checks, backend), f"{os_release()}, Linux {os.uname().release}")


def summary_line(checks: tuple[HostCheck, ...], backend: str) -> str:
    """One line: the backend boxes use, the limits enforced, and how many checks want attention."""
    by_name = {check.name: check for check in checks}
    if not backend:
        head = "boxes cannot run here: no backend works"
    else:
        version = by_name["backend bwrap"].detail.get("version") if backend == "bwrap" else ""
        head = f"boxes run with {backend}{' ' + version if version else ''}"
    cgroup = by_name["cgroups"].detail
    limits = ", ".join(cgroup.get("enforced", [])) or "none"
    disk = by_name["disk quota"].detail.get("method", "none")
    attention = len([check for check in checks if check.status != "ok"])
    tail = f"; {attention} to look at: tkbox doctor" if attention else "; all checks pass"
    return (f"host: {head}; cgroup {cgroup.get('version', 'none')} limits: {limits}; disk quota: {disk}{tail}")


def os_release() -> str:
    """PRETTY_NAME of /etc/os-release, for the report's heading."""
    text = _read(Path("/etc/os-release")) or ""
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?$', text, re.MULTILINE)
    return match.group(1) if match else os.uname().sysname
