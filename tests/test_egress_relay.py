"""The tunnel relay on real sockets (a Unix connection on the box's side, TCP upstream, as the proxy relays them),
by both of its ways: holding the transports, and a coroutine per direction. Bytes arrive exactly and in order,
counts are exact, half-closes pass through, bytes and an EOF the streams read before the relay began go first, a
side that does not read slows its sender instead of growing the relay's buffer, a lost connection ends the relay,
the streams work as streams afterwards, and the box's connection can take a whole upstream read at once."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tkbox_daemon.egress import relay as relay_module
from tkbox_daemon.egress.relay import Counts, relay

WAIT = 30.0
Side = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@pytest.fixture(params=["splice", "transports", "streams"])
def way(request, monkeypatch) -> str:
    if request.param == "streams":
        monkeypatch.setattr(relay_module, "_holdable", lambda side: False)
    if request.param == "transports":
        monkeypatch.setattr(relay_module, "SPLICE", False)
    return request.param


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        near = socket.create_connection(server.getsockname())
        far, _ = server.accept()
    return near, far


async def _streams(sock: socket.socket) -> Side:
    sock.setblocking(False)
    if sock.family == socket.AF_UNIX:
        return await asyncio.open_unix_connection(sock=sock)
    return await asyncio.open_connection(sock=sock)


@asynccontextmanager
async def tunnel(**relay_args) -> AsyncIterator[tuple[Side, Side, Side, Side, asyncio.Task[Counts]]]:
    """(the box's end, the relay's client side, the relay's upstream side, the upstream's end, the relay task),
    with the relay not yet started: call ``start()`` on the yielded task factory."""
    box, proxy_client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    proxy_upstream, server = _tcp_pair()
    ends = [await _streams(sock) for sock in (box, proxy_client, proxy_upstream, server)]
    task: asyncio.Task[Counts] | None = None

    def start() -> asyncio.Task[Counts]:
        nonlocal task
        task = asyncio.ensure_future(relay(ends[1], ends[2], idle=relay_args.get("idle", WAIT)))
        return task

    try:
        yield ends[0], ends[1], ends[2], ends[3], start  # type: ignore[misc]
    finally:
        if task is not None and not task.done():
            task.cancel()
        for _, writer in ends:
            writer.close()


async def test_bytes_go_both_ways_exactly_and_half_closes_pass_through(way):
    async with tunnel() as (box, _, _, server, start):
        task = start()
        up = bytes(range(256)) * 4096  # 1 MiB
        box[1].write(up)
        box[1].write_eof()
        assert await asyncio.wait_for(server[0].readexactly(len(up)), WAIT) == up
        assert await asyncio.wait_for(server[0].read(), WAIT) == b""  # the box's EOF reached the upstream
        down = b"answer after the client's EOF" * 1000
        server[1].write(down)  # the other direction still works after the half-close
        server[1].write_eof()
        assert await asyncio.wait_for(box[0].read(), WAIT) == down
        counts = await asyncio.wait_for(task, WAIT)
        assert (counts.up, counts.down) == (len(up), len(down))


async def test_bytes_and_an_eof_the_streams_read_before_the_relay_began_go_first(way):
    async with tunnel() as (box, proxy_client, proxy_upstream, server, start):
        box[1].write(b"HEAD")
        box[1].write_eof()
        server[1].write(b"banner before the tunnel\n")
        assert await asyncio.wait_for(proxy_client[0].readexactly(4), WAIT) == b"HEAD"
        assert await asyncio.wait_for(proxy_client[0].read(1), WAIT) == b""  # the stream has seen the box's EOF
        assert await asyncio.wait_for(proxy_upstream[0].readexactly(6), WAIT) == b"banner"  # the rest is buffered
        task = start()
        assert await asyncio.wait_for(server[0].read(), WAIT) == b""  # the EOF seen before still reaches it
        assert await asyncio.wait_for(box[0].readexactly(19), WAIT) == b" before the tunnel\n"
        server[1].write(b"more")
        server[1].write_eof()
        assert await asyncio.wait_for(box[0].read(), WAIT) == b"more"
        counts = await asyncio.wait_for(task, WAIT)
        assert (counts.up, counts.down) == (0, len(b" before the tunnel\nmore"))


async def test_an_upstream_that_does_not_read_slows_the_box_instead_of_growing_the_relays_buffer(way):
    async with tunnel() as (box, _, proxy_upstream, server, start):
        task = start()
        total = 32 * 1024 * 1024
        chunk = b"x" * (1024 * 1024)

        async def send() -> None:
            for _ in range(total // len(chunk)):
                box[1].write(chunk)
                await box[1].drain()
            box[1].write_eof()

        sender = asyncio.ensure_future(send())
        received, most_buffered = 0, 0
        while received < total:
            data = await asyncio.wait_for(server[0].read(16 * 1024), WAIT)  # a slow reader: small reads
            assert data
            received += len(data)
            most_buffered = max(most_buffered, proxy_upstream[1].transport.get_write_buffer_size())
        await asyncio.wait_for(sender, WAIT)
        # What the relay holds for a slow side: its transport's high-water mark and one read, never the 32 MiB.
        assert most_buffered <= 64 * 1024 + 256 * 1024
        assert await asyncio.wait_for(server[0].read(), WAIT) == b""
        server[1].write_eof()
        counts = await asyncio.wait_for(task, WAIT)
        assert counts.up == total


async def test_a_lost_box_connection_ends_the_relay_and_the_streams_learn_it(way):
    async with tunnel() as (box, proxy_client, _, server, start):
        task = start()
        box[1].write(b"some bytes")
        assert await asyncio.wait_for(server[0].readexactly(10), WAIT) == b"some bytes"
        box[1].transport.abort()  # the box's side goes away without a half-close
        server[1].write(b"x" * 65536)  # the upstream keeps talking into a connection that is gone
        counts = await asyncio.wait_for(task, WAIT)
        assert counts.up == 10
        proxy_client[1].close()
        with pytest.raises(ConnectionError):  # the stream's protocol heard of the loss, and why
            await asyncio.wait_for(proxy_client[1].wait_closed(), WAIT)


async def test_nothing_moving_for_idle_seconds_ends_the_relay(way):
    async with tunnel(idle=0.05) as (_, _, _, _, start):
        counts = await asyncio.wait_for(start(), WAIT)
        assert (counts.up, counts.down) == (0, 0)


async def test_the_relay_holds_socket_transports_and_hands_them_back(monkeypatch):
    monkeypatch.setattr(relay_module, "SPLICE", False)
    async with tunnel() as (box, proxy_client, proxy_upstream, server, start):
        originals = [side[1].transport.get_protocol() for side in (proxy_client, proxy_upstream)]
        box[1].write(b"HEADping")
        assert await asyncio.wait_for(proxy_client[0].readexactly(4), WAIT) == b"HEAD"
        task = start()
        assert await asyncio.wait_for(server[0].readexactly(4), WAIT) == b"ping"
        assert [side[1].transport.get_protocol() for side in (proxy_client, proxy_upstream)] != originals
        box[1].write_eof()
        server[1].write_eof()
        await asyncio.wait_for(task, WAIT)
        assert [side[1].transport.get_protocol() for side in (proxy_client, proxy_upstream)] == originals
        assert await asyncio.wait_for(proxy_client[0].read(), WAIT) == b""  # the EOFs, and no byte read twice
        assert await asyncio.wait_for(proxy_upstream[0].read(), WAIT) == b""
        for _, writer in (proxy_client, proxy_upstream):
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), WAIT)


async def test_spliced_the_streams_are_not_read_meanwhile_and_work_as_streams_afterwards():
    async with tunnel() as (box, proxy_client, proxy_upstream, server, start):
        box[1].write(b"HEADping")
        assert await asyncio.wait_for(proxy_client[0].readexactly(4), WAIT) == b"HEAD"
        task = start()
        assert await asyncio.wait_for(server[0].readexactly(4), WAIT) == b"ping"
        server[1].write(b"pong")
        assert await asyncio.wait_for(box[0].readexactly(4), WAIT) == b"pong"
        assert not proxy_client[1].transport.is_reading() and not proxy_upstream[1].transport.is_reading()
        assert len(proxy_client[0]._buffer) == len(proxy_upstream[0]._buffer) == 0  # nothing went through them
        box[1].write_eof()
        server[1].write_eof()
        counts = await asyncio.wait_for(task, WAIT)
        assert (counts.up, counts.down) == (4, 4)
        assert await asyncio.wait_for(proxy_client[0].read(), WAIT) == b""  # the EOFs, and no byte read twice
        assert await asyncio.wait_for(proxy_upstream[0].read(), WAIT) == b""
        for _, writer in (proxy_client, proxy_upstream):
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), WAIT)


def test_counts_start_empty():
    assert (Counts().up, Counts().down) == (0, 0)


async def test_the_box_connection_gets_a_send_buffer_for_a_whole_upstream_read():
    with open("/proc/sys/net/core/wmem_max") as limit:
        granted = 2 * min(relay_module.BOX_SEND_BUFFER, int(limit.read()))  # the kernel doubles what it grants
    async with tunnel() as (box, proxy_client, _, server, start):
        default = proxy_client[1].get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        task = start()
        box[1].write(b"ping")
        assert await asyncio.wait_for(server[0].readexactly(4), WAIT) == b"ping"
        size = proxy_client[1].get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        assert size >= granted and size >= default
        box[1].write_eof()
        server[1].write_eof()
        await asyncio.wait_for(task, WAIT)
