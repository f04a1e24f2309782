"""The bubblewrap backend (default): bwrap 0.8 run as the box's unprivileged host uid, seccomp, minimal root.

The launcher L the daemon forks (root) enters a private mount namespace and mounts the workspace overlay there
(bwrap 0.8 has no overlay options; the mount vanishes with that namespace and never appears in the host's).
bwrap finds each bind source by path (``/proc/self/fd/N`` read as a link), as the guest's uid, yet the layers
live below a directory only root may enter: L stages them in a small tmpfs of its own namespace (``_stage``),
so the guest's uid passes only the launcher's mount point, and no other user reaches a layer at all.
It takes the box's user namespace (``userns.py``: in-box root is host uid U, the guest's; in-box 1000 is host
uid J, the jobs'; made by the daemon while the layers were built, else by L), then forks a child that drops to U
with no groups and no capabilities and execs bwrap. bwrap
(not setuid) enters that namespace (``--userns``; U owns it), keeps only the guest's capabilities there, and
creates new pid, net, ipc, uts and cgroup namespaces, and builds the minimal root from the plan in ``layout.py`` using the fds L opened (``--bind-fd``),
so no host path is looked up again. ``--as-pid-1`` makes our argv PID 1; ``--json-status-fd`` tells L its host
pid. L stays as the box's guard (``launch.OrphanGuard``): bwrap's child arms its death signal only just before
its exec, so without L a daemon dying during bwrap's setup could leave a running, orphaned box.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from pathlib import Path, PurePosixPath

from tkbox_daemon.box import late_mounts, launch, seccomp
from tkbox_daemon.box.backend import (
    AGENT_CAPABILITIES,
    BOX_AGENT_UID,
    BOX_OOM_SCORE_ADJ,
    BoxBackend,
    BoxError,
    BoxLimits,
    BoxProcess,
    BoxSpec,
    BoxStartError,
)
from tkbox_daemon.box.handle import SupervisedBox
from tkbox_daemon.box.late_mounts import STAGED_NAMES
from tkbox_daemon.box.layout import (
    OVERLAY_OPTION_MAP,
    Bind,
    BoxSources,
    Special,
    Step,
    Symlink,
    Tmpfs,
    fd_path,
    open_workspace_layers,
)
from tkbox_daemon.box.syscalls import (
    CLONE_NEWNS,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    MS_SHARED,
    bind,
    close_fds_except,
    mount,
    set_child_subreaper,
    set_parent_death_signal,
    unshare,
    write_proc_file,
)
from tkbox_daemon.box.userns import create_user_namespace

STAGING_TMPFS = "mode=0711,size=16k,nr_inodes=16"  # the staging dir: three mount points, nothing else
BWRAP_FIXED_OPTIONS = (
    "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
    "--die-with-parent", "--new-session", "--as-pid-1",
    "--cap-drop", "ALL", *(option for cap in AGENT_CAPABILITIES for option in ("--cap-add", cap)),
)


def render_plan(plan: list[Step], *, workspace_fd: int) -> list[str]:
    """The layout plan as bwrap options.

    Directories bwrap would make on its own as parents of a mount point come out 0700 and owned by the guest,
    which would keep the job user out of ``/home`` and ``/run/tkbox``; each such parent is made first, 0755.
    """
    args: list[str] = []
    made: set[str] = {"/"}
    for step in plan:
        parents = [str(parent) for parent in reversed(PurePosixPath(step.dest).parents)]
        for parent in parents:
            if parent not in made:
                args += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        made.add(step.dest)
        if isinstance(step, Bind):
            args += ["--ro-bind-fd" if step.readonly else "--bind-fd", str(step.fd), step.dest]
        elif isinstance(step, Tmpfs):  # bwrap's tmpfs belongs to the guest (in-box 0); the guest hands "job" ones over
            args += ["--perms", f"{step.mode:04o}", "--tmpfs", step.dest]
        elif isinstance(step, Symlink):
            args += ["--symlink", step.target, step.dest]
        elif isinstance(step, Special) and step.kind == "workspace":
            args += ["--bind-fd", str(workspace_fd), step.dest]
        elif isinstance(step, Special):
            args += [f"--{step.kind}", step.dest]
        else:  # pragma: no cover - the plan only holds the types above
            raise TypeError(step)
    return args


def bwrap_argv(bwrap: str, spec: BoxSpec, plan: list[Step], *, workspace_fd: int, seccomp_fd: int,
               status_fd: int, userns_fd: int, argv: list[str]) -> list[str]:
    """The complete bwrap command line for one box."""
    return [
        bwrap, *BWRAP_FIXED_OPTIONS, "--userns", str(userns_fd),
        "--uid", str(BOX_AGENT_UID), "--gid", str(BOX_AGENT_UID), "--hostname", spec.hostname,
        "--json-status-fd", str(status_fd),
        *render_plan(plan, workspace_fd=workspace_fd),
        "--remount-ro", "/",
        "--seccomp", str(seccomp_fd),
        "--chdir", spec.cwd,
        "--", *argv,
    ]


def parse_child_pid(buffer: bytes) -> int | None:
    """The box's host pid from bwrap's first JSON status document, once it is complete."""
    end = buffer.find(b"}")
    if end < 0:
        return None
    document = json.loads(buffer[:end + 1])
    pid = document.get("child-pid")
    if not isinstance(pid, int) or pid <= 1:
        raise BoxStartError(f"bwrap reported no child pid: {document!r}")
    return pid


class BwrapBackend(BoxBackend):
    """Boxes through bubblewrap (see the module docstring)."""

    name = "bwrap"
    isolated = True
    applies_limits = True
    takes_user_namespace = True
    starts_ahead = True

    def __init__(self, bwrap_path: str | None = None) -> None:
        self.bwrap_path = bwrap_path

    def _bwrap(self) -> str:
        path = self.bwrap_path or shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
        if not path:
            raise BoxError("bwrap is not installed: run scripts/setup.sh (Debian package bubblewrap)")
        return path

    async def start(self, spec: BoxSpec, argv: list[str]) -> SupervisedBox:
        bwrap = self._bwrap()
        return await launch.launch_box(
            spec, argv, backend=self.name,
            make_child=lambda ctx: _launcher(ctx, bwrap), wait_for_exec=False,
        )

    def apply_limits(self, process: BoxProcess, limits: BoxLimits) -> None:
        if not isinstance(process, SupervisedBox):
            raise BoxError("not a box this backend started")
        if process.cgroup is not None:  # else the box has no limits at all, as a box started cold would not
            process.cgroup.apply(limits)

    async def attach_workspace(self, process: BoxProcess, spec: BoxSpec, lower: Path) -> None:
        if not spec.workspace_later or not isinstance(process, SupervisedBox):
            raise BoxStartError("only a box started ahead of its workspace gets one attached")
        try:
            launcher = process.launcher_pidfd()
        except ProcessLookupError as error:
            raise BoxStartError(f"the box ended before its workspace was attached: {error}") from None
        try:
            await asyncio.to_thread(_attach, launcher, spec, lower)
        finally:
            os.close(launcher)


def _launcher(ctx: launch.LaunchContext, bwrap: str) -> None:
    """L, forked from the daemon (root): overlay in a private mount namespace, fork bwrap as uid U, supervise.

    L stays alive for the box's life. bwrap's sandboxed child arms its own death signal only just before its
    exec, so a bwrap that died during setup would leave an orphan: L is a child subreaper (such an orphan
    becomes L's child) and kills the box's PID 1 through a pidfd when bwrap ends or when the daemon dies
    (its death signal is SIGTERM, handled, not SIGKILL).
    """
    launch.child_prologue(daemon_pid=ctx.daemon_pid, log_fd=ctx.log_fd)
    if ctx.spec.nice:
        os.nice(ctx.spec.nice)  # bwrap and the box inherit it; the daemon restores the box's PID 1 when it is taken
    userns_fd = ctx.spec.userns_fd  # made by the daemon while the layers were built (the cgroup join starts sooner)
    if userns_fd is None:
        userns_fd = create_user_namespace(ctx.spec)  # before any thread: it forks
    joining = launch.BackgroundJoin(ctx.cgroup_procs, os.getpid())  # bwrap and the box inherit our cgroups
    launch.lower_own_oom_score()
    set_child_subreaper()
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    sources = ctx.sources.reopened_here()
    launch.drop_other_disks(ctx.spec)
    workspace_fd = _stage(sources, ctx.mountpoint, workspace_later=ctx.spec.workspace_later)
    seccomp_fd = os.memfd_create("tkbox-seccomp", 0)
    os.write(seccomp_fd, seccomp.filter_bytes())
    os.lseek(seccomp_fd, 0, os.SEEK_SET)
    json_r, json_w = os.pipe2(os.O_CLOEXEC)
    joining.wait()
    guard = launch.OrphanGuard(ctx)
    bwrap_pid = os.fork()
    if bwrap_pid == 0:
        try:
            os.close(json_r)
            _exec_bwrap(ctx, bwrap, sources, workspace_fd, seccomp_fd, userns_fd, json_w)
        except BaseException as error:  # noqa: B902 - must end in _exit
            launch.report_error(ctx.status_fd, f"{type(error).__name__}: {error}")
        finally:
            os._exit(127)
    guard.child_pid = bwrap_pid
    close_fds_except({ctx.status_fd, json_r})  # json_r stays open: bwrap writes its exit code there last
    buffer = b""
    while (init_pid := parse_child_pid(buffer)) is None:
        chunk = os.read(json_r, 4096)
        if not chunk:
            guard.finish(bwrap_pid)  # bwrap ended before its child existed: box.log and the exit code say why
        buffer += chunk
    guard.watch(bwrap_pid, init_pid, in_box_cgroups=True)
    os.write(ctx.status_fd, f"P{init_pid} {bwrap_pid}\n".encode())
    os.close(ctx.status_fd)
    guard.finish(bwrap_pid)


def _stage(sources: BoxSources, staging: str, *, workspace_later: bool) -> int:
    """Make the layers bwrap binds reachable by path for the guest's uid, in L's mount namespace only.

    A tmpfs (0711) on ``staging`` gets the workspace overlay (``workspace``) and read-only binds of the base copy
    and of the upper dir (``base``, ``upper``); ``sources`` then names those binds, and the overlay's fd is
    returned. On the host the layers stay below their root-only directory. Every mount here is nosuid and nodev.
    For a box started ahead (``workspace_later``), ``workspace`` and ``base`` are empty shared mounts instead:
    bwrap's binds of them become their slaves, so what ``late_mounts.py`` mounts on them later appears in the box.
    """
    mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, STAGING_TMPFS)
    for name in ("workspace", "base", "upper"):
        os.mkdir(f"{staging}/{name}", 0o755)
    if workspace_later:
        for name in STAGED_NAMES:
            bind(f"{staging}/{name}", f"{staging}/{name}", readonly=name == "base")
            mount(None, f"{staging}/{name}", None, MS_SHARED)
        sources.stage_new("base", f"{staging}/base")
    else:  # the overlay first: its data names the layers' own fds, which restage() then closes
        mount("overlay", f"{staging}/workspace", "overlay", MS_NOSUID | MS_NODEV, sources.overlay_data())
        bind(fd_path(sources.fd("base")), f"{staging}/base", readonly=True)
        sources.restage("base", f"{staging}/base")
    bind(fd_path(sources.fd("upper")), f"{staging}/upper", readonly=True)
    sources.restage("upper", f"{staging}/upper")
    return os.open(f"{staging}/workspace", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)


def _attach(launcher_pidfd: int, spec: BoxSpec, lower: Path) -> None:
    """The layers opened and checked as ``BoxSources`` checks them (``layout.open_workspace_layers``), then mounted
    in the launcher's namespace (``late_mounts.py``)."""
    opened = open_workspace_layers({"base": lower, "upper": spec.upper_dir, "work": spec.work_dir}, spec.job_uid)
    try:
        late_mounts.attach_workspace(launcher_pidfd, Path(spec.state_dir) / "mnt", lower_fd=opened["base"],
                                     upper_fd=opened["upper"], work_fd=opened["work"],
                                     overlay_options=OVERLAY_OPTION_MAP)
    except late_mounts.AttachError as error:
        raise BoxStartError(f"the workspace could not be attached: {error}") from None
    finally:
        for fd in opened.values():
            os.close(fd)


def _exec_bwrap(ctx: launch.LaunchContext, bwrap: str, sources: BoxSources, workspace_fd: int,
                seccomp_fd: int, userns_fd: int, status_fd: int) -> None:
    """The child that becomes bwrap: box OOM score, uid U with no groups, death signal, only bwrap's fds."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the guard's handler is L's, not ours
    spec = ctx.spec
    plan = sources.plan()
    # Only fds bwrap consumes (and closes) may pass: any other host-directory fd would reach the box, and
    # openat() relative to it would walk the host's filesystem.
    passed = [*(step.fd for step in plan if isinstance(step, Bind)), workspace_fd, seccomp_fd, userns_fd,
              status_fd]
    for fd in passed:
        os.set_inheritable(fd, True)
    args = bwrap_argv(bwrap, spec, plan, workspace_fd=workspace_fd, seccomp_fd=seccomp_fd, status_fd=status_fd,
                      userns_fd=userns_fd, argv=ctx.argv)
    write_proc_file("/proc/self/oom_score_adj", str(BOX_OOM_SCORE_ADJ))  # bwrap and the box inherit it
    launcher = os.getppid()
    uid = spec.box_uid
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    set_parent_death_signal(signal.SIGKILL)  # armed after the uid change, which would clear it
    if os.getppid() != launcher:
        os._exit(1)
    close_fds_except(set(passed))
    os.execve(bwrap, args, spec.env)
