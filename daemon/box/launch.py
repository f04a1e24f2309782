"""Starting a box: the launcher the daemon forks, its first steps, and the guard a bwrap launcher keeps.

Both real backends fork a launcher from the daemon (in the event-loop thread, so the parent-death signal is
tied to a thread that lives as long as the daemon). The launcher's first steps (``child_prologue``) are shared:
default signal handling, its own session, die-with-parent, stdin from /dev/null, stdout/stderr into the box's
log pipe. Every box process is born inside the box's cgroups: the bwrap launcher joins them itself before it
forks bwrap, the ns launcher moves PID 1 in before PID 1 may exec. It reports PID 1's host pid (or why it
failed) on a status pipe; ``launch_box`` turns that into a ``handle.SupervisedBox``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tkbox_daemon.box import mountinfo
from tkbox_daemon.box.backend import BoxSpec, BoxStartError, check_argv, exit_code_from_wait_status
from tkbox_daemon.box.cgroups import BoxCgroup, GuardFiles
from tkbox_daemon.box.handle import LOG_DRAIN_TIMEOUT_S, FdWaiter, LogPump, SupervisedBox, parent_pid
from tkbox_daemon.box.layout import BoxSources
from tkbox_daemon.box.syscalls import MNT_DETACH, last_capability, set_parent_death_signal, umount2

log = logging.getLogger("tkbox.box")

MAX_STATUS_BYTES = 64 * 1024


@dataclass
class LaunchContext:
    """What a launcher child needs; built by the daemon before the fork."""

    spec: BoxSpec
    argv: list[str]
    sources: BoxSources
    daemon_pid: int
    log_fd: int  # write end of the box log pipe
    status_fd: int  # write end of the status pipe (pid reports, errors)
    mountpoint: str  # an empty root-owned directory under state_dir, private to the launcher's mount ns
    cgroup_procs: list[str] = field(default_factory=list)
    guard_files: GuardFiles = field(default_factory=GuardFiles)  # what the guard writes (cgroups.GuardFiles)
    last_cap: int = 40


async def launch_box(spec: BoxSpec, argv: list[str], *, backend: str,
                     make_child: Callable[[LaunchContext], None], wait_for_exec: bool) -> SupervisedBox:
    """Fork a launcher running ``make_child`` and return the box once its PID 1 exists.

    The launcher writes ``P<pid1> [<parent of pid1>]`` to the status pipe once PID 1 exists, or ``E<why>``.
    With ``wait_for_exec`` the status pipe must then reach end of file with nothing more written, which
    happens when PID 1's exec closed its close-on-exec copy.
    """
    argv = check_argv(argv)
    mountpoint = _prepare_state_dir(Path(spec.state_dir))
    cgroup = BoxCgroup.create(spec.box_id, spec.limits) if spec.use_cgroups and os.geteuid() == 0 else None
    sources = log_pump = None
    launcher_pid = -1
    status_r = -1
    try:
        sources = BoxSources.open(spec)
        log_r, log_w = os.pipe2(os.O_CLOEXEC)
        log_pump = LogPump(log_r, spec.log_path, spec.log_limit_bytes)
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        ctx = LaunchContext(spec, argv, sources, os.getpid(), log_w, status_w, str(mountpoint),
                            cgroup.procs_files() if cgroup else [], cgroup.guard_files() if cgroup else GuardFiles(),
                            last_capability())
        try:
            launcher_pid = fork_launcher(lambda: make_child(ctx), status_w)
        finally:
            os.close(log_w)
            os.close(status_w)
            sources.close()
        os.set_blocking(status_r, False)
        status = FdWaiter(status_r)
        buffer = b""
        reported = None
        while reported is None:
            chunk = await status.read()
            buffer += chunk
            _raise_reported_error(buffer)
            if not chunk or len(buffer) > MAX_STATUS_BYTES:
                raise BoxStartError("the launcher ended before the box's PID 1 existed")
            reported = parse_reported_pid(buffer)
        if wait_for_exec:
            while chunk := await status.read():
                buffer += chunk
                _raise_reported_error(buffer)
        os.close(status_r)
        status_r = -1
        init_pid, middle_pid = reported
        return SupervisedBox(box_id=spec.box_id, backend=backend, launcher_pid=launcher_pid, init_pid=init_pid,
                             init_parent=middle_pid or launcher_pid, cgroup=cgroup, log=log_pump)
    except BaseException as error:
        await _abandon(launcher_pid, log_pump, cgroup, status_r)
        if isinstance(error, BoxStartError) and log_pump is not None:
            tail = log_pump.tail()
            raise BoxStartError(f"{error}" + (f"; box.log: {tail}" if tail else "")) from None
        raise


def _raise_reported_error(buffer: bytes) -> None:
    for line in buffer.split(b"\n"):
        if line.startswith(b"E"):
            raise BoxStartError("box launcher failed: " + line[1:].decode(errors="replace"))


def _prepare_state_dir(state_dir: Path) -> Path:
    """Check ``state_dir`` is a real directory of ours and make the launcher's empty mount point in it."""
    info = os.lstat(state_dir)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise BoxStartError(f"state_dir {state_dir} must be a directory owned by uid {os.geteuid()}, "
                            "not writable by others")
    mountpoint = state_dir / "mnt"
    try:
        os.mkdir(mountpoint, 0o700)
    except FileExistsError:
        info = os.lstat(mountpoint)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise BoxStartError(f"{mountpoint} is not our directory") from None
    return mountpoint


