"""One exec over the daemon's WebSocket (``/v1/boxes/BOX/exec``), as the daemon's ``routes_exec`` frames it: with
asyncio (``ExecCall``, the console's) or on a blocking socket driven by ``selectors`` (``BlockingExecCall``, the
CLI's, which starts without importing asyncio).

The client sends JSON text messages (``start``, then ``stdin_eof``, ``signal``, ``resize``) and stdin as binary
messages within the credit the daemon grants (``started``'s ``stdin_window``, then each ``stdin_credit``).  The
daemon sends JSON text messages (``decision``, ``held``, ``approved``, ``started``, ``denied``, ``exit``,
``error``, …) and output as binary messages whose first byte is the stream (1 stdout, 2 stderr).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from tkbox_daemon.limits import API_MESSAGE

from .client_errors import DaemonError
from .client_http import request_target
from .client_loopless import finish
from .client_ws_upgrade import WebSocketRefused

if TYPE_CHECKING:
    from .client import DaemonClient
    from .client_ws import WebSocketChannel
    from .client_ws_blocking import BlockingWebSocket

STDIN_CHUNK = 64 * 1024


class ExecCall:
    """One exec over the daemon's WebSocket: send the start, stream stdin, read decision, output and exit."""

    def __init__(self, client: DaemonClient, ref: str) -> None:
        import asyncio

        self.client = client
        self.ref = ref
        self.ws: WebSocketChannel | None = None
        self._credit = 0
        self._credit_arrived = asyncio.Event()

    async def start(self, argv: list[str], *, cwd: str = "/workspace", env: dict[str, str] | None = None,
                    stdin: bytes | None = None, stream_stdin: bool = False, timeout: int | None = None,
                    tty: bool = False, rows: int | None = None, cols: int | None = None) -> None:
        """Open the WebSocket and send the start message.

        ``tty=True`` runs the command on a pseudo-terminal of ``rows`` x ``cols`` (both or neither; the box's
        default 24 x 80 without them): its output arrives as stdout only, stdin (``stream_stdin``) is what is typed,
        and ``resize`` follows the operator's window.
        """
        from .client_ws import WebSocketChannel

        message = start_message(argv, cwd=cwd, env=env, stdin=stdin, stream_stdin=stream_stdin, timeout=timeout,
                                tty=tty, rows=rows, cols=cols)
        try:
            self.ws = await WebSocketChannel.open(self.client.socket_path, exec_target(self.ref),
                                                  max_message=API_MESSAGE.default)
        except WebSocketRefused as refused:
            if refused.status == 404:  # the handshake carries no body: the daemon's words come from asking for the box
                await self.client.box(self.ref)
            raise DaemonError("exec_failed", f"the daemon refused the exec ({refused.status})",
                              refused.status) from None
        await self._send_json(message)

    async def _send_json(self, message: dict[str, Any]) -> None:
        assert self.ws is not None
        await self.ws.send_text(json.dumps(message))

    async def send_stdin(self, data: bytes) -> None:
        """Send stdin within the daemon's credit (granted at start, returned as the process takes it)."""
        assert self.ws is not None
        view = memoryview(data)
        while view:
            while self._credit <= 0:
                self._credit_arrived.clear()
                await self._credit_arrived.wait()
            size = min(len(view), self._credit, STDIN_CHUNK)
            self._credit -= size
            await self.ws.send_bytes(bytes(view[:size]))
            view = view[size:]

    def _grant(self, count: int) -> None:
        self._credit += count
        self._credit_arrived.set()

    async def close_stdin(self) -> None:
        await self._send_json({"type": "stdin_eof"})

    async def signal(self, name: str) -> None:
        await self._send_json({"type": "signal", "signal": name})

    async def resize(self, rows: int, cols: int) -> None:
        """Tell a tty exec its terminal's new size (1..1000 each; the daemon ignores anything else)."""
        await self._send_json({"type": "resize", "rows": rows, "cols": cols})

    async def messages(self) -> AsyncIterator[dict[str, Any] | tuple[int, bytes]]:
        """The daemon's messages as they come: output frames as ``(stream, bytes)``, every other message as its JSON
        object (``decision``, ``held``, ``approved``, ``started``, ``denied``, ``exit``, ``error``, and any type a
        newer daemon adds), except the stdin credit, which is kept here.  Ends when the daemon closes."""
        assert self.ws is not None
        while (message := await self.ws.receive()) is not None:
            decoded = daemon_message(message)
            granted = credit_in(decoded)
            if granted is not None:
                self._grant(granted)
            if not is_credit_only(decoded):
                yield decoded

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


