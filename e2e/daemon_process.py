"""A real signer and a real ``tkbox daemon`` process for end-to-end tests, with real boxes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.netns import netns_command
from e2e.signer_process import TKBOX, tkbox
from tkbox_daemon.box.disk import release_all_below
from tkbox_daemon.config import DaemonPaths


@dataclass
class DaemonProcess:
    process: subprocess.Popen
    paths: DaemonPaths
    log: Path

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)


def wait_for_daemon(process: subprocess.Popen, log: Path) -> None:
    """Read the daemon's log lines as they come until it says it serves (no polling); keep copying the rest."""
    assert process.stderr is not None
    seen: list[bytes] = []
    with open(log, "ab") as output:
        for line in process.stderr:
            output.write(line)
            seen.append(line)
            if b"serving on" in line:
                break
        else:
            raise AssertionError(f"the daemon exited {process.wait(30)} before serving:\n"
                                 + b"".join(seen).decode(errors="replace"))
    threading.Thread(target=_copy_rest, args=(process.stderr, log), daemon=True).start()


def _copy_rest(stream: object, log: Path) -> None:
    with open(log, "ab") as output:
        for line in stream:  # type: ignore[attr-defined]
            output.write(line)


@contextmanager
def daemon_process(*args: str, backend: str = "bwrap", keep_layers: bool = False,
                   netns: str | None = None) -> Iterator[DaemonProcess]:
    """A ``tkbox daemon`` for the block; its box layers and channels are removed after it unless ``keep_layers``
    (a test that starts the next daemon on the same boxes).  With ``netns`` (a lab namespace, ``e2e/netlab.py``)
    the daemon runs in that network namespace; its API and the signer are Unix sockets, reached as before.  It
    starts no box ahead unless ``args`` say ``--start-ahead`` (a box started ahead holds uids, a disk and processes
    that tests counting those would see; e2e/test_box_pool_e2e.py tests them)."""
    if "--start-ahead" not in args:
        args = (*args, "--start-ahead", "0")
    paths = DaemonPaths.from_env()
    log = paths.state_dir.parent / "daemon.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [TKBOX, "daemon", "--backend", backend, *args]
    process = subprocess.Popen(netns_command(netns, command) if netns else command, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    daemon = DaemonProcess(process, paths, log)
    try:
        wait_for_daemon(process, log)
        yield daemon
    finally:
        daemon.stop()
        if not keep_layers:  # box disks a killed daemon left mounted go first: deleting cannot unmount them
            release_all_below(paths.layers_root)
        for directory in (paths.channels_root,) if keep_layers else (paths.layers_root, paths.channels_root):
            shutil.rmtree(directory, ignore_errors=True)


def make_checkout(base: Path) -> Path:
    """A real git checkout: a tracked file, an ignored .env, an untracked-but-not-ignored file."""
    checkout = base / "checkout"
    checkout.mkdir()
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(base)}
    subprocess.run(["git", "init", "-q", str(checkout)], check=True, env=env)
    (checkout / "tracked.txt").write_text("tracked\n")
    (checkout / ".gitignore").write_text(".env\n")
    (checkout / ".env").write_text("API_KEY=do-not-copy\n")
    (checkout / "untracked.txt").write_text("untracked\n")
    subprocess.run(["git", "-C", str(checkout), "add", "tracked.txt", ".gitignore"], check=True, env=env)
    return checkout


def events(box: str | None = None) -> list[dict]:
    result = tkbox("events", *([box] if box else []), "--json")
    return [json.loads(line) for line in result.stdout.splitlines()]


def next_event(match: str | Callable[[dict], bool], box: str | None = None, *, after: int = 0,
               bound_s: float = 120) -> dict:
    """The first event past ``after`` (of ``box``, or of all) whose kind is ``match`` (or for which ``match`` is
    true), read as it comes from ``tkbox events --follow``; ``bound_s`` only bounds the wait: a missing event fails,
    never hangs."""
    wanted = (lambda event: event["kind"] == match) if isinstance(match, str) else match
    follower = subprocess.Popen([TKBOX, "events", *([box] if box else []), "--follow", "--json", "--after",
                                 str(after)], stdout=subprocess.PIPE)
    watchdog = threading.Timer(bound_s, follower.kill)
    watchdog.start()
    try:
        assert follower.stdout is not None
        for line in follower.stdout:
            event = json.loads(line)
            if wanted(event):
                return event
    finally:
        watchdog.cancel()
        follower.kill()
        follower.wait()
    raise AssertionError(f"no event {match!r} of {box or 'any box'} after seq {after} within {bound_s:g} s")

