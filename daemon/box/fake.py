"""TEST ONLY: a box backend with NO isolation, for unit tests of the daemon.

``FakeBackend`` runs the PID-1 argv as an ordinary subprocess of the daemon, as the daemon's own user, on the
host's filesystem and network. It exists so daemon tests can exercise box lifecycles without root or
namespaces. It must never run a real job: its ``isolated`` flag is False, ``probe`` never offers it, and it
refuses to start unless constructed with ``i_understand_this_is_not_isolated=True``.

What the "box" gets instead of the layout of docs/box-contract.md: its cwd is ``state_dir``; argv[0] is a host
path; these environment variables name the host paths a real box would see at fixed places:
``TKBOX_FAKE_BOX=1``, ``TKBOX_BOX_ID``, ``TKBOX_FAKE_BASE``, ``TKBOX_FAKE_UPPER``, ``TKBOX_FAKE_GUEST`` and
``TKBOX_FAKE_CHANNEL_<NAME>`` (upper-case channel name) for each channel socket.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

from tkbox_daemon.box.backend import (
    BoxBackend,
    BoxError,
    BoxLimits,
    BoxProcess,
    BoxSpec,
    BoxStartError,
    check_argv,
)
from tkbox_daemon.box.handle import LogPump, wait_until_stopped


def fake_environment(spec: BoxSpec) -> dict[str, str]:
    env = dict(spec.env)
    env.update(TKBOX_FAKE_BOX="1", TKBOX_BOX_ID=spec.box_id, TKBOX_FAKE_BASE=str(spec.base_dir),
               TKBOX_FAKE_UPPER=str(spec.upper_dir), TKBOX_FAKE_GUEST=str(spec.guest_dir or ""))
    for name, path in spec.channels.items():
        env[f"TKBOX_FAKE_CHANNEL_{name.upper().replace('-', '_')}"] = str(path)
    return env


class FakeBackend(BoxBackend):
    """Runs argv unisolated (see the module docstring). For tests only."""

    name = "fake"
    isolated = False
    applies_limits = False
    starts_ahead = True  # its guest works on host paths its boot configuration names: nothing to attach

    def __init__(self, *, i_understand_this_is_not_isolated: bool = False) -> None:
        self.confirmed = i_understand_this_is_not_isolated

    async def start(self, spec: BoxSpec, argv: list[str]) -> FakeBox:
        if not self.confirmed:
            raise BoxError("FakeBackend has no isolation and is for tests only")
        argv = check_argv(argv)
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, env=fake_environment(spec), cwd=spec.state_dir, stdin=subprocess.DEVNULL,
                stdout=write_fd, stderr=write_fd, start_new_session=True,
            )
        except OSError as error:
            os.close(read_fd)
            raise BoxError(f"fake box could not start {argv[0]}: {error}") from None
        finally:
            os.close(write_fd)
        return FakeBox(spec.box_id, process, LogPump(read_fd, spec.log_path, spec.log_limit_bytes))


    def apply_limits(self, process: BoxProcess, limits: BoxLimits) -> None:
        """Nothing to write: this backend applies no limits."""

    async def attach_workspace(self, process: BoxProcess, spec: BoxSpec, lower: Path) -> None:
        if not spec.workspace_later:
            raise BoxStartError("only a box started ahead of its workspace gets one attached")


class FakeBox(BoxProcess):
    """A plain subprocess in its own session; the session's process group stands in for "the box"."""

    def __init__(self, box_id: str, process: asyncio.subprocess.Process, log: LogPump) -> None:
        self.box_id = box_id
        self.pid = process.pid
        self.process = process
        self.log = log
        self.paused = False
        self.returncode: int | None = None

    async def wait(self) -> int:
        code = await self.process.wait()
        await self.log.finished()
        self.returncode = 128 - code if code < 0 else code
        return self.returncode

    def _signal_group(self, signum: int) -> None:
        if self.process.returncode is None:
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)

    async def pause(self) -> None:
        self._signal_group(signal.SIGSTOP)
        await wait_until_stopped({self.pid})
        self.paused = True

    async def resume(self) -> None:
        self._signal_group(signal.SIGCONT)
        self.paused = False

    def stats(self) -> dict[str, object]:
        return {"backend": "fake", "pid": self.pid, "paused": self.paused,
                "running": self.process.returncode is None, "log_bytes": self.log.written}
