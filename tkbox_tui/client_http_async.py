"""The asyncio driver of ``client_http``'s exchange (and the connection the WebSocket shares): the same request,
reply and caps as the blocking driver, over asyncio streams, for callers that run an event loop (the console,
``tkbox exec``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from .client_errors import lost, unreachable
from .client_http import CONNECT_DEADLINE_S, Head, HttpExchange, collect


async def connect(socket_path: object) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the daemon's socket within the connect deadline, or DaemonUnreachable."""
    try:
        return await asyncio.wait_for(asyncio.open_unix_connection(str(socket_path)), CONNECT_DEADLINE_S)
    except TimeoutError as error:
        raise unreachable(socket_path, error) from None
    except OSError as error:
        raise unreachable(socket_path, error) from None


async def disconnect(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def pieces_async(socket_path: object, exchange: HttpExchange) -> AsyncIterator[Head | bytes]:
    """The reply's ``Head`` and body chunks as they arrive; the connection is closed when this ends."""
    reader, writer = await connect(socket_path)
    try:
        try:
            writer.write(exchange.request_bytes())
            await writer.drain()
        except OSError:
            raise lost() from None
        while True:
            size = exchange.read_size()
            try:
                data = await reader.read(size)
            except OSError:
                raise lost() from None
            for piece in exchange.receive(data):
                if piece is None:
                    return
                yield piece
    finally:
        await disconnect(writer)


async def collect_async(socket_path: object, exchange: HttpExchange) -> tuple[Head, bytes]:
    return collect([piece async for piece in pieces_async(socket_path, exchange)])
