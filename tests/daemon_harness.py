"""An in-process daemon on a real Unix socket, with the real signer (in process) and a chosen box backend."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.signer_harness import RunningSigner, running_signer
from tkbox_daemon.api.app import create_app
from tkbox_daemon.api.keys import EVENTS, MANAGER
from tkbox_daemon.box.backend import BoxBackend
from tkbox_daemon.box.fake import FakeBackend
from tkbox_daemon.boxes.manager import BoxManager
from tkbox_daemon.config import DaemonConfig, DaemonPaths
from tkbox_daemon.events import EventBus
from tkbox_tui.client import DaemonClient


@dataclass
class RunningDaemon:
    config: DaemonConfig
    app: web.Application
    signer: RunningSigner | None

    @property
    def manager(self) -> BoxManager:
        return self.app[MANAGER]

    @property
    def events(self) -> EventBus:
        return self.app[EVENTS]

    def client(self) -> DaemonClient:
        return DaemonClient(self.config.paths.api_socket)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def make_workspace(base: Path) -> Path:
    workspace = base / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("hello\n")
    return workspace


@asynccontextmanager
async def running_daemon(base: Path, *, backend: BoxBackend | None = None, unrecorded: bool = False,
                         max_boxes: int = 8, start_ahead: int = 0,
                         egress_block: tuple[str, ...] = ()) -> AsyncIterator[RunningDaemon]:
    runtime = Path(f"/tmp/tkd-{os.getpid()}-{abs(hash(str(base))) % 10**8}")
    paths = DaemonPaths(runtime, base / "daemon-state", uid_registry=base / "uids")  # not the host-wide one
    backend = backend or FakeBackend(i_understand_this_is_not_isolated=True)
    if unrecorded:
        config = DaemonConfig(paths, signer=None, unrecorded=True, max_boxes=max_boxes,  # type: ignore[arg-type]
                              pool_size=start_ahead)
        async with _serve(config, backend) as daemon:
            yield daemon
        return
    async with running_signer(base) as signer:
        config = DaemonConfig(paths, signer.paths, max_boxes=max_boxes, pool_size=start_ahead,
                              egress_block=egress_block)
        async with _serve(config, backend, signer) as daemon:
            yield daemon


@asynccontextmanager
async def _serve(config: DaemonConfig, backend: BoxBackend,
                 signer: RunningSigner | None = None) -> AsyncIterator[RunningDaemon]:
    config.paths.ensure()
    app = create_app(config, backend)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.UnixSite(runner, str(config.paths.api_socket))
    await site.start()
    try:
        yield RunningDaemon(config, app, signer)
    finally:
        await runner.cleanup()
        import shutil

        for directory in (config.paths.runtime_dir, config.paths.layers_root, config.paths.channels_root):
            shutil.rmtree(directory, ignore_errors=True)


async def run_exec(client: DaemonClient, box: str, argv: list[str], **kwargs: object) -> dict:
    """Run one exec to its end; returns the messages seen, the output and the exit."""
    call = client.exec(box)
    await call.start(argv, **kwargs)  # type: ignore[arg-type]
    result: dict = {"messages": [], "stdout": b"", "stderr": b"", "exit": None}
    async for message in call.messages():
        if isinstance(message, tuple):
            result["stdout" if message[0] == 1 else "stderr"] += message[1]
            continue
        result["messages"].append(message)
        if message["type"] in ("exit", "denied", "error"):
            result["end"] = message
            break
    await call.close()
    return result


async def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """``tkbox ARGV`` in process (status, stdout, stderr); its own event loop runs in a thread, as the daemon's runs
    in the test's. The caller points ``TKBOX_DAEMON_RUNTIME_DIR`` at the daemon."""
    from tkbox_tui.cli import main

    status = await asyncio.to_thread(main.main, list(argv))
    out, err = capsys.readouterr()
    return status, out, err
