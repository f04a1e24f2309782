"""Which box backends work on this host, found by trying them once (cached for the process).

* ``bwrap``: the binary exists and starts a minimal sandbox as an unprivileged uid (so user namespaces are
  allowed for non-root users, which the bwrap backend needs).
* ``ns``: we are root, overlayfs is available, and a forked child can unshare the mount, pid, net, ipc, uts
  and cgroup namespaces and then, as an unprivileged uid, a user namespace.
* ``cgroups``: the host's cgroup kind (v1, v2, hybrid, none), the limits boxes get and how pause works
  (``cgroups.CgroupSummary``; limits and the freezer degrade without controllers).

``FakeBackend`` is never offered here: it has no isolation.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

from tkbox_daemon.box import cgroups
from tkbox_daemon.box.backend import BoxBackend, BoxError
from tkbox_daemon.box.bwrap import BwrapBackend
from tkbox_daemon.box.nslauncher import NsBackend
from tkbox_daemon.box.syscalls import (
    CLONE_NEWCGROUP,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    unshare,
)

PROBE_UID = 65534  # nobody: the probe only needs some unprivileged uid
PROBE_TIMEOUT_S = 20
_cache: dict[str, BackendProbe] = {}


@dataclass(frozen=True)
class BackendProbe:
    name: str
    usable: bool
    reason: str
    detail: dict[str, object] = field(default_factory=dict)


def probe_bwrap() -> BackendProbe:
    path = shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
    if path is None:
        return BackendProbe("bwrap", False, "bwrap is not installed: run scripts/setup.sh (package bubblewrap)")
    argv = [path, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "/usr/bin/true"]
    as_other = os.geteuid() == 0
    try:
        result = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False,
                                user=PROBE_UID if as_other else None, group=PROBE_UID if as_other else None,
                                extra_groups=[] if as_other else None, cwd="/")
    except (OSError, subprocess.SubprocessError) as error:
        return BackendProbe("bwrap", False, f"bwrap did not run: {error}", {"path": path})
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip()[:300]
        return BackendProbe("bwrap", False, f"bwrap cannot create a sandbox here: {message}", {"path": path})
    return BackendProbe("bwrap", True, "ok", {"path": path})


def probe_namespaces() -> BackendProbe:
    if os.geteuid() != 0:
        return BackendProbe("ns", False, "the ns backend needs root")
    try:
        with open("/proc/filesystems") as handle:
            if "overlay" not in handle.read().split():
                return BackendProbe("ns", False, "overlayfs is not available")
    except OSError as error:
        return BackendProbe("ns", False, f"cannot read /proc/filesystems: {error}")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 1
        try:
            unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)
            code = 2
            os.setresgid(PROBE_UID, PROBE_UID, PROBE_UID)
            os.setresuid(PROBE_UID, PROBE_UID, PROBE_UID)
            unshare(CLONE_NEWUSER)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 1:
        return BackendProbe("ns", False, "unshare of mount/pid/net/ipc/uts/cgroup namespaces failed")
    if code == 2:
        return BackendProbe("ns", False, "an unprivileged uid cannot create a user namespace")
    if code != 0:
        return BackendProbe("ns", False, f"namespace probe ended with {code}")
    return BackendProbe("ns", True, "ok")


def probe_cgroups() -> BackendProbe:
    summary = cgroups.host().summary()
    usable = bool(summary.enforced) or summary.pause == "freezer"
    reason = (f"cgroup {summary.version} ({summary.kind} host): limits {', '.join(summary.enforced) or 'none'}, "
              f"pause by {summary.pause}")
    detail = {"kind": summary.kind, "version": summary.version, "enforced": list(summary.enforced),
              "pause": summary.pause, "kill": summary.kill,
              "controllers": summary.detail.get("controllers", list(summary.enforced))}
    return BackendProbe("cgroups", usable, reason if usable else f"no usable cgroups: {reason}", detail)


def probe_backends(*, refresh: bool = False) -> dict[str, BackendProbe]:
    """Probe results by backend name, plus ``cgroups`` (detail: the host's ``CgroupSummary``)."""
    if refresh or not _cache:
        _cache.clear()
        _cache.update({"bwrap": probe_bwrap(), "ns": probe_namespaces(), "cgroups": probe_cgroups()})
    return dict(_cache)


def default_backend() -> BoxBackend:
    """bwrap when it works here, else the ns launcher; raises ``BoxError`` naming why neither works."""
    probes = probe_backends()
    if probes["bwrap"].usable:
        return BwrapBackend(probes["bwrap"].detail["path"])  # type: ignore[arg-type]
    if probes["ns"].usable:
        return NsBackend()
    raise BoxError(f"no box backend works here: bwrap: {probes['bwrap'].reason}; ns: {probes['ns'].reason}")
