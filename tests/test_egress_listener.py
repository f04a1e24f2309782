"""A box's egress listener on the host: the guest's uid only (SO_PEERCRED), many connections up to the per-box
cap, each handed to the box's handler (by default a 403 naming the door), and all of it closed at once."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tkbox_daemon import limits
from tkbox_daemon.boxes.egress_listener import (
    NOT_ENABLED_BODY,
    EgressHandler,
    EgressListener,
    refuse_door_not_enabled,
)

WAIT = 30.0
OTHER_UID = 43_219  # a uid nobody on a test machine runs as
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="handing the socket to another uid needs root")


@asynccontextmanager
async def listening(handler: EgressHandler = refuse_door_not_enabled, *, box_uid: int | None = None,
                    max_connections: int = limits.CONNECTIONS_PER_BOX.default) -> AsyncIterator[EgressListener]:
    directory = Path(tempfile.mkdtemp(prefix="tkeg-", dir="/tmp"))  # short: Unix socket paths are limited
    directory.chmod(0o711)
    listener = EgressListener(directory / "egress.sock", os.getuid() if box_uid is None else box_uid, handler,
                              max_connections=max_connections)
    await listener.start()
    try:
        yield listener
    finally:
        await listener.close()
        shutil.rmtree(directory, ignore_errors=True)


async def connect(listener: EgressListener) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_unix_connection(str(listener.path))


async def read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), WAIT)


async def ended(reader: asyncio.StreamReader) -> bool:
    try:
        return await read_all(reader) == b""
    except ConnectionResetError:
        return True


class Holding:
    """A handler that keeps each connection open until released (or cancelled), and says what happened."""

    def __init__(self) -> None:
        self.started = asyncio.Queue[int]()
        self.release = asyncio.Event()
        self.cancelled = 0
        self.count = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.count += 1
        self.started.put_nowait(self.count)
        try:
            await self.release.wait()
            writer.write(b"released")
            await writer.drain()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


# -- the default handler ------------------------------------------------------------------------------------------


async def test_the_default_handler_answers_403_naming_the_door_and_dials_nothing():
    async with listening() as listener:
        reader, writer = await connect(listener)
        writer.write(b"CONNECT example.invalid:443 HTTP/1.1\r\nHost: example.invalid:443\r\n\r\n")
        answer = await read_all(reader)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert f"Content-Length: {len(body)}".encode() in head and b"Connection: close" in head
        assert body.decode() == NOT_ENABLED_BODY and "network door is not enabled" in body.decode()
        writer.close()


async def test_many_connections_are_served_not_only_the_first():
    async with listening() as listener:
        clients = [await connect(listener) for _ in range(5)]
        for reader, writer in clients:
            writer.write_eof()
            assert (await read_all(reader)).startswith(b"HTTP/1.1 403 ")
            writer.close()


async def test_a_handler_that_fails_ends_only_its_own_connection():
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise RuntimeError("a bug")

    async with listening(broken) as listener:
        for _ in range(2):
            reader, writer = await connect(listener)
            assert await ended(reader)
            writer.close()
        assert listener.handler_failures == 2 and listener.open_connections == 0


# -- who may connect ----------------------------------------------------------------------------------------------


@root_only
async def test_the_socket_is_the_guests_uid_and_mode_0600():
    async with listening(box_uid=OTHER_UID) as listener:
        info = os.lstat(listener.path)
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        assert (info.st_uid, info.st_gid) == (OTHER_UID, OTHER_UID)


@root_only
async def test_a_peer_of_another_uid_is_closed_unanswered_and_never_reaches_the_handler():
    handler = Holding()
    async with listening(handler, box_uid=OTHER_UID) as listener:
        reader, writer = await connect(listener)  # root may open the file; the kernel still says who we are
        writer.write(b"CONNECT example.invalid:443 HTTP/1.1\r\n\r\n")
        assert await ended(reader)
        writer.close()
        assert listener.refused_peers == 1 and handler.count == 0


@root_only
async def test_the_guests_uid_is_served():
    client = ("import socket, sys\n"
              "s = socket.socket(socket.AF_UNIX)\n"
              "s.connect(sys.argv[1])\n"
              "s.shutdown(socket.SHUT_WR)\n"
              "data = b''\n"
              "while chunk := s.recv(65536):\n    data += chunk\n"
              "sys.stdout.buffer.write(data)\n")
    async with listening(box_uid=OTHER_UID) as listener:
        process = await asyncio.create_subprocess_exec(
            "/usr/bin/python3", "-I", "-S", "-c", client, str(listener.path), user=OTHER_UID, group=OTHER_UID,
            extra_groups=[], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
        out, err = await asyncio.wait_for(process.communicate(), WAIT)
        assert process.returncode == 0, err
        assert out.startswith(b"HTTP/1.1 403 Forbidden\r\n") and listener.refused_peers == 0


# -- the cap and the end ------------------------------------------------------------------------------------------


async def test_connections_past_the_cap_get_a_403_naming_the_limit_and_a_slot_frees_when_one_ends():
    handler = Holding()
    async with listening(handler, max_connections=2) as listener:
        held = [await connect(listener) for _ in range(2)]
        for _ in held:
            await asyncio.wait_for(handler.started.get(), WAIT)
        reader, writer = await connect(listener)
        refused = await read_all(reader)
        writer.close()
        assert refused.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert limits.CONNECTIONS_PER_BOX.name.encode() in refused and listener.refused_over_limit == 1
        assert handler.count == 2
        handler.release.set()
        for held_reader, held_writer in held:
            assert await read_all(held_reader) == b"released"
            held_writer.close()
        handler.release.clear()
        reader, writer = await connect(listener)
        assert await asyncio.wait_for(handler.started.get(), WAIT) == 3
        writer.close()


async def test_close_ends_the_listener_and_every_open_connection_at_once():
    handler = Holding()
    async with listening(handler) as listener:
        clients = [await connect(listener) for _ in range(3)]
        for _ in clients:
            await asyncio.wait_for(handler.started.get(), WAIT)
        await listener.close()
        assert handler.cancelled == 3 and listener.open_connections == 0
        for reader, writer in clients:
            assert await ended(reader)
            writer.close()
        assert not listener.path.exists()
        with pytest.raises(OSError):
            await connect(listener)
