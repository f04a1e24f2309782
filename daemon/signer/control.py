"""``tkbox signer up | down | status``: start a dev signer in the background, stop it, ask after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from ..processes import alive, log_tail
from .client import SignerClient, SignerError, SignerUnreachable
from .paths import SignerPaths

START_TIMEOUT_SECONDS = 20.0
STOP_TIMEOUT_SECONDS = 20.0


class ControlError(RuntimeError):
    """The signer could not be started or stopped; the message says why and what to do."""


def hello(paths: SignerPaths) -> dict[str, Any] | None:
    """The signer's hello, or None if nothing answers on its socket."""
    try:
        with SignerClient(paths.socket, timeout=5.0) as client:
            return client.call("hello")
    except (SignerUnreachable, OSError, SignerError):
        return None


def status(paths: SignerPaths) -> dict[str, Any]:
    with SignerClient(paths.socket, timeout=10.0) as client:
        return client.call("status")


def up(paths: SignerPaths, *, pack: str = "default") -> dict[str, Any]:
    """Start a dev signer in the background unless one answers already; return its hello."""
    running = hello(paths)
    if running is not None:
        return {**running, "started": False}
    paths.ensure()
    log = open(paths.log_file, "ab")  # noqa: SIM115 - handed to the child
    env = {**os.environ, "TKBOX_SIGNER_DATA_DIR": str(paths.data_dir), "TKBOX_SIGNER_RUNTIME_DIR": str(paths.runtime_dir)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tkbox_daemon.signer.process", "--pack", pack],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
        preexec_fn=lambda: os.umask(0o077),
    )
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise ControlError(f"the signer exited with status {child.returncode}:\n{log_tail(paths.log_file)}")
        time.sleep(0.05)  # the child is starting; poll its socket
        answer = hello(paths)
        if answer is not None:
            return {**answer, "started": True}
    child.terminate()
    raise ControlError(f"the signer did not answer within {START_TIMEOUT_SECONDS:.0f}s:\n{log_tail(paths.log_file)}")


def down(paths: SignerPaths) -> dict[str, Any]:
    """Stop the signer that answers on the socket (SIGTERM, then wait for it to go)."""
    answer = hello(paths)
    if answer is None:
        return {"stopped": False, "reason": "no signer answers on " + str(paths.socket)}
    pid = int(answer["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if not alive(pid):
            return {"stopped": True, "pid": pid}
        time.sleep(0.05)
    raise ControlError(f"the signer (pid {pid}) did not stop within {STOP_TIMEOUT_SECONDS:.0f}s; kill it with: kill {pid}")
