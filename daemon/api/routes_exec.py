"""``GET /v1/boxes/{box}/exec`` (WebSocket): run one command through the command door.

Client → daemon: a first text message ``{"type":"start", "argv", "cwd", "env", "stdin": "none"|"upfront"|"stream",
"stdin_data": <base64, with upfront>, "timeout": <seconds>, "tty": <bool>, "rows": <1..1000>, "cols": <1..1000>}``
(``tty``: run on a pseudo-terminal, ``rows``/``cols`` its size, only with ``tty`` and only together); then binary
messages of stdin (stream mode), ``{"type":"stdin_eof"}``, ``{"type":"signal","signal":"INT"|"TERM"|"KILL"|"HUP"}``
and, for a tty exec, ``{"type":"resize","rows","cols"}``.
Daemon → client: ``{"type":"decision", …}``; then either ``{"type":"denied", "exit_code":126, …}`` or
``{"type":"started", "stdin_window": N}``, binary output frames (first byte 1 = stdout, 2 = stderr; a tty exec
has only stdout, the terminal's output),
``{"type":"stdin_credit", "bytes": n}`` as stdin reaches the process, and ``{"type":"exit", …}``.  A command that
never ran gets ``{"type":"error", "code", "rule", "message", "exit_code", "reported_by"}``: ``exec_refused`` (126)
when the door refused it or the box could not take it, ``program_not_found`` (127) or ``cannot_execute`` (126)
when the guest could not start its program (``reported_by`` ``guest``: its word).

An ``ask`` (docs/approvals.md): after its decision, ``{"type":"held", "approval_id", "expires_at"}`` while a person
is asked; then ``{"type":"approved", "approval_id", "by"}`` and ``started`` as above, or ``denied`` with
``approval_id`` and ``state`` (rejected, expired, withdrawn, lost) and the reason.  An ask a remembered rule
approves gets ``approved`` without ``held``.  While held, a client that goes away or sends a signal withdraws it.

Stdin is credit-based: the client may have at most ``stdin_window`` bytes sent and not yet credited back.  So the
daemon never has to stop reading the socket to hold stdin back, and a signal, ``stdin_eof`` or the client going
away is always seen at once — even when the process never reads its stdin.  A client that goes away stops its
process.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
from typing import Any

from aiohttp import WSMsgType, web

from .. import strictjson
from ..boxes.box import BoxOperationError
from ..boxes.exec_session import ExecDenied, ExecStart
from ..boxes.guest_link import GuestFailure
from ..doors.commands import ExecRefused
from ..tasks import spawn
from ..wire import ApprovalInfo
from .errors import ApiError
from .keys import MANAGER

routes = web.RouteTableDef()
MAX_CONTROL_BYTES = 2 << 20
STDIN_WINDOW = 1 << 20  # stdin bytes a client may have in flight before the daemon credits them back
SIGNALS = {"INT": 2, "TERM": 15, "KILL": 9, "HUP": 1}
MAX_WINSIZE = 1000


def _winsize(value: Any) -> int | None:
    """A terminal dimension in 1..MAX_WINSIZE, or None for anything else."""
    return value if type(value) is int and 1 <= value <= MAX_WINSIZE else None


def parse_start(text: str) -> ExecStart:
    try:
        message = strictjson.loads_object(text, max_bytes=MAX_CONTROL_BYTES)
    except strictjson.StrictJSONError as exc:
        raise ApiError(400, "invalid_request", f"the start message is not strict JSON: {exc}") from None
    allowed = {"type", "argv", "cwd", "env", "stdin", "stdin_data", "timeout", "tty", "rows", "cols"}
    if message.get("type") != "start" or set(message) - allowed:
        raise ApiError(400, "invalid_request", f"the first message is {{type: start}} with only {sorted(allowed)}")
    argv = message.get("argv")
    env = message.get("env", {})
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ApiError(400, "invalid_request", "argv must be a list of strings")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ApiError(400, "invalid_request", "env must map strings to strings")
    mode = message.get("stdin", "none")
    if mode not in ("none", "upfront", "stream"):
        raise ApiError(400, "invalid_request", "stdin is none, upfront or stream")
    data = None
    if mode == "upfront":
        try:
            data = base64.b64decode(message.get("stdin_data", ""), validate=True)
        except (binascii.Error, TypeError):
            raise ApiError(400, "invalid_request", "stdin_data must be base64") from None
    timeout = message.get("timeout")
    if timeout is not None and (type(timeout) is not int or timeout <= 0):
        raise ApiError(400, "invalid_request", "timeout is a positive number of seconds")
    cwd = message.get("cwd", "/workspace")
    if not isinstance(cwd, str):
        raise ApiError(400, "invalid_request", "cwd must be a string")
    tty = message.get("tty", False)
    if type(tty) is not bool:
        raise ApiError(400, "invalid_request", "tty must be a boolean")
    sized = [key for key in ("rows", "cols") if key in message]
    if sized and (not tty or len(sized) != 2):
        raise ApiError(400, "invalid_request", "rows and cols come together, and only with tty: true")
    rows, cols = (_winsize(message.get("rows")), _winsize(message.get("cols"))) if sized else (None, None)
    if sized and (rows is None or cols is None):
        raise ApiError(400, "invalid_request", f"rows and cols are integers in 1..{MAX_WINSIZE}")
    return ExecStart(argv=tuple(argv), cwd=cwd, env=env, stdin=data, stdin_streamed=mode == "stream",
                     timeout=timeout, tty=tty, rows=rows, cols=cols)


@routes.get("/v1/boxes/{box}/exec")
async def exec_websocket(request: web.Request) -> web.StreamResponse:
    box = request.app[MANAGER].get(request.match_info["box"])
    socket = web.WebSocketResponse(max_msg_size=MAX_CONTROL_BYTES, heartbeat=30)
    await socket.prepare(request)
    try:
        first = await socket.receive(timeout=60)
        if first.type != WSMsgType.TEXT:
            raise ApiError(400, "invalid_request", "the first message must be the start message (text)")
        start = parse_start(first.data)
        session = box.exec_session(start)
        held = HeldClient(socket, session)
        try:
            decision = await session.start(on_held=held.told)
        except ExecDenied as denied:
            await held.stop_watching()
            if not held.decision_sent:
                await socket.send_json({"type": "decision", **denied.decision})
            await socket.send_json({"type": "denied", "exit_code": 126, **denied.decision})
            return socket
        await held.stop_watching()
        if not held.decision_sent:
            await socket.send_json({"type": "decision", **decision})
        if session.approval is not None:
            await socket.send_json({"type": "approved", "approval_id": session.approval.id,
                                    "by": session.approval.answered_by})
        await socket.send_json({"type": "started", "stdin_window": STDIN_WINDOW})
        pump = spawn(_client_to_session(socket, session), name="exec-stdin")
        try:
            async for item in session.outputs():
                if isinstance(item, dict):
                    await socket.send_json({"type": "exit", **item})
                else:
                    stream, chunk = item
                    await socket.send_bytes(bytes([stream]) + chunk)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            await session.abort()
    except ApiError as error:
        with contextlib.suppress(ConnectionResetError):
            await socket.send_json({"type": "error", "code": error.code, "message": error.message})
    except ExecRefused as refused:
        with contextlib.suppress(ConnectionResetError):
            await socket.send_json({"type": "error", "code": refused.code, "rule": refused.rule,
                                    "message": str(refused), "exit_code": refused.exit_code,
                                    "reported_by": refused.reported_by})
    except BoxOperationError as error:
        with contextlib.suppress(ConnectionResetError):
            await socket.send_json({"type": "error", "code": error.code, "message": str(error)})
    except GuestFailure as error:  # the box's guest failed mid-request: the box is failing, say why
        with contextlib.suppress(ConnectionResetError):
            await socket.send_json({"type": "error", "code": "guest_failed", "message": str(error)})
    except (TimeoutError, ConnectionResetError):
        pass
    finally:
        await socket.close()
    return socket


class HeldClient:
    """The client of a held exec: told the decision and ``held``, then watched until the answer, so that its going
    away (or a signal: it wants the command stopped) withdraws the approval rather than leaving it to expire."""

    def __init__(self, socket: web.WebSocketResponse, session: Any) -> None:
        self.socket = socket
        self.session = session
        self.decision_sent = False
        self._watcher: asyncio.Task[Any] | None = None

    async def told(self, decision: dict[str, Any], approval: ApprovalInfo) -> None:
        await self.socket.send_json({"type": "decision", **decision})
        self.decision_sent = True
        await self.socket.send_json({"type": "held", "approval_id": approval.id, "expires_at": approval.expires_at})
        self._watcher = spawn(self._watch(), name=f"exec-held-{approval.id}")

    async def _watch(self) -> None:
        while True:
            message = await self.socket.receive()
            if message.type == WSMsgType.TEXT:
                with contextlib.suppress(ValueError, AttributeError):
                    control = json.loads(message.data)
                    if control.get("type") == "signal" and control.get("signal") in SIGNALS:
                        await self.session.withdraw(f"its client sent {control['signal']} while it was held")
                        return
            elif message.type not in (WSMsgType.BINARY, WSMsgType.PING, WSMsgType.PONG):
                await self.session.withdraw("its client went away while it was held")
                return

    async def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watcher


async def _client_to_session(socket: web.WebSocketResponse, session: Any) -> None:
    """Read the client without ever blocking on the process: stdin within its credit, signals, its going away."""
    window = StdinCredit()
    pending: asyncio.Queue[bytes | None] = asyncio.Queue()
    forwarder = spawn(_forward_stdin(socket, session, pending, window), name="exec-stdin-forward")
    try:
        async for message in socket:
            if message.type == WSMsgType.BINARY:
                if len(message.data) > window.available:
                    await socket.send_json({"type": "error", "code": "stdin_window",
                                            "message": "stdin sent beyond the credit the daemon gave"})
                    break
                window.available -= len(message.data)
                pending.put_nowait(message.data)
            elif message.type == WSMsgType.TEXT:
                try:
                    control = json.loads(message.data)
                except ValueError:
                    continue
                if control.get("type") == "stdin_eof":
                    pending.put_nowait(None)
                elif control.get("type") == "signal" and control.get("signal") in SIGNALS:
                    await session.signal(SIGNALS[control["signal"]])
                elif control.get("type") == "resize":
                    rows, cols = _winsize(control.get("rows")), _winsize(control.get("cols"))
                    if rows is not None and cols is not None:
                        await session.resize(rows, cols)
            else:
                break
    finally:
        forwarder.cancel()
        await session.abort()


class StdinCredit:
    """Stdin bytes the client may still send; what reaches the process is credited back."""

    def __init__(self) -> None:
        self.available = STDIN_WINDOW


async def _forward_stdin(socket: web.WebSocketResponse, session: Any, pending: asyncio.Queue[bytes | None],
                         window: StdinCredit) -> None:
    while (chunk := await pending.get()) is not None:
        await session.write_stdin(chunk)
        window.available += len(chunk)
        with contextlib.suppress(ConnectionResetError):
            await socket.send_json({"type": "stdin_credit", "bytes": len(chunk)})
    await session.close_stdin()
