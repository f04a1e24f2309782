"""A scripted guest for driving the host's ``GuestLink`` over a socketpair: the test reads the host's frames and
writes whatever frames it likes back, honest or not."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tkbox_daemon.boxes.exec_history import ExecHistory
from tkbox_daemon.boxes.guest_link import GuestLink
from tkbox_daemon.boxes.recorder import Decision
from tkbox_daemon.tasks import spawn
from tkbox_guest import protocol as P

WAIT = 30.0  # a safety net against hangs, never a timing assertion


class FakeGuest:
    """The guest end: every frame the host sends, decoded and queued; helpers to answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.frames: asyncio.Queue[P.Frame] = asyncio.Queue()  # requests
        self.stdin: list[P.Frame] = []  # STDIN and STDIN_EOF
        self.output_acks: dict[int, int] = {}  # exec id -> bytes acknowledged so far
        self.acked = asyncio.Condition()
        self._task = spawn(self._read(reader), name="fake-guest")

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = P.FrameDecoder(accept=P.HOST_TO_GUEST)
        while data := await reader.read(1 << 16):
            for frame in decoder.feed(data):
                if frame.type == P.OUTPUT_ACK:  # kept apart: credit comes whenever the host's reader takes output
                    ident, count = P.decode_output_ack(frame.payload)
                    async with self.acked:
                        self.output_acks[ident] = self.output_acks.get(ident, 0) + count
                        self.acked.notify_all()
                elif frame.type in (P.STDIN, P.STDIN_EOF):
                    self.stdin.append(frame)
                else:
                    self.frames.put_nowait(frame)

    async def acked_at_least(self, ident: int, count: int) -> int:
        async with self.acked:
            await asyncio.wait_for(self.acked.wait_for(lambda: self.output_acks.get(ident, 0) >= count), WAIT)
            return self.output_acks[ident]

    async def next_request(self, op: str) -> dict[str, Any]:
        frame = await asyncio.wait_for(self.frames.get(), WAIT)
        assert frame.type == P.REQUEST, frame
        body = P.validate_request(P.loads_strict(frame.payload))
        assert body["op"] == op, body
        return body

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    def respond(self, ident: int, **fields: Any) -> None:
        self.write(P.encode_json_frame(P.RESPONSE, {"id": ident, "ok": True, **fields}))

    def output(self, ident: int, data: bytes, kind: int = P.STDOUT) -> None:
        for start in range(0, len(data), P.MAX_OUTPUT_CHUNK):
            self.write(P.encode_id_frame(kind, ident, data[start:start + P.MAX_OUTPUT_CHUNK]))

    def exit(self, ident: int, code: int = 0) -> None:
        self.write(P.encode_json_frame(P.EXIT, {"id": ident, "exit_code": code, "signal": None, "timed_out": False}))

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        self.writer.close()


@dataclass
class Linked:
    link: GuestLink
    guest: FakeGuest
    failures: list[str] = field(default_factory=list)
    failed: asyncio.Event = field(default_factory=asyncio.Event)

    async def failure(self) -> str:
        await asyncio.wait_for(self.failed.wait(), WAIT)
        return self.failures[0]

    async def ping(self) -> None:
        """One round trip: everything the guest wrote before it has been read by the host."""
        task = spawn(self.link.request("ping"), name="test-ping")
        request = await self.guest.next_request("ping")
        self.guest.respond(request["id"])
        assert (await asyncio.wait_for(task, WAIT))["ok"] is True


@contextlib.asynccontextmanager
async def linked(**options: Any) -> AsyncIterator[Linked]:
    host_end, guest_end = socket.socketpair()
    reader, writer = await asyncio.open_unix_connection(sock=host_end)
    guest_reader, guest_writer = await asyncio.open_unix_connection(sock=guest_end)
    holder: Linked | None = None

    def on_failure(reason: str) -> None:
        assert holder is not None
        holder.failures.append(reason)
        holder.failed.set()

    holder = Linked(GuestLink(reader, writer, on_failure=on_failure, **options), FakeGuest(guest_reader, guest_writer))
    try:
        yield holder
    finally:
        await holder.link.close()
        await holder.guest.close()


async def start_exec(pair: Linked, argv: tuple[str, ...] = ("sh",)):
    """An exec the fake guest says has started; returns the host's handle."""
    task = spawn(pair.link.exec(list(argv), "/", {}, 0), name="test-exec")
    request = await pair.guest.next_request("exec")
    pair.guest.respond(request["id"], pid=4242)
    return await asyncio.wait_for(task, WAIT)


class StubBox:
    """Just enough of a box for one ExecSession: an allowing decision, a guest exec on the test's link, and a
    record of what the session told the box (events, completions, a failure, the held state)."""

    id = "box-test"

    class settings:  # noqa: N801 - stands in for BoxSettings
        @staticmethod
        def limit(key: str) -> int:
            return 60

    def __init__(self, link: GuestLink) -> None:
        self.link = link
        self.state = "running"
        self.state_dir = Path(os.environ["XDG_STATE_HOME"]) / "stub-box"  # the test's own (conftest isolates it)
        self.exec_history = ExecHistory(self.state_dir / "execs")
        self.events: list[str] = []
        self.event_data: list[tuple[str, dict[str, Any]]] = []
        self.completions: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self.failed = asyncio.Event()
        self.not_held = asyncio.Event()
        self.not_held.set()

    async def decide_exec(self, args: dict[str, Any]) -> Decision:
        return Decision("allow", "allow", "dec-1", ("TEST",), "allowed by the test")

    async def start_guest_exec(self, session: Any, timeout_seconds: int, *, start_deadline: float) -> Any:
        handle = await self.link.exec(list(session.request.argv), session.request.cwd, {}, timeout_seconds * 1000,
                                      timeout=start_deadline)
        assert (await handle.started)["ok"] is True
        return handle

    def emit(self, kind: str, data: dict[str, Any] | None = None) -> None:
        self.events.append(kind)
        self.event_data.append((kind, data or {}))

    def complete_exec_soon(self, session: Any, **fields: Any) -> None:
        self.completions.append(fields)

    def exec_done(self, session: Any) -> None:
        pass

    async def fail(self, reason: str) -> None:
        self.failures.append(reason)
        self.events.append(f"failed: {reason}")
        self.failed.set()

    async def wait_until_not_held(self) -> None:
        await self.not_held.wait()