class BlockingExecCall:
    """One exec over the daemon's WebSocket without an event loop: ``start``, then wait on ``fileno()`` (or not,
    while ``ready``) and ``receive_ready`` the messages as ``messages`` gives them; send stdin only within
    ``credit`` (the daemon's grant: ``started``'s ``stdin_window``, then each ``stdin_credit``)."""

    def __init__(self, client: DaemonClient, ref: str) -> None:
        self.client = client
        self.ref = ref
        self.ws: BlockingWebSocket | None = None
        self.credit = 0

    def start(self, argv: list[str], *, cwd: str = "/workspace", env: dict[str, str] | None = None,
              stdin: bytes | None = None, stream_stdin: bool = False, timeout: int | None = None,
              tty: bool = False, rows: int | None = None, cols: int | None = None) -> None:
        """Open the WebSocket and send the start message (as ``ExecCall.start``)."""
        from .client_ws_blocking import BlockingWebSocket

        message = start_message(argv, cwd=cwd, env=env, stdin=stdin, stream_stdin=stream_stdin, timeout=timeout,
                                tty=tty, rows=rows, cols=cols)
        try:
            self.ws = BlockingWebSocket.open(self.client.socket_path, exec_target(self.ref),
                                             max_message=API_MESSAGE.default)
        except WebSocketRefused as refused:
            if refused.status == 404:  # the daemon's words come from asking for the box (no loop: one step)
                finish(self.client.box(self.ref))
            raise DaemonError("exec_failed", f"the daemon refused the exec ({refused.status})",
                              refused.status) from None
        self._send_json(message)

    def fileno(self) -> int:
        assert self.ws is not None
        return self.ws.fileno()

    @property
    def ready(self) -> bool:
        """``receive_ready`` has something without waiting for the socket."""
        return self.ws is not None and self.ws.ready

    def receive_ready(self) -> list[dict[str, Any] | tuple[int, bytes]] | None:
        """The messages one read completes (as ``ExecCall.messages`` gives them), or None once the daemon closed."""
        assert self.ws is not None
        messages = self.ws.receive_ready()
        if messages is None:
            return None
        out: list[dict[str, Any] | tuple[int, bytes]] = []
        for message in messages:
            decoded = daemon_message(message)
            self.credit += credit_in(decoded) or 0
            if not is_credit_only(decoded):
                out.append(decoded)
        return out

    def _send_json(self, message: dict[str, Any]) -> None:
        assert self.ws is not None
        self.ws.send_text(json.dumps(message))

    def send_stdin(self, data: bytes) -> None:
        """Send stdin the daemon has granted credit for (``len(data) <= credit``: read no more than that)."""
        assert self.ws is not None and len(data) <= self.credit
        self.credit -= len(data)
        self.ws.send_bytes(data)

    def close_stdin(self) -> None:
        self._send_json({"type": "stdin_eof"})

    def signal(self, name: str) -> None:
        self._send_json({"type": "signal", "signal": name})

    def resize(self, rows: int, cols: int) -> None:
        """Tell a tty exec its terminal's new size (1..1000 each; the daemon ignores anything else)."""
        self._send_json({"type": "resize", "rows": rows, "cols": cols})

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()


def start_message(argv: list[str], *, cwd: str, env: dict[str, str] | None, stdin: bytes | None, stream_stdin: bool,
                  timeout: int | None, tty: bool, rows: int | None, cols: int | None) -> dict[str, Any]:
    """The ``start`` message. ``tty=True`` runs the command on a pseudo-terminal of ``rows`` x ``cols`` (both or
    neither; the box's default 24 x 80 without them)."""
    if (rows is None) != (cols is None) or (rows is not None and not tty):
        raise ValueError("rows and cols come together, and only with tty=True")
    message: dict[str, Any] = {"type": "start", "argv": argv, "cwd": cwd, "env": env or {},
                               "stdin": "stream" if stream_stdin else ("upfront" if stdin is not None else "none")}
    if stdin is not None:
        message["stdin_data"] = base64.b64encode(stdin).decode()
    if timeout:
        message["timeout"] = timeout
    if tty:
        message["tty"] = True
        if rows is not None:
            message.update(rows=rows, cols=cols)
    return message


def exec_target(ref: str) -> str:
    from .client import box_path

    return request_target(box_path(ref) + "/exec")


def output_frame(message: bytes) -> tuple[int, bytes]:
    """An output message: ``(stream, bytes)``; one without its stream byte is ``bad_reply``."""
    if not message:
        raise DaemonError("bad_reply", "the daemon sent an output frame without its stream byte")
    return message[0], message[1:]


def daemon_message(message: str | bytes) -> dict[str, Any] | tuple[int, bytes]:
    """One message of the daemon as ``messages`` gives it: output as ``(stream, bytes)``, anything else as its JSON
    object."""
    return output_frame(message) if isinstance(message, bytes) else exec_message(message)


def credit_in(message: dict[str, Any] | tuple[int, bytes]) -> int | None:
    """The stdin credit a message grants (``stdin_credit``'s ``bytes``, ``started``'s ``stdin_window``), or None."""
    if isinstance(message, tuple):
        return None
    if message.get("type") == "stdin_credit":
        return _count(message.get("bytes"))
    if message.get("type") == "started":
        return _count(message.get("stdin_window", 0))
    return None


def is_credit_only(message: dict[str, Any] | tuple[int, bytes]) -> bool:
    """A ``stdin_credit`` message: the exec call keeps its grant; the caller never sees it."""
    return isinstance(message, dict) and message.get("type") == "stdin_credit"


def exec_message(text: str) -> dict[str, Any]:
    """One of the daemon's JSON messages on an exec's WebSocket: an object with a ``type``, or DaemonError."""
    try:
        decoded = json.loads(text)
    except ValueError:
        raise DaemonError("bad_reply", "the daemon sent an exec message that is not JSON") from None
    if not isinstance(decoded, dict):
        raise DaemonError("bad_reply", "the daemon sent an exec message that is not a JSON object")
    return decoded


def _count(value: Any) -> int:
    """A credit the daemon grants: a count of bytes (anything else grants nothing)."""
    return value if type(value) is int and value > 0 else 0
