"""A test host for the real guest agent: serves the boot config once, accepts the guest's connection over real
Unix sockets and routes its frames by id.  The guest runs exactly as in a box (``python -I -S <folder>``), as a
plain subprocess with its sockets and workspace pointed at temporary directories.

Output credit: by default the host acknowledges every STDOUT/STDERR frame as it arrives (OUTPUT_ACK), like a
reader that keeps up; with ``ack_output=False`` it acknowledges nothing until the test calls ``ack_output``, and
``output_windows`` counts, per exec, what the guest sent and has not had acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tkbox_guest import protocol as P

ROOT = Path(__file__).resolve().parents[1]
GUEST_DIR = ROOT / "guest"
WAIT = 60.0  # a safety net against hangs, never a timing assertion


class GuestHost:
    """A test host: serves the boot config once, accepts the guest's connection and routes its frames by id."""

    def __init__(self, workspace: Path, *, base_dir: Path | None = None, upper_dir: Path | None = None,
                 env: dict[str, str] | None = None, limits: dict[str, int] | None = None,
                 prefix: tuple[str, ...] = (), raw_boot: bytes | None = None, ack_output: bool = True,
                 drain_ms: int = 300) -> None:
        self.sockdir = Path(tempfile.mkdtemp(prefix="tkg-", dir="/tmp"))
        self.boot_path = self.sockdir / "boot.sock"
        self.agent_path = self.sockdir / "agent.sock"
        config: dict[str, Any] = {
            "box_id": "box-test", "env": env or {"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            "workspace": str(workspace), "agent_socket": str(self.agent_path),
            "limits": limits or {"exec_timeout_ms": 0, "max_execs": 64}, "clock": 1_700_000_000_000,
        }
        if base_dir is not None:
            config["base_dir"] = str(base_dir)
        if upper_dir is not None:
            config["upper_dir"] = str(upper_dir)
        self.boot_bytes = raw_boot if raw_boot is not None else P.dumps(config)
        self.prefix = prefix
        self.drain_ms = drain_ms
        self.events: dict[int, asyncio.Queue[tuple[str, Any]]] = defaultdict(asyncio.Queue)
        self.windows: dict[int, P.StdinWindow] = {}
        self.credit = asyncio.Condition()
        self.auto_ack_output = ack_output
        self.output_windows: dict[int, P.OutputWindow] = {}
        self.output_seen = asyncio.Condition()  # notified on every output frame
        self.ops: dict[int, str] = {}
        self.next_id = 1
        self.connected = asyncio.Event()
        self.closed = asyncio.Event()
        self.host_errors: list[str] = []
        self.writer: asyncio.StreamWriter | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- process and sockets ---------------------------------------------------------------------------------

    async def start(self, *, connect: bool = True) -> GuestHost:
        self.boot_server = await asyncio.start_unix_server(self._serve_boot, path=str(self.boot_path))
        self.agent_server = await asyncio.start_unix_server(self._accept, path=str(self.agent_path))
        self.proc = await asyncio.create_subprocess_exec(
            *self.prefix, sys.executable, "-I", "-S", str(GUEST_DIR), "--boot-socket", str(self.boot_path),
            "--drain-ms", str(self.drain_ms), "--no-forwarder", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd="/")
        if connect:
            await asyncio.wait_for(self.connected.wait(), WAIT)
        return self

    async def _serve_boot(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(self.boot_bytes)
        await writer.drain()
        writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.connected.set()
        await self._read_frames(reader)

    async def _read_frames(self, reader: asyncio.StreamReader) -> None:
        decoder = P.FrameDecoder(accept=P.GUEST_TO_HOST)
        try:
            while data := await reader.read(1 << 16):
                for frame in decoder.feed(data):
                    await self._route(frame)
            decoder.eof()
        except (P.ProtocolError, ConnectionError) as exc:
            self.host_errors.append(str(exc))
        finally:
            self.closed.set()

    async def _route(self, frame: P.Frame) -> None:
        if frame.type == P.RESPONSE:
            obj = P.loads_strict(frame.payload)
            self.events[obj["id"]].put_nowait(("response", P.validate_response(obj, self.ops[obj["id"]])))
        elif frame.type == P.EXIT:
            obj = P.validate_exit(P.loads_strict(frame.payload))
            self.events[obj["id"]].put_nowait(("exit", obj))
        elif frame.type == P.STDIN_ACK:
            ident, count = P.decode_stdin_ack(frame.payload)
            async with self.credit:
                self.windows[ident].give_back(count)
                self.credit.notify_all()
        else:
            ident, data = P.split_id(frame.payload)
            kind = {P.STDOUT: "stdout", P.STDERR: "stderr", P.DATA: "data"}[frame.type]
            self.events[ident].put_nowait((kind, data))
            if frame.type in (P.STDOUT, P.STDERR):
                async with self.output_seen:
                    self.output_windows[ident].take(len(data))  # a ProtocolError: the guest overran its window
                    self.output_seen.notify_all()
                if self.auto_ack_output:
                    with contextlib.suppress(ConnectionError, OSError):  # a test may have closed its end
                        await self.ack_output(ident, len(data))

    async def stop(self) -> tuple[int, str]:
        """Wait for the guest to exit; returns (status, stderr)."""
        _, err = await asyncio.wait_for(self.proc.communicate(), WAIT)
        await self.aclose()
        return self.proc.returncode, err.decode(errors="replace")

    async def aclose(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await asyncio.wait_for(self.proc.wait(), WAIT)
        for server in (self.boot_server, self.agent_server):
            server.close()
        if self.writer is not None:
            self.writer.close()
        for task in list(self._tasks):
            task.cancel()
        shutil.rmtree(self.sockdir, ignore_errors=True)

    # -- sending ----------------------------------------------------------------------------------------------

    async def send_raw(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)
        await self.writer.drain()

    async def request(self, op: str, **fields: Any) -> int:
        ident = self.next_id
        self.next_id += 1
        self.ops[ident] = op
        body = P.validate_request({"id": ident, "op": op, **fields})
        if op == "exec":
            self.windows[ident] = P.StdinWindow()
            self.output_windows[ident] = P.OutputWindow()
        await self.send_raw(P.encode_json_frame(P.REQUEST, body))
        return ident

    async def ack_output(self, ident: int, count: int | None = None) -> None:
        """Acknowledge ``count`` output bytes of exec ``ident`` (all it has outstanding when not given)."""
        window = self.output_windows[ident]
        count = window.outstanding if count is None else count
        while count > 0:
            step = min(count, P.OUTPUT_WINDOW)
            window.give_back(step)
            await self.send_raw(P.encode_output_ack(ident, step))
            count -= step

    async def output_outstanding(self, ident: int, at_least: int) -> int:
        """Wait until exec ``ident`` has at least ``at_least`` output bytes unacknowledged; returns how many."""
        window = self.output_windows[ident]
        async with self.output_seen:
            await asyncio.wait_for(self.output_seen.wait_for(lambda: window.outstanding >= at_least), WAIT)
        return window.outstanding

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        ident = await self.request(op, **fields)
        return await self.response(ident)

    async def event(self, ident: int) -> tuple[str, Any]:
        return await asyncio.wait_for(self.events[ident].get(), WAIT)

    async def response(self, ident: int) -> dict[str, Any]:
        kind, value = await self.event(ident)
        assert kind == "response", (kind, value)
        return value

    async def feed(self, ident: int, data: bytes, *, eof: bool = True) -> None:
        """Send stdin within the window, waiting for STDIN_ACK credit as the guest drains it."""
        window = self.windows[ident]
        view = memoryview(data)
        while view:
            async with self.credit:
                await self.credit.wait_for(lambda: window.available > 0)
                size = min(window.available, P.MAX_ID_DATA, len(view))
                window.take(size)
                self.credit.notify_all()
            await self.send_raw(P.encode_id_frame(P.STDIN, ident, bytes(view[:size])))
            view = view[size:]
        if eof:
            await self.send_raw(P.encode_id_frame(P.STDIN_EOF, ident))

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def exec(self, argv: list[str], *, stdin: bytes | None = b"", cwd: str = "/", env: dict | None = None,
                   timeout_ms: int = 0) -> tuple[int, dict[str, Any]]:
        """Start an exec; returns its id and the RESPONSE (stdin, if given, is fed in the background)."""
        ident = await self.request("exec", argv=argv, cwd=cwd, env=env or {}, timeout_ms=timeout_ms)
        if stdin is not None:
            self.spawn(self.feed(ident, stdin))
        return ident, await self.response(ident)

    async def outcome(self, ident: int) -> dict[str, Any]:
        """Everything an exec sends after its RESPONSE, up to and including EXIT."""
        out = {"stdout": bytearray(), "stderr": bytearray()}
        while True:
            kind, value = await self.event(ident)
            if kind == "exit":
                return {"stdout": bytes(out["stdout"]), "stderr": bytes(out["stderr"]), **value}
            out[kind] += value

    async def run(self, argv: list[str], **kwargs: Any) -> dict[str, Any]:
        ident, response = await self.exec(argv, **kwargs)
        assert response["ok"], response
        return await self.outcome(ident)

    async def data_call(self, op: str, **fields: Any) -> tuple[bytes, dict[str, Any]]:
        ident = await self.request(op, **fields)
        data = bytearray()
        while True:
            kind, value = await self.event(ident)
            if kind == "response":
                return bytes(data), value
            assert kind == "data"
            data += value


def gone_or_zombie(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


async def shutdown_guest(host: GuestHost) -> tuple[int, str]:
    response = await host.call("shutdown")
    assert response["ok"] is True
    return await host.stop()


@contextlib.asynccontextmanager
async def guest_on_empty_workspace(tmp_path: Path) -> AsyncIterator[GuestHost]:
    """A started guest whose workspace is a new empty folder under ``tmp_path``; closed afterwards."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    host = await GuestHost(workspace).start()
    try:
        yield host
    finally:
        await host.aclose()
