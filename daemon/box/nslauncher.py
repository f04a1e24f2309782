"""The pure-Python backend (fallback when bwrap is missing): the same box as ``bwrap.py``, built with ctypes
``unshare(2)``, ``mount(2)`` and ``pivot_root(2)`` in processes forked from the daemon.

Two processes, both forked (no helper program):

* the supervisor S (the daemon's child, root, host pid namespace): becomes a child subreaper, unshares pid,
  net, ipc and uts namespaces, forks PID 1 and moves it into the box's cgroups while PID 1 builds its root
  (the cgroup v1 move waits for an RCU grace period: this way it costs no start time); then it guards and
  reaps (``launch.OrphanGuard``) and exits with PID 1's status (128 + N for signal N). When the daemon dies it
  kills the box first (its parent-death signal is SIGTERM, handled).
* PID 1 (root until its exec): its parent-death signal armed and S checked alive through a lifeline pipe (no
  race: S's death closes the pipe), its own mount namespace, a tmpfs root filled from the plan in
  ``layout.py`` (proc mounted before the pivot), hostname, ``lo`` up, ``pivot_root``, root remounted
  read-only, every host fd closed, S's word that it is in the box's cgroups, a cgroup namespace rooted
  there, host uid U (the guest's) with no groups, a new user namespace whose two-entry map S writes (in-box
  root to U, in-box 1000 to J, the jobs' host uid: ``userns.py``; as under bwrap), its bounding set cut to the
  guest's capabilities, the death signal re-armed (the uid change cleared it) and the lifeline checked again,
  no_new_privs, the seccomp filter, and the exec (as in-box root, so the guest holds exactly those
  capabilities of its namespace; ``guest/capabilities.py`` then empties the bounding set).

Mounting happens as real root, so the namespaces belong to the host's user namespace: the box, once it is uid
U without capabilities, has no power over any of them. Errors before the exec go to the daemon through the
status pipe and the box fails to start.
"""

from __future__ import annotations

import os
import select
import signal
import stat

from tkbox_daemon.box import launch, seccomp
from tkbox_daemon.box.backend import (
    AGENT_CAPABILITIES,
    BOX_OOM_SCORE_ADJ,
    CAPABILITY_NUMBERS,
    BoxBackend,
    BoxSpec,
)
from tkbox_daemon.box.handle import SupervisedBox
from tkbox_daemon.box.layout import Bind, BoxSources, Special, Step, Symlink, Tmpfs, fd_path
from tkbox_daemon.box.syscalls import (
    CLONE_NEWCGROUP,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    bind,
    bring_loopback_up,
    close_fds_except,
    drop_bounding_set,
    load_seccomp_filter,
    mount,
    pivot_root,
    set_child_subreaper,
    set_dumpable,
    set_no_new_privs,
    set_parent_death_signal,
    sethostname,
    umount2,
    unshare,
    write_proc_file,
)
from tkbox_daemon.box.userns import write_id_maps

SUPERVISOR_NAMESPACES = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS  # PID 1 adds cgroup
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}


class NsBackend(BoxBackend):
    """Boxes from plain namespaces via ctypes (see the module docstring). Needs root."""

    name = "ns"
    isolated = True
    applies_limits = True

    async def start(self, spec: BoxSpec, argv: list[str]) -> SupervisedBox:
        return await launch.launch_box(spec, argv, backend=self.name, make_child=_supervisor,
                                       wait_for_exec=True)


def _supervisor(ctx: launch.LaunchContext) -> None:
    """S: namespaces for the box, fork PID 1, report its pid, reap until it ends."""
    launch.child_prologue(daemon_pid=ctx.daemon_pid, log_fd=ctx.log_fd)
    launch.lower_own_oom_score()
    set_child_subreaper()
    unshare(SUPERVISOR_NAMESPACES)
    # lifeline: PID 1 checks S is alive after arming its death signal; go: S has moved PID 1 into its cgroups
    # userns: PID 1 says it has made its user namespace; S writes the maps and says so on go
    lifeline_r, lifeline_w = os.pipe2(os.O_CLOEXEC)
    go_r, go_w = os.pipe2(os.O_CLOEXEC)
    userns_r, userns_w = os.pipe2(os.O_CLOEXEC)
    guard = launch.OrphanGuard(ctx)
    pid = os.fork()
    if pid == 0:
        os.close(lifeline_w)
        os.close(go_w)
        os.close(userns_r)
        try:
            _pid1(ctx, lifeline_r, go_r, userns_w)
        except BaseException as error:  # noqa: B902 - must end in _exit
            launch.report_error(ctx.status_fd, f"{type(error).__name__}: {error}")
        finally:
            os._exit(127)
    os.close(go_r)
    os.close(userns_w)
    launch.join_cgroups(ctx.cgroup_procs, pid)  # while PID 1 builds its root: the grace period overlaps
    os.write(go_w, b"1")
    if os.read(userns_r, 1) == b"1":  # else PID 1 failed before (its error is on the status pipe)
        write_id_maps(pid, ctx.spec)
        os.write(go_w, b"2")
    os.close(userns_r)
    guard.watch(pid, pid, in_box_cgroups=False)
    os.write(ctx.status_fd, f"P{pid}\n".encode())
    close_fds_except({lifeline_w, *guard.fds()})
    guard.finish(pid)


