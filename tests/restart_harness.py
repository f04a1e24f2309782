"""Several lives of one daemon on the same state (one real signer, the test-only unisolated backend), for restarts.

``daemon_lives(base)`` yields a ``DaemonLives``; each ``lives.life()`` serves a daemon on the same state, runtime and
layer directories as the ones before it (unlike ``tests.daemon_harness.running_daemon``, which deletes the box
layers when it ends).  Leaving a life ends it as ``tkbox down`` does; ``die(daemon)`` first makes the end a SIGKILL
as far as the disk and the signer can tell (see its docstring).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from tests.daemon_harness import RunningDaemon
from tests.signer_harness import RunningSigner, running_signer
from tkbox_daemon.api.app import create_app
from tkbox_daemon.box.backend import BoxBackend
from tkbox_daemon.box.fake import FakeBackend
from tkbox_daemon.box.uids import UidAllocator
from tkbox_daemon.config import DaemonConfig, DaemonPaths


@dataclass
class DaemonLives:
    config: DaemonConfig
    backend: BoxBackend
    signer: RunningSigner

    @asynccontextmanager
    async def life(self) -> AsyncIterator[RunningDaemon]:
        self.config.paths.ensure()
        self.config.paths.api_socket.unlink(missing_ok=True)  # the last life's, when it died
        app = create_app(self.config, self.backend)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.UnixSite(runner, str(self.config.paths.api_socket))
        await site.start()
        try:
            yield RunningDaemon(self.config, app, self.signer)
        finally:
            await runner.cleanup()

    @property
    def uid_claims(self) -> dict[int, str]:
        """Every claim in the uid registry the daemon uses: uid -> box id."""
        with contextlib.closing(UidAllocator(self.config.paths.uid_registry)) as registry:
            return {uid: claim.box for uid, claim in registry.listing().claims.items()}


@asynccontextmanager
async def daemon_lives(base: Path, *, backend: BoxBackend | None = None) -> AsyncIterator[DaemonLives]:
    runtime = Path(f"/tmp/tkl-{os.getpid()}-{abs(hash(str(base))) % 10**8}")
    paths = DaemonPaths(runtime, base / "daemon-state", uid_registry=base / "uids")  # not the host-wide one
    async with running_signer(base) as signer:
        lives = DaemonLives(DaemonConfig(paths, signer.paths, pool_size=0), backend or FakeBackend(
            i_understand_this_is_not_isolated=True), signer)
        try:
            yield lives
        finally:
            for directory in (paths.runtime_dir, paths.layers_root, paths.channels_root):
                shutil.rmtree(directory, ignore_errors=True)


async def _nothing() -> None:
    return None


def die(daemon: RunningDaemon) -> None:
    """Make the end of this life a SIGKILL as far as the disk and the signer can tell: the guards kill every box
    (here: its process group), and nothing more reaches the registry or the signer — no state change, no closed
    run, no shutdown. The in-process daemon then ends without stopping its boxes."""
    manager = daemon.manager
    manager.registry.save = lambda record: None  # type: ignore[method-assign]
    manager.registry.forget = lambda box_id: None  # type: ignore[method-assign]
    manager.shutdown = _nothing  # type: ignore[method-assign]
    manager.registry.unlock()  # as the kernel does for a killed process
    for box in manager.boxes.values():
        for task in box._tasks:
            task.cancel()
        if box.state in ("running", "held"):
            box.state = "stopping"  # so the guest's channel ending is not taken for a failure to act on
        if box.process is not None:
            box.process.kill()
