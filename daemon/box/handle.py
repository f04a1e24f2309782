"""The daemon's handle on a running box (``SupervisedBox``) and the pieces it is made of: awaiting fds and
pidfds on the event loop, the bounded box log, and process states from /proc.

``SupervisedBox`` reaps the launcher through a pidfd (never ``waitpid(-1)``), pumps the log into ``box.log``,
and kills, pauses and resumes the box through its cgroups or, without them, through its pid namespace.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from tkbox_daemon.box.backend import BoxError, BoxProcess, exit_code_from_wait_status
from tkbox_daemon.box.cgroups import BoxCgroup
from tkbox_daemon.tasks import spawn

logger = logging.getLogger("tkbox.box")

LOG_DRAIN_TIMEOUT_S = 5.0


class FdWaiter:
    """Await readability of a non-blocking fd on the running loop."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def readable(self) -> None:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(self.fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(self.fd)

    async def read(self, size: int = 65536) -> bytes:
        """Next chunk; b"" at end of file."""
        while True:
            try:
                return os.read(self.fd, size)
            except BlockingIOError:
                await self.readable()


class LogPump:
    """Copies the box's stdout/stderr pipe into ``box.log``, keeping at most ``limit`` bytes."""

    def __init__(self, read_fd: int, path: os.PathLike[str] | str, limit: int) -> None:
        os.set_blocking(read_fd, False)
        self.read_fd = read_fd
        self.limit = limit
        self.written = 0
        self.dropped = 0
        self.out_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self.path = path
        self.task = spawn(self._run(), name=f"box-log:{path}")

    async def _run(self) -> None:
        reader = FdWaiter(self.read_fd)
        try:
            while chunk := await reader.read():
                self._keep(chunk)
        finally:
            if self.dropped:
                os.write(self.out_fd, f"\n[tkbox: log truncated, {self.dropped} bytes dropped]\n".encode())
            os.close(self.out_fd)
            os.close(self.read_fd)

    def _keep(self, chunk: bytes) -> None:
        room = self.limit - self.written
        if room > 0:
            os.write(self.out_fd, chunk[:room])
            self.written += min(room, len(chunk))
        self.dropped += max(0, len(chunk) - max(room, 0))

    async def finished(self, timeout: float = LOG_DRAIN_TIMEOUT_S) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        except TimeoutError:
            self.task.cancel()

    def tail(self, size: int = 2000) -> str:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(max(0, self.written - size))
                return handle.read(size).decode(errors="replace").strip()
        except OSError:
            return ""


def process_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (R, S, D, T, Z...), None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].split()[0].decode()


