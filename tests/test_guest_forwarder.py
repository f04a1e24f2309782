"""The guest's egress forwarder: 127.0.0.1 TCP in, one new Unix connection to the egress socket per client out,
bytes both ways unread, half-close passed on, at most a chunk buffered per direction, a cap on relays."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon import limits, rules
from tkbox_guest import forwarder, protocol
from tkbox_guest.boot import BootConfig, BootError
from tkbox_guest.forwarder import Forwarder

WAIT = 30.0
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Lab:
    """A forwarder on a free loopback port and a fake egress socket server (``handler`` serves each connection)."""

    forwarder: Forwarder
    socket_path: Path
    accepted: list[asyncio.StreamWriter] = field(default_factory=list)

    async def client(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.forwarder.port)


@asynccontextmanager
async def lab(handler: Handler | None, *, max_relays: int = forwarder.MAX_RELAYS,
              chunk: int = forwarder.CHUNK) -> AsyncIterator[Lab]:
    directory = Path(tempfile.mkdtemp(prefix="tkfw-", dir="/tmp"))  # short: Unix socket paths are limited
    path = directory / "egress.sock"
    server = None
    running = Lab(Forwarder(str(path), port=0, max_relays=max_relays, chunk=chunk), path)
    if handler is not None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            running.accepted.append(writer)
            try:
                await handler(reader, writer)
            finally:
                writer.close()

        server = await asyncio.start_unix_server(serve, path=str(path))
    await running.forwarder.start()
    try:
        yield running
    finally:
        await running.forwarder.close()
        if server is not None:
            server.close()
        shutil.rmtree(directory, ignore_errors=True)


async def echo_upper(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data.upper())
        await writer.drain()


async def read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), WAIT)


async def until(condition: Callable[[], bool], max_turns: int = 100_000) -> None:
    """Let the event loop run until ``condition()`` holds (a relay's task ends a few turns after its sockets)."""
    for _ in range(max_turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


# -- relaying -------------------------------------------------------------------------------------------------


async def test_bytes_go_both_ways_unchanged_and_unparsed():
    async with lab(echo_upper) as running:
        reader, writer = await running.client()
        request = b"CONNECT example.invalid:443 HTTP/1.1\r\n\r\n\x00\xff not http at all"
        writer.write(request)
        assert await asyncio.wait_for(reader.readexactly(len(request)), WAIT) == request.upper()
        writer.write(b"more")
        assert await asyncio.wait_for(reader.readexactly(4), WAIT) == b"MORE"
        writer.close()


async def test_each_client_gets_its_own_unix_connection():
    async with lab(echo_upper) as running:
        clients = [await running.client() for _ in range(3)]
        for index, (reader, writer) in enumerate(clients):
            writer.write(b"c%d" % index)
            assert await asyncio.wait_for(reader.readexactly(2), WAIT) == b"C%d" % index
        assert len(running.accepted) == 3
        for _, writer in clients:
            writer.close()


async def test_the_clients_half_close_reaches_the_egress_side_and_the_answer_still_comes_back():
    async def answer_after_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.read()  # only ends at the client's EOF
        writer.write(b"got %d bytes" % len(request))
        await writer.drain()

    async with lab(answer_after_eof) as running:
        reader, writer = await running.client()
        writer.write(b"x" * 100_000)
        writer.write_eof()
        assert await read_all(reader) == b"got 100000 bytes"
        writer.close()


async def test_the_egress_sides_half_close_reaches_the_client_which_can_still_send():
    received = asyncio.get_running_loop().create_future()

    async def greet_then_listen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        writer.write_eof()
        received.set_result(await reader.read())

    async with lab(greet_then_listen) as running:
        reader, writer = await running.client()
        assert await read_all(reader) == b"hello"  # EOF seen while the connection is still open our way
        writer.write(b"after your EOF")
        writer.write_eof()
        assert await asyncio.wait_for(received, WAIT) == b"after your EOF"
        writer.close()


async def test_a_missing_egress_socket_closes_the_client_at_once():
    async with lab(None) as running:
        reader, writer = await running.client()
        assert await read_all(reader) == b""
        writer.close()
        assert running.forwarder.unreachable == 1
        await until(lambda: running.forwarder.relays == 0)


async def test_an_egress_side_that_goes_away_ends_the_relay():
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.transport.abort()

    async with lab(hang_up) as running:
        reader, writer = await running.client()
        assert await read_all(reader) == b""
        writer.close()


# -- bounds ---------------------------------------------------------------------------------------------------


async def test_relays_past_the_cap_are_closed_at_once_and_a_slot_frees_when_one_ends():
    async with lab(echo_upper, max_relays=3) as running:
        clients = [await running.client() for _ in range(3)]
        for reader, writer in clients:  # each relay is up: its egress side answers
            writer.write(b"a")
            assert await asyncio.wait_for(reader.readexactly(1), WAIT) == b"A"
        extra_reader, extra_writer = await running.client()
        assert await read_all(extra_reader) == b""
        assert running.forwarder.refused == 1 and len(running.accepted) == 3
        extra_writer.close()
        first_reader, first_writer = clients[0]
        first_writer.write_eof()  # the relay ends once both sides are done
        assert await read_all(first_reader) == b""
        first_writer.close()
        await until(lambda: running.forwarder.relays == 2)
        reader, writer = await running.client()
        writer.write(b"b")
        assert await asyncio.wait_for(reader.readexactly(1), WAIT) == b"B"
        for _, other in [*clients[1:], (reader, writer)]:
            other.close()


def test_the_caps_and_the_address_are_the_ones_the_host_names():
    assert forwarder.MAX_RELAYS == limits.CONNECTIONS_PER_BOX.default
    url = urlsplit(rules.EGRESS_PROXY_URL)
    assert (url.hostname, url.port) == (forwarder.FORWARDER_HOST, forwarder.FORWARDER_PORT)
    assert {rules.PROXY_ENV[name] for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")} == {
        rules.EGRESS_PROXY_URL}


async def settle(progress: Callable[[], int], quiet_turns: int = 50, max_turns: int = 200_000) -> int:
    """Let the event loop run until ``progress()`` stops changing for ``quiet_turns`` turns (every socket here is
    loopback, so the kernel moves nothing while the loop waits): no wall-clock sleep."""
    last, quiet = progress(), 0
    for _ in range(max_turns):
        await asyncio.sleep(0)
        now = progress()
        quiet = quiet + 1 if now == last else 0
        last = now
        if quiet >= quiet_turns:
            return now
    raise AssertionError("the relay never settled")


async def test_a_client_that_does_not_read_stops_the_egress_sides_writes():
    total, block = 64 << 20, 1 << 20
    sent = hashlib.sha256()
    pushed: list[int] = [0]
    pusher_writer: list[asyncio.StreamWriter] = []

    async def push(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pusher_writer.append(writer)
        for index in range(total // block):
            data = bytes([index % 251]) * block
            sent.update(data)
            writer.write(data)
            pushed[0] += block
            await writer.drain()
        writer.write_eof()
        await reader.read()

    async with lab(push) as running:
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.setblocking(False)
        await asyncio.get_running_loop().sock_connect(raw, ("127.0.0.1", running.forwarder.port))
        reader, writer = await asyncio.open_connection(sock=raw)
        while not pusher_writer:
            await asyncio.sleep(0)

        def delivered() -> int:  # bytes that left the egress side's buffer for its socket
            return pushed[0] - pusher_writer[0].transport.get_write_buffer_size()

        stalled_at = await settle(delivered)
        # What left the egress side sits in two kernel socket buffers and at most one chunk in the forwarder.
        assert stalled_at < 32 << 20, f"{stalled_at} bytes left the egress side while the client read nothing"
        received = hashlib.sha256()
        count = 0
        while data := await asyncio.wait_for(reader.read(1 << 20), WAIT):
            received.update(data)
            count += len(data)
        assert count == total and received.digest() == sent.digest()
        writer.close()


async def test_close_ends_every_relay_and_the_listener():
    async with lab(echo_upper) as running:
        clients = [await running.client() for _ in range(2)]
        for reader, writer in clients:
            writer.write(b"z")
            assert await asyncio.wait_for(reader.readexactly(1), WAIT) == b"Z"
        port = running.forwarder.port
        await running.forwarder.close()
        for reader, writer in clients:
            assert await ended(reader)
            writer.close()
        assert running.forwarder.relays == 0
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)


async def ended(reader: asyncio.StreamReader) -> bool:
    """A closed relay shows as EOF or as a reset, depending on what the kernel had unread: both are an end."""
    try:
        return await read_all(reader) == b""
    except ConnectionResetError:
        return True


# -- property: any sequence of writes arrives intact, both ways -------------------------------------------------

chunks = st.lists(st.binary(min_size=1, max_size=20_000), max_size=6)


@given(up=chunks, down=chunks, chunk=st.sampled_from([7, 4096, forwarder.CHUNK]))
def test_any_writes_arrive_byte_for_byte_in_both_directions(up, down, chunk):
    async def scenario() -> tuple[bytes, bytes]:
        got_up = asyncio.get_running_loop().create_future()

        async def egress(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for piece in down:
                writer.write(piece)
                await writer.drain()
            writer.write_eof()
            got_up.set_result(await reader.read())

        async with lab(egress, chunk=chunk) as running:
            reader, writer = await running.client()

            async def send() -> None:
                for piece in up:
                    writer.write(piece)
                    await writer.drain()
                writer.write_eof()

            sender = asyncio.ensure_future(send())
            got_down = await read_all(reader)
            await asyncio.wait_for(sender, WAIT)
            result = await asyncio.wait_for(got_up, WAIT)
            writer.close()
            return result, got_down

    got_up, got_down = asyncio.run(scenario())
    assert got_up == b"".join(up) and got_down == b"".join(down)


# -- the boot config names the egress socket --------------------------------------------------------------------

BOOT = {"box_id": "b", "env": {}, "workspace": "/workspace", "agent_socket": "/run/a.sock",
        "limits": {"exec_timeout_ms": 0, "max_execs": 8}, "clock": 0}


def test_the_egress_socket_defaults_to_the_reserved_path_and_may_be_named():
    assert BootConfig.from_json(protocol.dumps(BOOT)).egress_socket == "/run/tkbox/egress.sock"
    named = BootConfig.from_json(protocol.dumps({**BOOT, "egress_socket": "/tmp/x/egress.sock"}))
    assert named.egress_socket == "/tmp/x/egress.sock"


@pytest.mark.parametrize("value", ["run/tkbox/egress.sock", "", "/run/\x00x", 3, None, "/" + "a" * 5000])
def test_an_egress_socket_that_is_not_an_absolute_path_is_refused(value):
    with pytest.raises(BootError, match="egress_socket"):
        BootConfig.from_json(protocol.dumps({**BOOT, "egress_socket": value}))


@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=64))
def test_an_accepted_egress_socket_is_absolute_without_nul(value):
    try:
        config = BootConfig.from_json(protocol.dumps({**BOOT, "egress_socket": value}))
    except BootError:
        assert not value.startswith("/") or "\x00" in value or not value
        return
    assert config.egress_socket == value and value.startswith("/") and "\x00" not in value