def _exit_if_orphaned(lifeline_r: int) -> None:
    poller = select.poll()
    poller.register(lifeline_r, select.POLLIN)
    if poller.poll(0):
        os._exit(1)  # the supervisor is gone (its end of the pipe closed)


def _pid1(ctx: launch.LaunchContext, lifeline_r: int, go_r: int, userns_w: int) -> None:
    """PID 1 of the box: build the root, become uid U, lock down, exec."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the guard's handler is S's, not ours
    spec = ctx.spec
    set_parent_death_signal(signal.SIGKILL)
    _exit_if_orphaned(lifeline_r)
    write_proc_file("/proc/self/oom_score_adj", str(BOX_OOM_SCORE_ADJ))
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    sources = ctx.sources.reopened_here()
    root = ctx.mountpoint
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for step in sources.plan():
        _perform(root, step, sources, spec)
    sethostname(spec.hostname)
    bring_loopback_up()
    os.chdir(root)
    pivot_root(".", ".")
    umount2(".", MNT_DETACH)
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    close_fds_except({ctx.status_fd, lifeline_r, go_r, userns_w})  # the host-path fds end here
    if os.read(go_r, 1) != b"1":  # in the box's cgroups before anything of the job runs
        os._exit(1)
    unshare(CLONE_NEWCGROUP)  # rooted at the box's own group
    uid = spec.box_uid
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    set_dumpable()
    unshare(CLONE_NEWUSER)  # owned by U; S (root outside) writes the two-entry map
    os.write(userns_w, b"1")
    os.close(userns_w)
    if os.read(go_r, 1) != b"2":
        os._exit(1)
    os.close(go_r)
    # a new user namespace starts with a full bounding set: cut it down to the guest's capabilities
    drop_bounding_set(ctx.last_cap, frozenset(CAPABILITY_NUMBERS[name] for name in AGENT_CAPABILITIES))
    set_parent_death_signal(signal.SIGKILL)  # the uid change cleared it
    _exit_if_orphaned(lifeline_r)
    os.close(lifeline_r)
    os.chdir(spec.cwd)
    set_no_new_privs()
    load_seccomp_filter(seccomp.filter_bytes())
    os.execve(ctx.argv[0], ctx.argv, spec.env)


def _perform(root: str, step: Step, sources: BoxSources, spec: BoxSpec) -> None:
    """Make one mount of the plan under ``root`` (still the host's view: ``root`` is our tmpfs)."""
    target = root + step.dest
    if isinstance(step, Symlink):
        os.symlink(step.target, target)
    elif isinstance(step, Bind):
        if stat.S_ISDIR(os.fstat(step.fd).st_mode):
            os.makedirs(target, 0o755, exist_ok=True)
        else:
            _make_file(target)
        bind(fd_path(step.fd), target, readonly=step.readonly)
    elif isinstance(step, Tmpfs):
        os.makedirs(target, 0o755, exist_ok=True)
        uid = spec.job_uid if step.owner == "job" else spec.box_uid
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={step.mode:o},uid={uid},gid={uid}")
    elif isinstance(step, Special) and step.kind == "proc":
        os.makedirs(target, 0o755, exist_ok=True)
        mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    elif isinstance(step, Special) and step.kind == "dev":
        _make_dev(target, spec.box_uid)
    elif isinstance(step, Special) and step.kind == "workspace":
        os.makedirs(target, 0o755, exist_ok=True)
        mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, sources.overlay_data())
    else:  # pragma: no cover - the plan only holds the types above
        raise TypeError(step)


def _make_file(path: str) -> None:
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))


def _make_dev(target: str, uid: int) -> None:
    """A minimal /dev like bwrap's: a few host device nodes bound in, a private devpts, shm."""
    os.makedirs(target, 0o755, exist_ok=True)
    # nodev too: the nodes are binds of the host's, each its own mount; nothing on this tmpfs is a device
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEV_NODES:
        _make_file(f"{target}/{name}")
        bind(f"/dev/{name}", f"{target}/{name}", readonly=False, flags=MS_NOSUID | MS_NOEXEC)
    os.mkdir(f"{target}/pts", 0o755)
    mount("devpts", f"{target}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    os.mkdir(f"{target}/shm", 0o755)
    mount("tmpfs", f"{target}/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,uid={uid},gid={uid}")
    for name, link in DEV_LINKS.items():
        os.symlink(link, f"{target}/{name}")
