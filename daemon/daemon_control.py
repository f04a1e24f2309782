"""``tkbox up`` / ``tkbox down`` for the daemon: start it in the background if none answers, stop it, ask after it."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from .config import DaemonPaths
from .processes import alive, log_tail
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
    log = open(paths.log_file, "ab")  # noqa: SIM115 - handed to the child
    child = subprocess.Popen(
        [sys.executable, "-m", "tkbox_daemon.daemon_process", "--backend", backend],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise DaemonControlError(f"the daemon exited with status {child.returncode}:\n{log_tail(paths.log_file)}")
        answer = health(paths)
        if answer is not None:
            return {**answer, "started": True, "pid": child.pid}
        time.sleep(0.05)  # the child is starting; poll its socket
    child.terminate()
    raise DaemonControlError(f"the daemon did not answer within {START_TIMEOUT_SECONDS:.0f}s:\n{log_tail(paths.log_file)}")


def down(paths: DaemonPaths) -> dict[str, Any]:
    """Stop the daemon (SIGTERM: it stops every box and closes every run), then wait for it to go."""
    if health(paths) is None:
        return {"stopped": False, "reason": f"no daemon answers on {paths.api_socket}"}
    try:
        pid = int(paths.pid_file.read_text().strip())
    except (OSError, ValueError):
        raise DaemonControlError(f"the daemon answers but {paths.pid_file} names no pid; stop it by hand") from None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if not alive(pid):
            return {"stopped": True, "pid": pid}
        time.sleep(0.05)
    raise DaemonControlError(f"the daemon (pid {pid}) did not stop within {STOP_TIMEOUT_SECONDS:.0f}s")