async def _abandon(launcher_pid: int, log_pump: LogPump | None, cgroup: BoxCgroup | None, status_r: int) -> None:
    """Undo a start that failed part-way: kill and reap the launcher, drain the log, drop the cgroups."""
    if launcher_pid > 0:  # still our unreaped child: its pid cannot have been reused
        if cgroup is not None:
            cgroup.kill_all(spare=launcher_pid)
        os.kill(launcher_pid, signal.SIGTERM)  # a launcher takes its box down on SIGTERM, or dies of it
        pidfd = os.pidfd_open(launcher_pid)
        try:
            await asyncio.wait_for(FdWaiter(pidfd).readable(), LOG_DRAIN_TIMEOUT_S)
        except TimeoutError:
            os.kill(launcher_pid, signal.SIGKILL)
        finally:
            os.close(pidfd)
        os.waitpid(launcher_pid, 0)
    if status_r >= 0:
        os.close(status_r)
    if log_pump is not None:
        await log_pump.finished()
    if cgroup is not None:
        for _ in range(100):
            if cgroup.remove():
                break
            cgroup.kill_all()
            await asyncio.sleep(0.005)
        else:
            log.warning("cgroup of box %s left behind: still busy", cgroup.box_id)


def fork_launcher(child: Callable[[], None], status_fd: int) -> int:
    """Fork; the child runs ``child`` and must exec. Any exception is written to ``status_fd`` as ``E<text>``."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, observed by the e2e tests
        try:
            child()
            report_error(status_fd, "launcher returned without exec")
        except BaseException as error:  # noqa: B902 - anything must end in _exit, never back in the daemon
            report_error(status_fd, f"{type(error).__name__}: {error}")
        finally:
            os._exit(127)
    return pid


def report_error(status_fd: int, message: str) -> None:
    """Tell the daemon why the launcher failed (one line, bounded) and echo it into the box log."""
    line = ("E" + message.replace("\n", " ")[:2000] + "\n").encode(errors="replace")
    for fd in (status_fd, 2):
        try:
            os.write(fd, line)
        except OSError:
            pass


def child_prologue(*, daemon_pid: int, log_fd: int) -> None:
    """The launcher child's first steps, shared by both backends (see the module docstring)."""
    try:
        signal.set_wakeup_fd(-1)  # the daemon's event loop owns that fd
    except ValueError:
        pass
    for signum in signal.valid_signals():
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(signum, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    os.setsid()
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != daemon_pid:
        os._exit(1)  # the daemon died before the death signal was armed
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)


def join_cgroups(cgroup_procs: list[str], pid: int) -> None:
    """Move ``pid`` into the box's cgroups. The first move into a v1 hierarchy waits for an RCU grace period
    (about 10 ms here), so launchers do it while other setup runs (a thread, or PID 1 working meanwhile)."""
    for path in cgroup_procs:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, str(pid).encode())
        finally:
            os.close(fd)


