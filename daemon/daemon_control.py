"""``tkbox up`` / ``tkbox down`` for the daemon: start it in the background if none answers, stop it, ask after it."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sys
from typing import Any

from .config import DaemonPaths
from .processes import StartFailed, start_in_background, wait_until_gone
from .wire import API_VERSION

START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 60.0


class DaemonControlError(RuntimeError):
    """The daemon could not be started or stopped; the message says why and what to do."""


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("tkbox", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def health(paths: DaemonPaths, timeout: float = 5.0) -> dict[str, Any] | None:
    """The daemon's health answer, or None when nothing answers on its socket."""
    connection = _UnixHTTPConnection(str(paths.api_socket), timeout)
    try:
        connection.request("GET", f"/{API_VERSION}/health")
        response = connection.getresponse()
        if response.status != 200:
            return None
        return json.loads(response.read(1 << 20))
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        connection.close()


def up(paths: DaemonPaths, *, backend: str = "auto") -> dict[str, Any]:
    """Start the daemon in the background unless one answers already; return its health."""
    answer = health(paths)
    if answer is not None:
        return {**answer, "started": False}
    paths.ensure()
    try:
        answer, pid = start_in_background([sys.executable, "-m", "tkbox_daemon.daemon_process", "--backend", backend],
                                          paths.log_file, lambda: health(paths), what="daemon",
                                          timeout=START_TIMEOUT_SECONDS, umask=0o022)
    except StartFailed as exc:
        raise DaemonControlError(str(exc)) from None
    return {**answer, "started": True, "pid": pid}


def down(paths: DaemonPaths) -> dict[str, Any]:
    """Stop the daemon (SIGTERM: it stops every box and closes every run), then wait for it to go."""
    if health(paths) is None:
        return {"stopped": False, "reason": f"no daemon answers on {paths.api_socket}"}
    try:
        pid = int(paths.pid_file.read_text().strip())
    except (OSError, ValueError):
        raise DaemonControlError(f"the daemon answers but {paths.pid_file} names no pid; stop it by hand") from None
    os.kill(pid, signal.SIGTERM)
    if wait_until_gone(pid, STOP_TIMEOUT_SECONDS):
        return {"stopped": True, "pid": pid}
    raise DaemonControlError(f"the daemon (pid {pid}) did not stop within {STOP_TIMEOUT_SECONDS:.0f}s")