async def wait_until_stopped(pids: set[int], timeout: float = 10.0) -> None:
    """Return once every pid is stopped (or gone): a SIGSTOP is queued by kill() but taken a moment later."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.0002
    while any(process_state(pid) not in (None, "T", "t", "Z", "X") for pid in pids):
        if loop.time() > deadline:
            raise BoxError("box processes did not stop")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)


def parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2:].split()[1])


class SupervisedBox(BoxProcess):
    """A box started by a launcher the daemon forked (see the module docstring)."""

    def __init__(self, *, box_id: str, backend: str, launcher_pid: int, init_pid: int, init_parent: int,
                 cgroup: BoxCgroup | None, log: LogPump) -> None:
        self.box_id = box_id
        self.backend = backend
        self.launcher_pid = launcher_pid
        self.pid = init_pid
        self.cgroup = cgroup
        self.log = log
        self.returncode: int | None = None
        self.paused = False
        self._launcher_pidfd = os.pidfd_open(launcher_pid)
        self._launcher_reaped = False
        self._init_pidfd = self._open_init_pidfd(init_pid, {init_parent, launcher_pid})
        self._pid_ns = self._pid_namespace(init_pid)
        self._done = spawn(self._supervise(), name=f"box:{box_id}")

    @staticmethod
    def _open_init_pidfd(pid: int, parents: set[int]) -> int | None:
        """A pidfd for PID 1, only if its parent is still the one the launcher reported (so the pid cannot have
        been reused by another process)."""
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        if parent_pid(pid) not in parents:
            os.close(pidfd)
            return None
        return pidfd

    @staticmethod
    def _pid_namespace(pid: int) -> tuple[int, int] | None:
        try:
            info = os.stat(f"/proc/{pid}/ns/pid")
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    def launcher_pidfd(self) -> int:
        """A new pidfd of the box's launcher (the caller closes it): its mount namespace is where a workspace is
        attached later (``late_mounts.py``). Raises ``ProcessLookupError`` once the launcher has ended."""
        if self._launcher_reaped:
            raise ProcessLookupError(f"the launcher of box {self.box_id} has ended")
        return os.dup(self._launcher_pidfd)

    async def _supervise(self) -> int:
        await FdWaiter(self._launcher_pidfd).readable()
        _, status = os.waitpid(self.launcher_pid, 0)
        self._launcher_reaped = True  # from now on its pid may belong to someone else
        os.close(self._launcher_pidfd)
        if self._init_pidfd is not None:
            os.close(self._init_pidfd)
            self._init_pidfd = None
        await self.log.finished()
        if self.cgroup is not None:
            self._final_cgroup_stats = self.cgroup.stats()  # what the box's end looked like (oom kills, peak)
            await self._remove_cgroup(self.cgroup)
        self.returncode = exit_code_from_wait_status(status)
        return self.returncode

    async def _remove_cgroup(self, cgroup: BoxCgroup) -> None:
        for attempt in range(100):  # exiting tasks leave the group a moment after their parent reaped them
            if cgroup.remove():
                return
            cgroup.kill_all()
            await cgroup.wait_empty(0.001 * min(attempt + 1, 20))  # v2: until cgroup.events says populated 0
        logger.warning("box %s ended but its cgroups are still busy; left in place", self.box_id)

    async def wait(self) -> int:
        return await asyncio.shield(self._done)

    def kill(self) -> None:
        """SIGKILL PID 1 (the kernel then kills the whole pid namespace), then anything left in the cgroups,
        and SIGTERM the launcher, whose guard does the same from its side (also when no pidfd or cgroup was
        available here). The launcher is not killed: it reaps and exits by itself, so nothing is left to the
        host's init."""
        if self.returncode is not None:
            return
        if self._init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.cgroup is not None:
            self.cgroup.kill_all(spare=self.launcher_pid)  # a frozen task too (v1 thaws, v2 lets SIGKILL through)
        if not self._launcher_reaped:
            os.kill(self.launcher_pid, signal.SIGTERM)

    async def pause(self) -> None:
        if self.returncode is not None:
            raise BoxError(f"box {self.box_id} has ended")
        if self.cgroup is not None and self.cgroup.has_freezer:
            await self.cgroup.set_frozen(True)
        else:
            await wait_until_stopped(self._signal_namespace(signal.SIGSTOP, until_stable=True))
        self.paused = True

    async def resume(self) -> None:
        if self.returncode is not None:
            raise BoxError(f"box {self.box_id} has ended")
        if self.cgroup is not None and self.cgroup.has_freezer:
            await self.cgroup.set_frozen(False)
        else:
            self._signal_namespace(signal.SIGCONT)
        self.paused = False

    def namespace_pids(self) -> set[int]:
        """Host pids of every process in the box's pid namespace (root can read every /proc/<pid>/ns/pid)."""
        found: set[int] = set()
        if self._pid_ns is None:
            return found
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    info = os.stat(f"/proc/{entry.name}/ns/pid")
                except OSError:
                    continue
                if (info.st_dev, info.st_ino) == self._pid_ns:
                    found.add(int(entry.name))
        return found

    def _signal_namespace(self, signum: int, *, until_stable: bool = False) -> set[int]:
        """Send ``signum`` to every box process (with ``until_stable``, again until no new process appears);
        returns the pids signalled."""
        signalled: set[int] = set()
        while True:
            fresh = self.namespace_pids() - signalled
            for pid in fresh:
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
            signalled |= fresh
            if not fresh or not until_stable:
                return signalled

    def oom_kills(self) -> int | None:
        if self.cgroup is None:
            return None
        ended = getattr(self, "_final_cgroup_stats", None)
        if self.returncode is not None and ended is not None:
            kills = ended.get("oom_kills")
            return kills if isinstance(kills, int) else None
        return self.cgroup.oom_kills()

    def stats(self) -> dict[str, object]:
        out: dict[str, object] = {"backend": self.backend, "pid": self.pid, "paused": self.paused,
                                  "running": self.returncode is None}
        if self.cgroup is not None:
            ended = getattr(self, "_final_cgroup_stats", None)
            out.update(ended if self.returncode is not None and ended is not None else self.cgroup.stats())
        if "pids" not in out and self.returncode is None:
            out["pids"] = len(self.namespace_pids())
        out["log_bytes"] = self.log.written
        return out
