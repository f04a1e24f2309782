"""One exec over the daemon's WebSocket (``/v1/boxes/BOX/exec``), as the daemon's ``routes_exec`` frames it.

The client sends JSON text messages (``start``, then ``stdin_eof``, ``signal``, ``resize``) and stdin as binary
messages within the credit the daemon grants (``started``'s ``stdin_window``, then each ``stdin_credit``).  The
daemon sends JSON text messages (``decision``, ``held``, ``approved``, ``started``, ``denied``, ``exit``,
``error``, …) and output as binary messages whose first byte is the stream (1 stdout, 2 stderr).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from tkbox_daemon.limits import API_MESSAGE

from .client_errors import DaemonError
from .client_http import request_target
from .client_ws import WebSocketChannel, WebSocketRefused

if TYPE_CHECKING:
    from .client import DaemonClient

STDIN_CHUNK = 64 * 1024


class ExecCall:
    """One exec over the daemon's WebSocket: send the start, stream stdin, read decision, output and exit."""

    def __init__(self, client: DaemonClient, ref: str) -> None:
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
        from .client import box_path

        if (rows is None) != (cols is None) or (rows is not None and not tty):
            raise ValueError("rows and cols come together, and only with tty=True")
        try:
            self.ws = await WebSocketChannel.open(self.client.socket_path,
                                                  request_target(box_path(self.ref) + "/exec"),
                                                  max_message=API_MESSAGE.default)
        except WebSocketRefused as refused:
            if refused.status == 404:  # the handshake carries no body: the daemon's words come from asking for the box
                await self.client.box(self.ref)
            raise DaemonError("exec_failed", f"the daemon refused the exec ({refused.status})",
                              refused.status) from None
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
            if isinstance(message, bytes):
                if not message:
                    raise DaemonError("bad_reply", "the daemon sent an output frame without its stream byte")
                yield message[0], message[1:]
                continue
            decoded = exec_message(message)
            if decoded.get("type") == "stdin_credit":
                self._grant(_count(decoded.get("bytes")))
                continue
            if decoded.get("type") == "started":
                self._grant(_count(decoded.get("stdin_window", 0)))
            yield decoded

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


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
