"""``tkbox signer up | down | status``: start a dev signer in the background, stop it, ask after it."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from ..processes import StartFailed, start_in_background, wait_until_gone
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
    env = {**os.environ, "TKBOX_SIGNER_DATA_DIR": str(paths.data_dir), "TKBOX_SIGNER_RUNTIME_DIR": str(paths.runtime_dir)}
    try:
        answer, _ = start_in_background([sys.executable, "-m", "tkbox_daemon.signer.process", "--pack", pack],
                                        paths.log_file, lambda: hello(paths), what="signer",
                                        timeout=START_TIMEOUT_SECONDS, env=env)
    except StartFailed as exc:
        raise ControlError(str(exc)) from None
    return {**answer, "started": True}


def down(paths: SignerPaths) -> dict[str, Any]:
    """Stop the signer that answers on the socket (SIGTERM, then wait for it to go)."""
    answer = hello(paths)
    if answer is None:
        return {"stopped": False, "reason": "no signer answers on " + str(paths.socket)}
    pid = int(answer["pid"])
    os.kill(pid, signal.SIGTERM)
    if wait_until_gone(pid, STOP_TIMEOUT_SECONDS):
        return {"stopped": True, "pid": pid}
    raise ControlError(f"the signer (pid {pid}) did not stop within {STOP_TIMEOUT_SECONDS:.0f}s; kill it with: kill {pid}")
