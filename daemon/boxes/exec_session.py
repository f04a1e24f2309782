"""One command through the command door: check, decide, run, stream, complete — and stop it if its client goes.

    check_request ─ refused ─▶ ExecRefused (400, names the rule)
    decide(Bash) ─ deny/ask/unreachable ─▶ ExecDenied (exit 126, rule ids, reason, hint); event exec.denied
    guest exec ─▶ exec.started ─▶ output … ─▶ EXIT ─▶ complete(exit status, streamed stdin digest) ─▶ exec.finished
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import strictjson
from ..doors.commands import ExecRequest, check_request, decision_args
from ..tasks import spawn
from .guest_link import GuestExec, GuestFailure

CLIENT_QUEUE_ITEMS = 256

if TYPE_CHECKING:
    from .box import Box


@dataclass(frozen=True)
class ExecStart:
    argv: tuple[str, ...]
    cwd: str = "/workspace"
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    stdin_streamed: bool = False
    timeout: int | None = None
    tty: bool = False  # on a pseudo-terminal of rows x cols (the guest's 24 x 80 when not given)
    rows: int | None = None
    cols: int | None = None


class ExecDenied(Exception):
    """The signer (or the lack of one) said no; ``decision`` is what the client is shown."""

    def __init__(self, decision: dict[str, Any]) -> None:
        super().__init__(decision.get("reason", "denied"))
        self.decision = decision


class ExecSession:
    def __init__(self, box: Box, start: ExecStart) -> None:
        self.box = box
        self.start_request = start
        self.request = ExecRequest(argv=start.argv, cwd=start.cwd, env=dict(start.env), stdin=start.stdin,
                                   stdin_streamed=start.stdin_streamed, tty=start.tty)
        self.decision_id: str | None = None
        self.command = ""
        self.guest: GuestExec | None = None
        self._stdin_hash = hashlib.sha256()
        self._stdin_bytes = 0
        self._finished = False
        self._aborted = False
        self._to_client: asyncio.Queue[tuple[int, bytes] | dict[str, Any]] = asyncio.Queue(CLIENT_QUEUE_ITEMS)
        self.done = asyncio.Event()

    async def start(self) -> dict[str, Any]:
        """Decide and start; returns the decision shown to the client.  Raises ExecDenied or an API error."""
        check_request(self.request)
        args = decision_args(self.request)
        self.command = args["command"]
        decision = await self.box.decide_exec(args)
        shown = {**decision.to_json(), "command": self.command}
        if not decision.allowed:
            self.box.emit("exec.denied", {"command": self.command, "rule_ids": list(decision.rule_ids),
                                          "reason": decision.reason, "verdict": decision.verdict})
            raise ExecDenied(shown)
        self.decision_id = decision.decision_id
        start = self.start_request
        timeout = start.timeout or self.box.settings.limit("exec_timeout")
        self.guest = await self.box.start_guest_exec(self, timeout)
        self.box.emit("exec.started", {"command": self.command, "decision_id": self.decision_id,
                                       "rule_ids": list(decision.rule_ids), "verdict": decision.verdict})
        spawn(self._pump(), name=f"exec-{self.box.id}-{self.guest.id}")
        if self.request.stdin is not None:
            await self.guest.send_stdin(self.request.stdin)
            await self.guest.close_stdin()
        elif not self.request.stdin_streamed:
            await self.guest.close_stdin()
        return shown

    async def write_stdin(self, data: bytes) -> None:
        if self.guest is None or not self.request.stdin_streamed or self._aborted:
            return
        self._stdin_hash.update(data)
        self._stdin_bytes += len(data)
        try:
            await self.guest.send_stdin(data)
        except GuestFailure:
            pass

    async def close_stdin(self) -> None:
        if self.guest is not None:
            try:
                await self.guest.close_stdin()
            except GuestFailure:
                pass

    async def signal(self, signum: int) -> None:
        if self.guest is not None and not self.guest.exited:
            try:
                await self.guest.signal(signum)
            except GuestFailure:
                pass

    async def resize(self, rows: int, cols: int) -> None:
        """Set a pty exec's window size (ignored for an exec without a pty, or one that has ended)."""
        if self.guest is not None and self.start_request.tty and not self.guest.exited and not self._aborted:
            try:
                await self.guest.resize(rows, cols)
            except GuestFailure:
                pass

    async def outputs(self) -> AsyncIterator[tuple[int, bytes] | dict[str, Any]]:
        """Output chunks for the client, then one exit dict (recorded before it is yielded)."""
        while True:
            item = await self._to_client.get()
            yield item
            if isinstance(item, dict):
                return

    async def _pump(self) -> None:
        """Drain the guest's output whether or not a client still listens, and record the completion."""
        assert self.guest is not None
        try:
            while True:
                item = await self.guest.outputs.get()
                if isinstance(item, GuestFailure):
                    exit_info = {"exit_code": None, "signal": None, "timed_out": False, "error": str(item)}
                    await self._finish("error", None, exit_info)
                    await self._deliver(exit_info)
                    return
                if isinstance(item, dict):
                    exit_code = item["exit_code"] if item["exit_code"] is not None else 128 + item["signal"]
                    exit_info = {"exit_code": exit_code, "signal": item["signal"], "timed_out": item["timed_out"]}
                    await self._finish("ok" if exit_code == 0 else "error", exit_code, exit_info)
                    await self._deliver(exit_info)
                    return
                await self._deliver(item)
        finally:
            self.done.set()
            self.box.exec_done(self)

    async def _deliver(self, item: tuple[int, bytes] | dict[str, Any]) -> None:
        # Once the client is gone only the exit is kept (the queue was drained, so it fits): it ends outputs().
        if not self._aborted or isinstance(item, dict):
            await self._to_client.put(item)

    async def _finish(self, status: str, exit_code: int | None, exit_info: dict[str, Any]) -> None:
        """Record the completion (in the background: the command has already ended, and the run will not close
        before the completion is answered) and tell the operator."""
        if self._finished:
            return
        self._finished = True
        stdin = None
        if self.request.stdin_streamed:
            stdin = {"sha256": "sha256:" + self._stdin_hash.hexdigest(), "size": self._stdin_bytes}
        digest = "sha256:" + hashlib.sha256(strictjson.canonical(
            {"tool": "Bash", "args": decision_args(self.request)})).hexdigest()
        self.box.complete_exec_soon(self, status=status, exit_code=exit_code, stdin=stdin, args_digest=digest)
        self.box.emit("exec.finished", {"command": self.command, "decision_id": self.decision_id, **exit_info,
                                        **({"stdin": stdin} if stdin else {})})

    async def abort(self) -> None:
        """The client is gone or done: stop the process if it still runs (process group, SIGKILL)."""
        self._aborted = True
        while not self._to_client.empty():
            self._to_client.get_nowait()  # unblock the pump; nobody reads these any more
        if self.guest is not None and not self.guest.exited:
            try:
                await asyncio.wait_for(self.guest.signal(9), 5)
            except (GuestFailure, TimeoutError):
                pass
