"""One exec: a process in its own process group, its stdin window, its output streams and its EXIT.

Lifecycle: ``start`` spawns synchronously (so the ``exec`` RESPONSE with the pid goes out before any output), then
``run`` pumps stdout and stderr as frames of at most 64 KiB, writes stdin as the host sends it, kills the group on
timeout, and waits for the reaper to hand over the exit status. After the process is gone it waits at most
``drain_s`` for both pipes to reach EOF (a background grandchild may hold them open forever), then sends EXIT.

Output: the guest may have at most ``OUTPUT_WINDOW`` bytes of stdout and stderr together sent and not acknowledged
by the host's OUTPUT_ACK. A pump reads at most what the window allows and waits for credit before it reads its
pipe again, so a process whose output nobody reads blocks on its pipe, as under a slow terminal, while the channel
stays free for everything else. The bytes that were in the pipes when the process ended are owed to the host and
sent whatever the drain, as credit comes (the host either reads them or, its reader gone, gives the credit back
at once); the drain only bounds how long a background writer can delay EXIT.

Stdin: the guest holds at most ``STDIN_WINDOW`` bytes the host sent and the process has not read. Every write to
the pipe (or drop, once the pipe is broken) is acknowledged with STDIN_ACK, which reopens the host's window.
Stdin never blocks the request loop, so ``signal`` and timeouts work on a process that never reads it.

With ``pty: true`` the process runs on a new pseudo-terminal instead of pipes (``ptys``): it is a session leader
with the slave as its controlling terminal and as stdin, stdout and stderr. The guest holds the master: its output
goes out as STDOUT frames (there is no STDERR), STDIN is written to it within the same window, ``resize`` sets its
size, ``signal`` goes to the terminal's foreground process group, and STDIN_EOF closes nothing (the process sees
no end of input; a host that wants one sends Ctrl-D, ``\x04``, as STDIN).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import struct
import subprocess
import termios
from typing import Any

from . import protocol, ptys, tasks
from .boot import JobUser
from .channel import Channel, ChannelClosed
from .protocol import OutputWindow, ProtocolError, StdinWindow
from .reaper import Reaper
from .start_errors import StartError, errno_name, popen_failure

STDIN_WRITE = 64 * 1024
PTY_TERM = "xterm-256color"  # TERM of a pty exec whose environment names none


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _bytes_waiting(fd: int) -> int:
    """Bytes that can be read from a pipe or a pty master now (FIONREAD); 0 when it cannot tell."""
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


async def _ended(tasks: list[asyncio.Task[Any]], timeout: float | None = None) -> None:
    """Wait until every task has ended (at most ``timeout`` seconds), without a turn of the loop when they all have
    already (a command's pipes usually reach EOF before its exit status comes); their errors are not raised."""
    if not all(task.done() for task in tasks):
        await asyncio.wait(tasks, timeout=timeout)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: a pump's own error ends only that pump


class Exec:
    def __init__(self, ident: int, request: dict[str, Any], *, env: dict[str, str], timeout_ms: int,
                 channel: Channel, reaper: Reaper, drain_s: float, job: JobUser | None = None) -> None:
        self.ident = ident
        self.job = job
        self.request = request
        self.env = env
        self.timeout_ms = timeout_ms
        self.channel = channel
        self.reaper = reaper
        self.drain_s = drain_s
        self.pid = 0
        self.window = StdinWindow()
        self.output_window = OutputWindow()  # stdout and stderr together
        self.timed_out = False
        self.leader_gone = False
        self._status: asyncio.Future[int] | None = None
        self._stdin_fd: int | None = None
        self._out_fds: list[int] = []
        self._out_kinds: tuple[int, ...] = (protocol.STDOUT, protocol.STDERR)
        self._master: int | None = None  # a pty exec's master, for resize and the foreground group
        self._stdin_buf = bytearray()
        self._stdin_wake = asyncio.Event()
        self._stdin_eof = False
        self._stdin_broken = False
        self._tasks = tasks.TaskSet()
        self._stop_reading = False
        self._idle: dict[asyncio.Task[Any] | None, bool] = {}
        self._output_wake = asyncio.Event()  # set on OUTPUT_ACK credit and when the drain ends
        self._owed: dict[int, int] = {}  # fd -> bytes still to send of what was in it when the process ended

    # -- start ------------------------------------------------------------------------------------------------

    @property
    def is_pty(self) -> bool:
        return bool(self.request.get("pty"))

    def _popen(self, fds: list[int], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Popen the request's argv; on failure close ``fds`` and raise :class:`StartError`."""
        if self.job is not None:  # the job user, never the guest's uid: see capabilities.py
            kwargs.update(user=self.job.uid, group=self.job.gid, extra_groups=[])
        try:
            return subprocess.Popen(  # noqa: S603 - argv comes from the host, which decided it
                self.request["argv"], cwd=self.request["cwd"], close_fds=True, restore_signals=True, **kwargs)
        except OSError as exc:
            for fd in fds:
                _close(fd)
            raise popen_failure(exc, self.request["argv"][0], self.request["cwd"], kwargs.get("env") or {}) from None
        except (ValueError, subprocess.SubprocessError) as exc:
            for fd in fds:
                _close(fd)
            raise StartError("EINVAL", str(exc)) from None

    def _watch(self, proc: subprocess.Popen[bytes]) -> None:
        # The reaper owns waiting: Popen must never call waitpid on this pid (it could steal a reused pid's status).
        proc.returncode = 0
        self.pid = proc.pid
        self._status = self.reaper.watch(self.pid)

    def start(self) -> int:
        """Spawn the process (raises :class:`StartError`) and register it with the reaper."""
        if self.is_pty:
            return self._start_pty()
        ends: list[int] = []
        try:
            for _ in range(3):
                ends.extend(os.pipe2(os.O_CLOEXEC))
        except OSError as exc:
            for fd in ends:
                _close(fd)
            raise StartError(errno_name(exc.errno), f"cannot make pipes: {exc.strerror}") from None
        in_r, in_w, out_r, out_w, err_r, err_w = ends
        proc = self._popen(ends, env=self.env, stdin=in_r, stdout=out_w, stderr=err_w, process_group=0)
        self._watch(proc)
        for fd in (in_r, out_w, err_w):
            _close(fd)
        for fd in (in_w, out_r, err_r):
            os.set_blocking(fd, False)
        self._stdin_fd = in_w
        self._out_fds = [out_r, err_r]
        return self.pid

    def _start_pty(self) -> int:
        """Spawn on a new pty: the child is a session leader whose controlling terminal is the slave."""
        fds: list[int] = []
        try:
            master, slave = ptys.open_pty(self.request["rows"], self.request["cols"])
            fds += [master, slave]
            fds += [os.dup(master), os.dup(master)]  # the output pump's and the stdin writer's own descriptors
            if self.job is not None:  # the job's own terminal, as a login would hand it over
                os.fchown(slave, self.job.uid, self.job.gid)
        except OSError as exc:
            for fd in fds:
                _close(fd)
            raise StartError(errno_name(exc.errno), f"cannot open a pty: {exc.strerror}") from None
        _, _, reader, writer = fds
        env = self.env if "TERM" in self.env else {**self.env, "TERM": PTY_TERM}
        proc = self._popen(fds, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                           preexec_fn=ptys.take_controlling_tty)
        self._watch(proc)
        _close(slave)
        os.set_blocking(master, False)  # one open file: the duplicates are non-blocking too
        self._master = master
        self._stdin_fd = writer
        self._out_fds = [reader]
        self._out_kinds = (protocol.STDOUT,)
        return self.pid

    # -- requests from the host ---------------------------------------------------------------------------------

    def feed_stdin(self, data: bytes) -> None:
        if self._stdin_eof:
            raise ProtocolError(f"STDIN for exec {self.ident} after STDIN_EOF")
        self.window.take(len(data))
        if self._stdin_broken:
            self._ack(len(data))
            return
        self._stdin_buf += data
        self._stdin_wake.set()

    def close_stdin(self) -> None:
        if self._stdin_eof:
            raise ProtocolError(f"second STDIN_EOF for exec {self.ident}")
        self._stdin_eof = True
        self._stdin_wake.set()

    def give_output_credit(self, count: int) -> None:
        """OUTPUT_ACK: the host has taken ``count`` output bytes (an ack beyond what was sent is a ProtocolError)."""
        try:
            self.output_window.give_back(count)
        except ProtocolError as exc:
            raise ProtocolError(f"OUTPUT_ACK for exec {self.ident}: {exc}") from None
        self._output_wake.set()

    def signal(self, signum: int) -> None:
        """Signal the process group (raises ProcessLookupError when it is gone); on a pty, the foreground group."""
        foreground = ptys.foreground_group(self._master) if self._master is not None else None
        if foreground is not None and foreground != self.pid:
            try:
                os.killpg(foreground, signum)
                return
            except (ProcessLookupError, PermissionError):
                pass
        os.killpg(self.pid, signum)

    def resize(self, rows: int, cols: int) -> None:
        """Set a pty exec's window size (the kernel sends SIGWINCH); raises OSError, or ValueError without a pty."""
        if self._master is None:
            raise ValueError(f"exec {self.ident} has no pty")
        ptys.set_size(self._master, rows, cols)

    def kill(self) -> None:
        groups = {self.pid}
        if self._master is not None:
            groups.add(ptys.foreground_group(self._master) or self.pid)
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    # -- running ----------------------------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Serve the process until it is gone and drained, then send EXIT; returns the EXIT body."""
        try:
            return await self._run()
        finally:  # also when cancelled at the guest's end: the pumps close their own descriptors
            self._tasks.cancel_nowait()
            _close(self._master)
            self._master = None

    async def _run(self) -> dict[str, Any]:
        assert self._status is not None
        loop = asyncio.get_running_loop()
        pumps = [self._tasks.spawn(self._pump(fd, kind), name=f"exec-{self.ident}-pump")
                 for fd, kind in zip(self._out_fds, self._out_kinds, strict=True)]
        self._tasks.spawn(self._write_stdin(), name=f"exec-{self.ident}-stdin")
        timer = loop.call_later(self.timeout_ms / 1000, self._on_timeout) if self.timeout_ms else None
        try:
            status = await self._status
        finally:
            if timer is not None:
                timer.cancel()
        self.leader_gone = True
        # What is in the pipes now was written before the end: it is owed, however long credit takes.
        # (a pump that has ended has closed its descriptor, whose number may already be another file's)
        self._owed = {fd: _bytes_waiting(fd) for pump, fd in zip(pumps, self._out_fds, strict=True)
                      if not pump.done()}
        await _ended(pumps, timeout=self.drain_s)
        # Drain over: read no more than is owed; a pump in the middle of sending finishes that frame, a pump
        # waiting for its pipe stops now, and one waiting for credit stops once its owed bytes are sent.
        self._stop_reading = True
        self._output_wake.set()
        for pump, fd in zip(pumps, self._out_fds, strict=True):
            if self._idle.get(pump) and not self._owed.get(fd):
                pump.cancel()
        await _ended(pumps)
        await self._tasks.cancel_all()
        self._stdin_buf.clear()
        _close(self._stdin_fd)
        self._stdin_fd = None
        if os.WIFSIGNALED(status):
            body = {"id": self.ident, "exit_code": None, "signal": os.WTERMSIG(status), "timed_out": self.timed_out}
        else:
            body = {"id": self.ident, "exit_code": os.WEXITSTATUS(status) & 0xFF, "signal": None,
                    "timed_out": self.timed_out}
        await self.channel.send(protocol.encode_json_frame(protocol.EXIT, body))
        return body

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _on_timeout(self) -> None:
        self.timed_out = True
        self.kill()

    def _may_read(self, fd: int) -> bool:
        return not self._stop_reading or self._owed.get(fd, 0) > 0

    async def _pump(self, fd: int, ftype: int) -> None:
        me = asyncio.current_task()
        try:
            while self._may_read(fd):
                if self.output_window.available == 0:  # the host has not taken what we sent: wait for credit
                    self._output_wake.clear()
                    await self._output_wake.wait()
                    continue
                self._idle[me] = True
                await tasks.readable(fd)
                self._idle[me] = False
                size = min(protocol.MAX_OUTPUT_CHUNK, self.output_window.available)
                if self._stop_reading:
                    size = min(size, self._owed.get(fd, 0))
                if size == 0:  # the other pump took the credit meanwhile, or the drain ended
                    continue
                try:
                    data = os.read(fd, size)
                except BlockingIOError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                self.output_window.take(len(data))
                if fd in self._owed:
                    self._owed[fd] = max(0, self._owed[fd] - len(data))
                await self.channel.send(protocol.encode_id_frame(ftype, self.ident, data))
        except ChannelClosed:
            return
        finally:
            _close(fd)

    def _ack(self, count: int) -> None:
        while count > 0:
            step = min(count, protocol.STDIN_WINDOW)
            self.window.give_back(step)
            try:
                self.channel.send_nowait(protocol.encode_stdin_ack(self.ident, step))
            except ChannelClosed:
                pass
            count -= step

    async def _write_stdin(self) -> None:
        fd = self._stdin_fd
        assert fd is not None
        while True:
            if not self._stdin_buf:
                if self._stdin_eof:
                    break
                self._stdin_wake.clear()
                await self._stdin_wake.wait()
                continue
            await tasks.writable(fd)
            try:
                written = os.write(fd, self._stdin_buf[:STDIN_WRITE])
            except BlockingIOError:
                continue
            except OSError:  # EPIPE: nobody reads stdin any more; drop what is held and whatever comes later
                self._stdin_broken = True
                dropped = len(self._stdin_buf)
                self._stdin_buf.clear()
                self._ack(dropped)
                break
            del self._stdin_buf[:written]
            self._ack(written)
        self._stdin_fd = None
        _close(fd)
