"""The guest's sending half of the agent channel: whole frames, in order, with backpressure.

Each frame is handed to the transport in one ``write`` call, so frames from concurrent tasks never interleave.
Producers of bulk data (stdout, stderr, DATA) use :meth:`Channel.send`, which waits while the host is not reading
(stdout and stderr have waited for the host's OUTPUT_ACK credit before that: see ``execs``); small control frames
(responses, STDIN_ACK) use :meth:`Channel.send_nowait` so the request loop never blocks.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import protocol


class ChannelClosed(Exception):
    """The host end is gone."""


class Channel:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self.closed = False

    def send_nowait(self, frame: bytes) -> None:
        if self.closed or self._writer.is_closing():
            raise ChannelClosed("the agent channel is closed")
        self._writer.write(frame)

    async def send(self, frame: bytes) -> None:
        self.send_nowait(frame)
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self.closed = True
            raise ChannelClosed(str(exc)) from None

    def respond(self, ident: int, **fields: Any) -> None:
        self.send_nowait(protocol.encode_json_frame(protocol.RESPONSE, {"id": ident, "ok": True, **fields}))

    def fail(self, ident: int, code: str, message: str) -> None:
        body = {"id": ident, "ok": False, "error": {"code": code, "message": message[:4000]}}
        self.send_nowait(protocol.encode_json_frame(protocol.RESPONSE, body))

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self._writer.drain()
        except (ConnectionError, OSError):
            pass
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass
