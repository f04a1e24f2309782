"""A slow client through the real daemon and a real box (issue 8): ``tkbox exec BOX -- yes flood`` read by a client
that stops reading, reads again, then goes away.  The flood waits on its pipe in the box, the box stays running, a
second command runs meanwhile, no ``guest.protocol_error`` is recorded, and the next command works."""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from e2e.daemon_process import daemon_process, events, make_checkout, next_event
from e2e.signer_process import TKBOX, tkbox, tkbox_json

pytestmark = pytest.mark.e2e

WAIT = 60.0  # a safety net against hangs, never a timing assertion
POLL = 0.05  # seconds between looks at /proc: a process's kernel wait has no event to await
FLOOD = b"yes\0flood\0"


@pytest.fixture
def box(tmp_path):
    tkbox("signer", "up")
    with daemon_process(backend="bwrap") as daemon:
        info = tkbox_json("run", "--name", "e2e", "--workspace", str(make_checkout(tmp_path)))
        assert info["state"] == "running"
        yield daemon
    tkbox("signer", "down", check=False)


def _exec(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([TKBOX, "exec", "e2e", "--", *argv], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=WAIT)


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(POLL)


def _flood_blocked_on_its_pipe() -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == FLOOD:
                return "pipe_write" in (entry / "wchan").read_text()
        except OSError:
            continue
    return False


def _read_at_least(fd: int, count: int) -> bytes:
    got = bytearray()
    deadline = time.monotonic() + WAIT
    while len(got) < count:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"only {len(got)} of {count} bytes came"
        chunk = os.read(fd, count - len(got))
        assert chunk, "the output ended"
        got += chunk
    return bytes(got)


def test_a_client_that_stops_reading_holds_back_only_its_own_command(box):
    flood = subprocess.Popen([TKBOX, "exec", "e2e", "--", "yes", "flood"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _read_at_least(flood.stdout.fileno(), 6) == b"flood\n"
        # Nobody reads now: every buffer between `yes` and this test fills up, then `yes` waits on its pipe.
        _until(_flood_blocked_on_its_pipe)
        during = _exec("echo", "during")
        assert during.returncode == 0 and during.stdout == b"during\n"
        assert _read_at_least(flood.stdout.fileno(), 1 << 20).startswith(b"flood\n")  # reading again resumes it
        _until(_flood_blocked_on_its_pipe)
    finally:
        flood.kill()  # the client goes away while its command is held back
        flood.wait(WAIT)
    finished = next_event(lambda e: e["kind"] == "exec.finished" and "flood" in e["data"]["command"], "e2e",
                          bound_s=WAIT)
    assert finished["data"]["signal"] == 9
    after = _exec("echo", "after")
    assert after.returncode == 0 and after.stdout == b"after\n"
    kinds = [event["kind"] for event in events("e2e")]
    assert "guest.protocol_error" not in kinds and "box.failed" not in kinds
    assert tkbox_json("ls")[0]["state"] == "running"
