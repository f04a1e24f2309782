"""The host's boot channel (``boxes/channels.py``): served at once when made with a configuration; held, for a box
started ahead, until ``release`` gives it; closed unanswered when the box is discarded before that; one
connection only."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

import pytest

from tkbox_daemon.boxes.channels import BootServer, ChannelError


@pytest.fixture
def socket_path():
    directory = Path(tempfile.mkdtemp(prefix="tkc-", dir="/tmp"))
    yield directory / "boot.sock"
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()


async def _read_all(path: Path) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


async def test_a_configuration_given_at_once_is_sent_to_the_first_connection(socket_path):
    server = BootServer(socket_path, os.getuid(), {"box_id": "b"})
    await server.start()
    assert json.loads(await _read_all(socket_path)) == {"box_id": "b"}
    assert not socket_path.exists()  # one connection only: nobody else may read it
    await server.close()


async def test_a_held_connection_gets_the_configuration_once_it_is_released(socket_path):
    server = BootServer(socket_path, os.getuid())
    await server.start()
    reading = asyncio.ensure_future(_read_all(socket_path))
    await asyncio.wait_for(server.served.wait(), 30)  # accepted, and held
    assert not reading.done() and not socket_path.exists()
    server.release({"box_id": "taken"})
    assert json.loads(await reading) == {"box_id": "taken"}
    await server.close()


async def test_a_held_connection_is_closed_unanswered_when_the_box_is_discarded(socket_path):
    server = BootServer(socket_path, os.getuid())
    await server.start()
    reading = asyncio.ensure_future(_read_all(socket_path))
    await asyncio.wait_for(server.served.wait(), 30)
    await server.close()
    assert await reading == b""  # the guest reads no configuration and ends


def test_a_configuration_over_its_limit_is_refused(socket_path):
    server = BootServer(socket_path, os.getuid())
    with pytest.raises(ChannelError, match="over 1 MiB"):
        server.release({"pad": "x" * (1 << 20)})
