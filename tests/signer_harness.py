"""An in-process signer on a real Unix socket, for RPC tests: real keys, real store, real policy."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tkbox_daemon.policy import load_pack
from tkbox_daemon.policy.context import signer_context
from tkbox_daemon.signer.idempotency import new_request_id
from tkbox_daemon.signer.keys import load_or_create
from tkbox_daemon.signer.paths import SignerPaths
from tkbox_daemon.signer.server import SignerServer
from tkbox_daemon.signer.service import SignerService
from tkbox_daemon.signer.store import LogStore


@dataclass
class RunningSigner:
    paths: SignerPaths
    service: SignerService
    server: SignerServer

    async def connect(self) -> AsyncConnection:
        reader, writer = await asyncio.open_unix_connection(str(self.paths.socket), limit=4 << 20)
        return AsyncConnection(reader, writer)


@dataclass
class AsyncConnection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def send_line(self, line: bytes) -> None:
        self.writer.write(line)
        await self.writer.drain()

    async def reply(self) -> dict[str, Any] | None:
        line = await self.reader.readline()
        return json.loads(line) if line else None

    async def call(self, method: str, **fields: Any) -> dict[str, Any]:
        await self.send_line(json.dumps({"method": method, **fields}).encode() + b"\n")
        reply = await self.reply()
        assert reply is not None, "the signer closed the connection without an answer"
        return reply

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def signer_paths(base: Path) -> SignerPaths:
    runtime = Path(f"/tmp/tks-{os.getpid()}-{abs(hash(str(base))) % 10**8}")
    return SignerPaths(base / "signer-data", runtime)


@asynccontextmanager
async def running_signer(base: Path, *, clock: Any = None, allowed_uids: Any = None,
                         durable: bool = True) -> AsyncIterator[RunningSigner]:
    paths = signer_paths(base)
    paths.ensure()
    keys = load_or_create(paths.keys_dir)
    pack = load_pack("default", signer_context(paths, os.getpid()))
    store = LogStore(paths.store_dir, keys, durable=durable)
    kwargs = {"clock": clock} if clock else {}
    service = SignerService(keys, store, pack, **kwargs)
    await service.start()
    server = SignerServer(service, paths.socket, allowed_uids=allowed_uids)
    await server.start()
    try:
        yield RunningSigner(paths, service, server)
    finally:
        await server.close()
        store.close()
        import shutil

        shutil.rmtree(paths.runtime_dir, ignore_errors=True)


def request_id() -> str:
    return new_request_id()


async def register(connection: AsyncConnection, **fields: Any) -> dict[str, str]:
    reply = await connection.call("register_run", request_id=request_id(), agent={"name": "test"}, **fields)
    assert "error" not in reply, reply
    return {"run_id": reply["run_id"], "run_token": reply["run_token"]}
