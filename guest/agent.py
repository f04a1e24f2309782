"""The agent: connect to the host's agent socket and serve requests until ``shutdown`` or the channel closes.

The request loop only ever does quick, non-blocking work (decode, validate, spawn a process, queue stdin, take
output credit, send a small response); anything long (an exec's life, a diff, a file read) runs as its own task,
so the host can always signal or shut down. A protocol error from the host ends the guest: it kills every process
group it started, closes the channel, writes the reason on stderr and exits with status 2.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import stat
import sys
from collections import OrderedDict
from collections.abc import Coroutine, Iterable, Iterator
from typing import Any

from . import protocol
from .boot import BootConfig, BootError, JobUser, read_boot_config
from .capabilities import CapabilityError, restrict_to
from .channel import Channel, ChannelClosed
from .execs import Exec, StartError
from .files import BoundedRead, FileError
from .forwarder import Forwarder
from .protocol import Frame, FrameDecoder, ProtocolError
from .reaper import Reaper
from .tasks import TaskSet

EXIT_OK = 0
EXIT_STARTUP = 1
EXIT_PROTOCOL = 2
EXIT_INTERNAL = 3
DRAIN_S = 1.0
SHUTDOWN_GRACE_S = 2.0
READ_SIZE = 256 * 1024
DATA_CHUNK = 256 * 1024
FINISHED_MEMORY = 4096  # ids of ended execs whose late STDIN and OUTPUT_ACK frames are dropped, not refused
FILES_LIST_BUDGET = 900_000  # bytes of the diff response's file list; the patch itself is the full record


def _log(message: str) -> None:
    print(f"tkbox-guest: {message}", file=sys.stderr, flush=True)


def _blocks(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    buf = bytearray()
    for piece in pieces:
        buf += piece
        while len(buf) >= size:
            yield bytes(buf[:size])
            del buf[:size]
    if buf:
        yield bytes(buf)


def bounded_file_list(summaries: list[dict[str, Any]], budget: int = FILES_LIST_BUDGET) -> tuple[list, bool]:
    out: list[dict[str, Any]] = []
    used = 0
    for summary in summaries:
        used += len(protocol.dumps(summary)) + 1
        if used > budget:
            return out, True
        out.append(summary)
    return out, False


class Agent:
    def __init__(self, config: BootConfig, channel: Channel, reaper: Reaper, *, drain_s: float = DRAIN_S,
                 grace_s: float = SHUTDOWN_GRACE_S) -> None:
        self.config = config
        self.channel = channel
        self.reaper = reaper
        self.drain_s = drain_s
        self.grace_s = grace_s
        self.active: dict[int, str] = {}  # request id -> op, while the id is in use
        self.execs: dict[int, Exec] = {}
        self.exec_tasks: dict[int, asyncio.Task[Any]] = {}
        self.finished: OrderedDict[int, None] = OrderedDict()
        self.groups: set[int] = set()  # process groups that may still have members
        self.ops = TaskSet()
        self.shutdown_requested = False
        self.fatal: str | None = None

    # -- the request loop -----------------------------------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader) -> int:
        decoder = FrameDecoder(accept=protocol.HOST_TO_GUEST)
        try:
            while True:
                try:
                    data = await reader.read(READ_SIZE)
                except (ConnectionError, OSError):
                    data = b""
                if not data:
                    if not self.shutdown_requested and self.fatal is None:
                        decoder.eof()
                    break
                for frame in decoder.feed(data):
                    self.handle(frame)
        except ProtocolError as exc:
            _log(f"protocol error: {exc}")
            await self.cleanup()
            return EXIT_PROTOCOL
        except ChannelClosed:
            pass  # we are closing (shutdown, SIGTERM) while frames were still being handled
        except Exception as exc:  # a bug: still kill what we started
            self.fatal = f"{type(exc).__name__}: {exc}"
        await self.cleanup()
        if self.fatal is not None:
            _log(f"internal error: {self.fatal}")
            return EXIT_INTERNAL
        return EXIT_OK

    def handle(self, frame: Frame) -> None:
        if frame.type == protocol.REQUEST:
            self.request(protocol.validate_request(protocol.loads_strict(frame.payload)))
            return
        credit, data = 0, b""
        if frame.type == protocol.OUTPUT_ACK:
            ident, credit = protocol.decode_output_ack(frame.payload)
        else:
            ident, data = protocol.split_id(frame.payload)
        running = self.execs.get(ident)
        if running is None:
            if ident in self.finished:
                return  # sent before the host saw this exec's end (stdin, or credit it no longer needs)
            raise ProtocolError(f"{protocol.TYPE_NAMES[frame.type]} for id {ident}, which is not a running exec")
        if frame.type == protocol.STDIN:
            running.feed_stdin(data)
        elif frame.type == protocol.STDIN_EOF:
            running.close_stdin()
        else:
            running.give_output_credit(credit)

    def request(self, req: dict[str, Any]) -> None:
        ident, op = req["id"], req["op"]
        if ident in self.active:
            raise ProtocolError(f"request id {ident} is already in use")
        self.finished.pop(ident, None)
        if self.shutdown_requested:
            self.channel.fail(ident, "ESHUTDOWN", "the guest is shutting down")
            self._finish(ident)  # so stdin already sent for a refused exec is dropped, not refused
            return
        if op == "ping":
            self.channel.respond(ident)
        elif op == "signal":
            self.signal(ident, req["target"], req["signal"])
        elif op == "resize":
            self.resize(ident, req["target"], req["rows"], req["cols"])
        elif op == "exec":
            self.start_exec(ident, req)
        else:
            work = {"diff": self.diff, "files": self.files, "shutdown": self.shutdown}[op](ident, req)
            self.active[ident] = op
            self.ops.spawn(self._op(ident, work), name=f"{op}-{ident}")

    def _finish(self, ident: int) -> None:
        self.active.pop(ident, None)
        self.execs.pop(ident, None)
        self.exec_tasks.pop(ident, None)
        self.finished[ident] = None
        while len(self.finished) > FINISHED_MEMORY:
            self.finished.popitem(last=False)

    async def _op(self, ident: int, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except ChannelClosed:
            pass
        except Exception as exc:  # a bug here must not take the other requests down
            try:
                self.channel.fail(ident, "EINTERNAL", f"{type(exc).__name__}: {exc}")
            except ChannelClosed:
                pass
        finally:
            self._finish(ident)

    # -- ops ------------------------------------------------------------------------------------------------------

    def signal(self, ident: int, target: int, signum: int) -> None:
        running = self.execs.get(target)
        if running is None:
            self.channel.fail(ident, "ESRCH", f"no running exec with id {target}")
            return
        try:
            running.signal(signum)
        except ProcessLookupError:
            self.channel.fail(ident, "ESRCH", f"exec {target} has no processes left")
            return
        self.channel.respond(ident)

    def resize(self, ident: int, target: int, rows: int, cols: int) -> None:
        running = self.execs.get(target)
        if running is None:
            self.channel.fail(ident, "ESRCH", f"no running exec with id {target}")
            return
        if not running.is_pty:
            self.channel.fail(ident, "ENOTTY", f"exec {target} has no pty")
            return
        try:
            running.resize(rows, cols)
        except (OSError, ValueError) as exc:
            code = errno.errorcode.get(getattr(exc, "errno", None) or 0, "ENOTTY")
            self.channel.fail(ident, code, f"cannot resize exec {target}: {exc}")
            return
        self.channel.respond(ident)

    def start_exec(self, ident: int, req: dict[str, Any]) -> None:
        if len(self.execs) >= self.config.max_execs:
            self.channel.fail(ident, "EAGAIN", f"{self.config.max_execs} execs are already running")
            self._finish(ident)
            return
        limit, asked = self.config.exec_timeout_ms, req["timeout_ms"]
        timeout_ms = min(limit, asked) if limit and asked else limit or asked
        running = Exec(ident, req, env={**self.config.env, **req["env"]}, timeout_ms=timeout_ms,
                       channel=self.channel, reaper=self.reaper, drain_s=self.drain_s, job=self.config.job)
        try:
            pid = running.start()
        except StartError as exc:
            self.channel.fail(ident, exc.code, str(exc))
            self._finish(ident)
            return
        self.active[ident] = "exec"
        self.execs[ident] = running
        self.groups.add(pid)
        self.channel.respond(ident, pid=pid)
        self.exec_tasks[ident] = self.ops.spawn(self._run_exec(running), name=f"exec-{ident}")

    async def _run_exec(self, running: Exec) -> None:
        try:
            await running.run()
        except ChannelClosed:
            pass
        except Exception as exc:  # no EXIT can follow: the host would wait forever, so stop the guest
            running.kill()
            self.fatal = f"exec {running.ident}: {type(exc).__name__}: {exc}"
            await self.channel.close()
        finally:
            self._finish(running.ident)
            if not running.group_alive():
                self.groups.discard(running.pid)

    async def _stream(self, ident: int, blocks: Iterator[bytes]) -> tuple[int, str]:
        """Send ``blocks`` (produced in a worker thread) as DATA frames; returns (size, sha256 digest)."""
        import hashlib  # loads OpenSSL's libcrypto: on the first diff or file read, not at every box's start

        digest, size = hashlib.sha256(), 0
        while True:
            block = await asyncio.to_thread(next, blocks, None)
            if block is None:
                return size, "sha256:" + digest.hexdigest()
            digest.update(block)
            size += len(block)
            await self.channel.send(protocol.encode_id_frame(protocol.DATA, ident, block))

    async def diff(self, ident: int, req: dict[str, Any]) -> None:
        from . import diff  # imported on the first diff, not at every box's start (~8 ms of it)

        merged = self.config.workspace if os.path.isdir(self.config.workspace) else None
        summaries: list[dict[str, Any]] = []
        # only the xattr the kernel itself reads: a job may set user.overlay.opaque on its own directories
        pieces = diff.iter_patch(self.config.upper_dir, self.config.base_dir, merged, summaries,
                                 opaque_xattrs=diff.KERNEL_OPAQUE_XATTRS)
        try:
            size, sha256 = await self._stream(ident, _blocks(pieces, DATA_CHUNK))
        except diff.DiffError as exc:
            self.channel.fail(ident, "EDIFF", str(exc))
            return
        files, truncated = bounded_file_list(summaries)
        self.channel.respond(ident, size=size, sha256=sha256, files=files, files_truncated=truncated)

    async def files(self, ident: int, req: dict[str, Any]) -> None:
        try:
            read = await asyncio.to_thread(BoundedRead, self.config.workspace, req["path"], req["max_bytes"])
            try:
                await self._stream(ident, read.chunks())
            finally:
                read.close()
        except FileError as exc:
            self.channel.fail(ident, exc.code, str(exc))
            return
        self.channel.respond(ident, size=read.size, truncated=read.truncated)

    async def shutdown(self, ident: int, req: dict[str, Any]) -> None:
        self.shutdown_requested = True
        for running in list(self.execs.values()):
            try:
                running.signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        pending = [task for task in self.exec_tasks.values() if not task.done()]
        if pending:
            _, pending_set = await asyncio.wait(pending, timeout=self.grace_s)
            if pending_set:
                for running in list(self.execs.values()):
                    running.kill()
                await asyncio.wait(pending_set, timeout=self.grace_s)
        self.kill_groups()
        self.channel.respond(ident)
        await self.channel.close()  # the request loop then sees EOF and returns

    # -- the end --------------------------------------------------------------------------------------------------

    def kill_groups(self) -> None:
        for running in list(self.execs.values()):
            running.kill()
        for pgid in list(self.groups):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.groups.clear()

    async def cleanup(self) -> None:
        self.kill_groups()
        await self.ops.cancel_all()
        await self.channel.close()

    def terminate(self) -> None:
        """SIGTERM/SIGINT to the guest: stop as if the host had closed the channel."""
        self.shutdown_requested = True
        self.kill_groups()
        self.ops.spawn(self.channel.close(), name="terminate")


async def start_forwarder(egress_socket: str) -> Forwarder | None:
    """The egress forwarder (``forwarder.py``), listening before any exec can run; None when its address cannot
    be had: the box then has no way to the network door (closed, as without the door), and says why."""
    forwarder = Forwarder(egress_socket)
    try:
        await forwarder.start()
    except OSError as exc:
        _log(f"the egress forwarder cannot listen on {forwarder.host}:{forwarder.requested_port}: "
             f"{exc.strerror or exc}; commands in this box have no way to the network")
        return None
    return forwarder


async def serve_socket(config: BootConfig, agent_socket: str, *, drain_s: float = DRAIN_S,
                       forward: bool = True) -> int:
    forwarder = await start_forwarder(config.egress_socket) if forward else None
    try:
        return await _serve_agent(config, agent_socket, drain_s=drain_s)
    finally:
        if forwarder is not None:
            await forwarder.close()


async def _serve_agent(config: BootConfig, agent_socket: str, *, drain_s: float) -> int:
    try:
        reader, writer = await asyncio.open_unix_connection(agent_socket)
    except OSError as exc:
        _log(f"cannot connect to the agent socket {agent_socket}: {exc.strerror or exc}")
        return EXIT_STARTUP
    reaper = Reaper()
    reaper.start()
    agent = Agent(config, Channel(writer), reaper, drain_s=drain_s)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, agent.terminate)
    try:
        return await agent.serve(reader)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        reaper.stop()


def become_agent(job: JobUser) -> None:
    """Before any thread exists (capabilities are per thread): keep only the guest's own capabilities, and hand
    the job user its home (a fresh tmpfs the launcher may have made as the guest's)."""
    restrict_to()
    info = os.lstat(job.home)
    if stat.S_ISDIR(info.st_mode) and info.st_uid != job.uid:
        os.chown(job.home, job.uid, job.gid, follow_symlinks=False)


def run(boot_socket: str, agent_socket: str | None = None, *, drain_s: float = DRAIN_S, forward: bool = True) -> int:
    """Read the boot config, start the egress forwarder (unless ``forward`` is false: a guest on a test host, whose
    loopback is the host's), then serve the agent socket (the flag wins over the config's path)."""
    try:
        config = read_boot_config(boot_socket)
    except BootError as exc:
        _log(str(exc))
        return EXIT_STARTUP
    if config.job is not None:
        try:
            become_agent(config.job)
        except (CapabilityError, OSError) as exc:
            _log(f"cannot set up the guest's privileges: {exc}")
            return EXIT_STARTUP
    return asyncio.run(serve_socket(config, agent_socket or config.agent_socket, drain_s=drain_s, forward=forward))
