"""A fake daemon API for the CLI's approvals tests: an aiohttp app on a Unix socket, served from a thread of its
own, that speaks the approvals part of the contract in ``daemon/wire.py`` (list, answer, forget, the event stream,
the exec WebSocket's ``held``/``approved``/``denied``) and records what it was asked.

It stands in for the daemon behind the API only: the CLI under test is the real one, in process or as the real
``tkbox`` console script.  An exec of ``sudo …`` is an ``ask`` (held until answered, withdrawn when its client goes
away); any other exec is allowed and prints ``ran: COMMAND``.  The real daemon is exercised in
``e2e/test_approvals_cli_e2e.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from tkbox_daemon.wire import ApprovalInfo, BoxInfo, Event, RememberedRule, error_body

ME = f"uid {os.getuid()} ({pwd.getpwuid(os.getuid()).pw_name})"
ASK = {"decision": "ask", "verdict": "ask", "rule_ids": ["TK-A001"],
       "reason": "privilege escalation (runs as another user, usually root)",
       "hint": "run as the current user", "decision_id": "dec-0001"}


def _time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _error(status: int, code: str, message: str, **extra: Any) -> web.Response:
    return web.json_response(error_body(code, message, **extra), status=status)


class FakeApprovalsDaemon:
    """The fake's state; every method whose name does not start with ``_`` is safe to call from the test's thread."""

    def __init__(self, runtime_dir: Path) -> None:
        self.runtime_dir = runtime_dir
        self.socket = runtime_dir / "api.sock"
        self.boxes = {"web": BoxInfo(id="b-web", name="web", state="running", image="host", workspace="/w",
                                     created_at="", expires_at="", run_id="run-1", recorded=True)}
        self.approvals: dict[str, ApprovalInfo] = {}
        self.remembered: dict[str, list[RememberedRule]] = {"b-web": []}
        self.events: list[Event] = []
        self.answers: list[tuple[str, dict[str, Any]]] = []  # (id as it arrived, body)
        self.refuse_next_record = False
        self.loop = asyncio.new_event_loop()
        self._changed: asyncio.Condition | None = None
        self._answered: dict[str, asyncio.Event] = {}

    # -- for the test ----------------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return {**os.environ, "TKBOX_DAEMON_RUNTIME_DIR": str(self.runtime_dir)}

    def call(self, function: Any, *args: Any) -> Any:
        """Run ``function(*args)`` on the fake's loop and return its result."""
        future: Future[Any] = Future()

        def run() -> None:
            try:
                future.set_result(function(*args))
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        return future.result(60)

    def open(self, command: str = "sudo true", box: str = "web", **fields: Any) -> ApprovalInfo:
        """A pending approval, as an exec's ``ask`` would open it (``fields`` override any of its fields)."""
        return self.call(self._open, command, box, "/workspace", False, fields)

    def expire(self, approval_id: str) -> ApprovalInfo:
        return self.call(self._settle, approval_id, "expired", "", "nobody answered within 120 s")

    def emit(self, kind: str, box_id: str, data: dict[str, Any]) -> None:
        self.call(self._emit, kind, box_id, data)

    # -- on the fake's loop ----------------------------------------------------------------------------------------

    def _open(self, command: str, box: str, cwd: str, tty: bool, fields: dict[str, Any]) -> ApprovalInfo:
        now = datetime.now(UTC)
        info = self.boxes[box]
        approval = ApprovalInfo(id=f"apr-{secrets.token_hex(8)}", box_id=info.id, box_name=info.name, kind="exec",
                                state="pending", asked={"command": command, "cwd": cwd, "tty": tty},
                                program=command.split()[0], decision_id=ASK["decision_id"],
                                rule_ids=tuple(ASK["rule_ids"]), reason=ASK["reason"], hint=ASK["hint"],
                                created_at=_time(now), expires_at=_time(now + timedelta(seconds=120)),
                                context={"exec_id": len(self.approvals) + 1})
        approval = replace(approval, **fields)
        self.approvals[approval.id] = approval
        self._answered[approval.id] = asyncio.Event()
        self._emit("approval.pending", info.id, {"approval": approval.to_json()})
        return approval

    def _settle(self, approval_id: str, state: str, by: str, reason: str, remember: bool = False) -> ApprovalInfo:
        approval = replace(self.approvals[approval_id], state=state, answered_by=by, answer_reason=reason,
                           answered_at=_time(datetime.now(UTC)), remember=remember)
        self.approvals[approval_id] = approval
        kind = "approval.expired" if state == "expired" else "approval.answered"
        self._emit(kind, approval.box_id, {"approval": approval.to_json()})
        self._answered[approval_id].set()
        return approval

    def _emit(self, kind: str, box_id: str, data: dict[str, Any]) -> None:
        self.events.append(Event(len(self.events) + 1, _time(datetime.now(UTC)), box_id, kind, data))
        assert self._changed is not None
        self.loop.create_task(self._notify())  # noqa: TID251 - the fake's own loop, which outlives the task

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    def _box(self, ref: str) -> BoxInfo | None:
        for info in self.boxes.values():
            if ref in (info.id, info.name):
                return replace(info, remembered=[rule.to_json() for rule in self.remembered[info.id]],
                               approvals_pending=sum(1 for a in self.approvals.values()
                                                     if a.box_id == info.id and a.pending))
        return None

    # -- routes ----------------------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/health", self._health)
        app.router.add_get("/v1/boxes", self._list_boxes)
        app.router.add_get("/v1/boxes/{box}", self._get_box)
        app.router.add_get("/v1/boxes/{box}/exec", self._exec)
        app.router.add_delete("/v1/boxes/{box}/remembered/{rule}", self._forget)
        app.router.add_get("/v1/approvals", self._list)
        app.router.add_get("/v1/approvals/{id}", self._get)
        app.router.add_post("/v1/approvals/{id}", self._answer)
        app.router.add_get("/v1/events", self._events)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"last_seq": len(self.events)})

    async def _list_boxes(self, request: web.Request) -> web.Response:
        return web.json_response({"boxes": [self._box(name).to_json() for name in self.boxes]})  # type: ignore[union-attr]

    async def _get_box(self, request: web.Request) -> web.Response:
        info = self._box(request.match_info["box"])
        if info is None:
            return _error(404, "not_found", f"box {request.match_info['box']!r} not found")
        return web.json_response(info.to_json())

    async def _list(self, request: web.Request) -> web.Response:
        listed = list(self.approvals.values())
        if "box" in request.query:
            info = self._box(request.query["box"])
            if info is None:
                return _error(404, "not_found", f"box {request.query['box']!r} not found")
            listed = [a for a in listed if a.box_id == info.id]
        if request.query.get("state") == "pending":
            listed = [a for a in listed if a.pending]
        return web.json_response({"approvals": [a.to_json() for a in listed]})

    def _not_found(self, approval_id: str) -> web.Response:
        return _error(404, "not_found", f"approval {approval_id!r} not found", hint="list them with: tkbox approvals")

    async def _get(self, request: web.Request) -> web.Response:
        approval = self.approvals.get(request.match_info["id"])
        return self._not_found(request.match_info["id"]) if approval is None else web.json_response(approval.to_json())

    async def _answer(self, request: web.Request) -> web.Response:
        approval_id = request.match_info["id"]
        body = await request.json()
        self.answers.append((approval_id, body))
        approval = self.approvals.get(approval_id)
        if approval is None:
            return self._not_found(approval_id)
        if body.get("answer") not in ("approve", "reject") or (body.get("remember") and body["answer"] != "approve"):
            return _error(400, "invalid_request", "answer is approve or reject; remember only with approve")
        if approval.state == "expired":
            return _error(409, "approval_expired", f"approval {approval_id} expired at {approval.expires_at}; "
                                                   "nothing changed")
        if not approval.pending:
            return _error(409, "approval_answered", f"approval {approval_id} was already {approval.state} by "
                                                    f"{approval.answered_by} at {approval.answered_at}; nothing "
                                                    "changed")
        if self.refuse_next_record:
            self.refuse_next_record = False
            self._settle(approval_id, "rejected", "", "the signer refused the answer's record")
            return _error(503, "record_refused", "the signer refused to record the answer: the action was refused "
                                                 "and the box stopped")
        state = "approved" if body["answer"] == "approve" else "rejected"
        answered = self._settle(approval_id, state, ME, body.get("reason", ""), bool(body.get("remember")))
        if body.get("remember"):
            rule = RememberedRule(f"rem-{secrets.token_hex(6)}", answered.program, answered.rule_ids[0],
                                  answered.id, ME, answered.answered_at)
            self.remembered[answered.box_id].append(rule)
            self._emit("approval.rule_added", answered.box_id, {"rule": rule.to_json()})
        return web.json_response(answered.to_json())

    async def _forget(self, request: web.Request) -> web.Response:
        info = self._box(request.match_info["box"])
        if info is None:
            return _error(404, "not_found", f"box {request.match_info['box']!r} not found")
        rules = self.remembered[info.id]
        for rule in rules:
            if rule.id == request.match_info["rule"]:
                rules.remove(rule)
                return web.json_response({"removed": rule.to_json()})
        return _error(404, "not_found", f"no remembered rule {request.match_info['rule']!r}")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        after = int(request.query.get("after", "0"))
        box = self._box(request.query["box"]) if "box" in request.query else None
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        assert self._changed is not None
        with contextlib.suppress(ConnectionResetError):
            while True:
                for event in self.events[after:]:
                    after = event.seq
                    if box is None or event.box_id == box.id:
                        await response.write(f"id: {event.seq}\ndata: {json.dumps(event.to_json())}\n\n".encode())
                async with self._changed:
                    await self._changed.wait_for(lambda: len(self.events) > after)  # noqa: B023
        return response

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        info = self._box(request.match_info["box"])
        if info is None:
            raise web.HTTPNotFound()
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        start = await socket.receive_json()
        command = " ".join(start["argv"])
        if start["argv"][0] == "sudo":
            await socket.send_json({"type": "decision", **ASK, "command": command})
            approval = self._open(command, info.name, start.get("cwd", "/workspace"), start.get("tty", False), {})
            await socket.send_json({"type": "held", "approval_id": approval.id, "expires_at": approval.expires_at})
            if not await self._wait_for_answer(socket, approval.id):
                return socket
            approval = self.approvals[approval.id]
            if approval.state != "approved":
                how = f"{approval.state} by {approval.answered_by}" if approval.answered_by else approval.state
                reason = f"{how}: {approval.answer_reason}" if approval.answer_reason else how
                await socket.send_json({"type": "denied", "exit_code": 126, "reason": reason,
                                        "approval_id": approval.id, "state": approval.state})
                await socket.close()
                return socket
            await socket.send_json({"type": "approved", "approval_id": approval.id, "by": approval.answered_by})
        else:
            await socket.send_json({"type": "decision", "decision": "allow", "verdict": "allow", "rule_ids": [],
                                    "reason": "no rule matched", "decision_id": "dec-0002", "command": command})
        await socket.send_json({"type": "started", "stdin_window": 1 << 20})
        await socket.send_bytes(b"\x01ran: " + command.encode() + b"\n")
        last = start["argv"][-1]
        await socket.send_json({"type": "exit", "exit_code": int(last) if last.isdigit() else 0, "signal": None,
                                "timed_out": False, "reported_by": "guest"})
        await socket.close()
        return socket

    async def _wait_for_answer(self, socket: web.WebSocketResponse, approval_id: str) -> bool:
        """Wait for an answer, or for the client to go away (which withdraws the approval: False)."""

        async def client_gone() -> None:
            async for message in socket:
                if message.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                    return

        answer = self._answered[approval_id]
        waits = {self.loop.create_task(answer.wait()), self.loop.create_task(client_gone())}  # noqa: TID251
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when the handler is cancelled because its client went away
            for task in waits:
                task.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
            if not answer.is_set():
                self._settle(approval_id, "withdrawn", "", "the exec's client went away")
        return answer.is_set()

    # -- the thread ------------------------------------------------------------------------------------------------

    def _serve(self, ready: Future[web.AppRunner]) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> web.AppRunner:
            self._changed = asyncio.Condition()
            runner = web.AppRunner(self.app(), handler_cancellation=True, shutdown_timeout=5)
            await runner.setup()
            await web.UnixSite(runner, str(self.socket)).start()
            return runner

        try:
            ready.set_result(self.loop.run_until_complete(start()))
        except BaseException as exc:
            ready.set_exception(exc)
            return
        self.loop.run_forever()


@contextlib.contextmanager
def fake_daemon(runtime_dir: Path) -> Iterator[FakeApprovalsDaemon]:
    """The fake, serving on ``runtime_dir/api.sock`` from a thread until the block ends."""
    runtime_dir.mkdir(parents=True, exist_ok=True)
    fake = FakeApprovalsDaemon(runtime_dir)
    ready: Future[web.AppRunner] = Future()
    thread = threading.Thread(target=fake._serve, args=(ready,), name="fake-daemon", daemon=True)
    thread.start()
    runner = ready.result(60)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), fake.loop).result(60)
        fake.loop.call_soon_threadsafe(fake.loop.stop)
        thread.join(60)
        fake.loop.close()