class BackgroundJoin:
    """``join_cgroups`` on a thread; ``wait()`` re-raises its error."""

    def __init__(self, cgroup_procs: list[str], pid: int) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(cgroup_procs, pid), daemon=True)
        self.thread.start()

    def _run(self, cgroup_procs: list[str], pid: int) -> None:
        try:
            join_cgroups(cgroup_procs, pid)
        except BaseException as error:  # noqa: B902 - handed to wait()
            self.error = error

    def wait(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def parse_reported_pid(buffer: bytes) -> tuple[int, int | None] | None:
    """A launcher's ``P<pid1> [<parent>]`` line, once complete: PID 1's host pid and, when PID 1 is not the
    launcher's own child (bwrap), the pid of its parent."""
    for line in buffer.split(b"\n")[:-1]:
        fields = line[1:].split()
        if line.startswith(b"P") and 1 <= len(fields) <= 2 and all(field.isdigit() for field in fields):
            return int(fields[0]), (int(fields[1]) if len(fields) == 2 else None)
    return None


def drop_other_disks(spec: BoxSpec) -> None:
    """In a launcher's private mount namespace: unmount its copies of the other boxes' disks (every mount below
    ``spec.disks_root`` but the one holding this box's upper dir and this box's own base view, ``box/idmap.py``).
    A copy held here would keep a removed box's disk, its loop device and its deleted image alive for as long as
    this box lives."""
    if spec.disks_root is None:
        return
    own = os.fsencode(spec.upper_dir)
    own_view = os.fsencode(spec.base_dir)
    try:
        mounts = mountinfo.read()
    except (OSError, mountinfo.MountinfoError) as error:  # hygiene, not a wall: say so in box.log and go on
        os.write(2, f"tkbox launcher: other boxes' disks stay in this namespace: {error}\n".encode())
        return
    for point in mountinfo.points_below(mounts, str(spec.disks_root)):
        if own.startswith(point + b"/") or point == own_view:
            continue
        try:
            umount2(point, MNT_DETACH)
        except OSError as error:
            if error.errno not in (errno.EINVAL, errno.ENOENT):  # gone with a mount above it
                raise


def lower_own_oom_score() -> None:
    """Keep the OOM killer off a launcher (a copy of the daemon) where allowed; box processes get +1000."""
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("-1000")
    except PermissionError:
        pass  # no CAP_SYS_RESOURCE (containers): the box's +1000 still makes a box process the victim


class OrphanGuard:
    """The launcher's watch over its box: takes the box down when the daemon dies or when the launcher's
    child (bwrap, or PID 1 itself) ends, then reaps everything and exits with that child's status.

    The daemon's death arrives as SIGTERM (the parent-death signal), handled here: the box's PID 1 is killed
    through a pidfd (the kernel then kills its whole pid namespace), the rest of the box's cgroups too (v2:
    ``cgroup.kill``, unless the launcher is itself still in the group), and a v1 freezer thawed (a frozen v1
    task dies only once thawed) before this launcher goes. The launcher leaves the freezer group (v1) or the
    box's group (v2) once the box exists, so a paused box still has a live guard. It is a child subreaper, so a
    PID 1 orphaned by bwrap becomes its child and is reaped here, never left to the host's init.
    """

    def __init__(self, ctx: LaunchContext) -> None:
        self.cgroup_procs = ctx.cgroup_procs
        self.guard_files = ctx.guard_files
        self.child_pid: int | None = None
        self.init_pidfd: int | None = None
        signal.signal(signal.SIGTERM, lambda signum, frame: self.kill_box())
        set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != ctx.daemon_pid:
            os._exit(1)  # the daemon died before the death signal was armed; no box exists yet

    def watch(self, child_pid: int, init_pid: int, *, in_box_cgroups: bool) -> None:
        """Guard the box whose PID 1 is ``init_pid``; ``child_pid`` is the launcher's child leading to it. A
        launcher that joined the box's cgroups leaves the freezer group (v1) or the box's group (v2) here,
        before PID 1 is reported, so the daemon cannot pause the guard with the box."""
        self.child_pid = child_pid
        try:
            self.init_pidfd = os.pidfd_open(init_pid)
        except ProcessLookupError:
            pass
        if in_box_cgroups and self.guard_files.leave_to is not None:
            with open(self.guard_files.leave_to, "w") as handle:
                handle.write(str(os.getpid()))

    def fds(self) -> set[int]:
        """The fds the guard holds (a launcher closing everything else must keep them)."""
        return {self.init_pidfd} if self.init_pidfd is not None else set()

    def kill_box(self) -> None:
        if self.init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)  # the kernel kills the whole pid ns
            except ProcessLookupError:
                pass
        me = os.getpid()
        doomed = {self.child_pid} if self.child_pid else set()
        for path in self.cgroup_procs:
            try:
                with open(path) as handle:
                    doomed.update(int(line) for line in handle.read().split())
            except OSError:
                pass
        members = set(doomed)
        doomed.update(pid for pid in _all_pids() if parent_pid(pid) == me)
        for pid in doomed - {me}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        writes = [self.guard_files.thaw] if self.guard_files.thaw is not None else []
        if self.guard_files.kill is not None and me not in members:
            writes.append((self.guard_files.kill, "1"))  # also what forked since the pids were read
        for path, text in writes:
            try:
                with open(path, "w") as handle:
                    handle.write(text)
            except OSError:
                pass

    def finish(self, child_pid: int) -> None:
        """Reap until no child is left; exit with ``child_pid``'s status (bwrap propagates PID 1's)."""
        code = 1
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(code)
            if pid == child_pid:
                code = exit_code_from_wait_status(status)
                self.child_pid = None
                self.kill_box()  # PID 1 may outlive bwrap (orphaned to us): it must not


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]
