"""Approvals from the CLI end to end: the real signer, the real ``tkbox daemon``, a real bubblewrap box, and the
``tkbox`` console script as an operator runs it — an ``ask`` exec held, seen by ``tkbox approvals --follow``, answered
by ``tkbox approve``/``reject`` from another process or with one key on the exec's own terminal (a real pty).

The held command is ``sh -c 'sudo true 2>/dev/null; …; exit N'``: the default pack asks about the ``sudo`` in it
(TK-A001), and once approved its status is the ``exit N`` whatever sudo does in the box.  Nothing sleeps: every
wait reads until the expected bytes arrive, with a deadline as a safety net.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import time

import pytest

from e2e.daemon_process import daemon_process, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json

pytestmark = pytest.mark.e2e

WAIT = 60  # seconds: the deadline on every wait
HELD = re.compile(rb"tkbox: held for a person's approval: TK-A001 [^\n]* approve with: tkbox approve "
                  rb"(apr-[0-9a-f]{16}) \(expires at \d\d:\d\d:\d\d UTC\)\n")
PROMPT = b"approve? [a] approve  [r] approve and remember  [x] reject  (or answer elsewhere)"


def _asks(status: int, marker: str = "") -> list[str]:
    return ["sh", "-c", f"sudo true 2>/dev/null; echo done{marker}; exit {status}"]


@pytest.fixture
def box(tmp_path):
    tkbox("signer", "up")
    with daemon_process(backend="bwrap"):
        info = tkbox_json("run", "--name", "e2e", "--workspace", str(make_checkout(tmp_path)))
        assert info["state"] == "running"
        yield info
    tkbox("signer", "down", check=False)


def _read_until(fd: int, pattern: re.Pattern[bytes], seen: bytearray) -> re.Match[bytes] | None:
    """Read ``fd`` into ``seen`` until ``pattern`` matches (None: the stream ended first)."""
    deadline = time.monotonic() + WAIT
    while (found := pattern.search(seen)) is None:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {pattern.pattern!r} in time; got {bytes(seen)!r}"
        if select.select([fd], [], [], remaining)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: a pty whose other end has closed
                chunk = b""
            if not chunk:
                return None
            seen += chunk
    return found


def _exec(*argv: str) -> tuple[subprocess.Popen[bytes], bytearray]:
    process = subprocess.Popen([TKBOX, "exec", "e2e", "--", *argv], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return process, bytearray()


def _held(process: subprocess.Popen[bytes], err: bytearray) -> str:
    assert process.stderr is not None
    found = _read_until(process.stderr.fileno(), HELD, err)
    assert found is not None, bytes(err)
    return found.group(1).decode()


class Follower:
    """``tkbox approvals --follow --json``: its lines, read as they come."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([TKBOX, "approvals", "--all", "--follow", "--json"], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.seen = bytearray()

    def wait_for(self, approval_id: str, state: str) -> dict:
        assert self.process.stdout is not None
        pattern = re.compile(rf'^[^\n]*"id": "{approval_id}"[^\n]*"state": "{state}"[^\n]*\n'.encode(), re.M)
        found = _read_until(self.process.stdout.fileno(), pattern, self.seen)
        assert found is not None, bytes(self.seen)
        return json.loads(found.group(0))

    def stop(self) -> tuple[int, bytes, bytes]:
        """Ctrl+C: returns the exit status, the rest of stdout and stderr."""
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=WAIT)
        return self.process.returncode, out, err


def test_a_held_exec_seen_by_follow_and_approved_exits_with_the_commands_status(box):
    follower = Follower()
    try:
        process, err = _exec(*_asks(7))
        approval_id = _held(process, err)
        pending = follower.wait_for(approval_id, "pending")
        assert pending["approval"]["asked"]["command"].startswith("sh -c") and pending["approval"]["box_name"] == "e2e"
        approved = tkbox("approve", approval_id)
        assert approved.stdout.startswith(f"approved {approval_id} (sh -c ") and " in box e2e) as uid " in approved.stdout
        out, rest = process.communicate(timeout=WAIT)
        assert process.returncode == 7 and out == b"done\n"
        assert b"tkbox: approved by uid " in rest
        answered = follower.wait_for(approval_id, "approved")
        assert answered["event"] == "approval.answered" and answered["approval"]["answered_by"].startswith("uid ")
    finally:
        status, rest, follower_err = follower.stop()
    assert status == 130 and follower_err == b""  # with --json, Ctrl+C is one error object on stdout
    assert json.loads(rest.splitlines()[-1]) == {"error": {"code": "interrupted", "message": "stopped by Ctrl+C",
                                                           "hint": None}}


def test_a_held_exec_rejected_with_a_reason_exits_126_with_it(box):
    process, err = _exec(*_asks(0))
    approval_id = _held(process, err)
    rejected = tkbox("reject", approval_id, "--reason", "no")
    assert rejected.stdout.rstrip().endswith(": no")
    out, rest = process.communicate(timeout=WAIT)
    assert process.returncode == 126 and out == b""
    line = next(line for line in rest.decode().splitlines() if line.startswith("tkbox: not approved"))
    assert line.startswith("tkbox: not approved (rejected): rejected by uid ") and line.endswith(": no")
    again = tkbox("approve", approval_id, check=False)
    assert again.returncode == 2 and "already rejected" in again.stderr


def test_approve_and_remember_then_forget(box):
    process, err = _exec(*_asks(0))
    approval_id = _held(process, err)
    remembered = tkbox("approve", approval_id, "--remember")
    rule_id = re.search(r"remembered as (rem-[0-9a-f]+)", remembered.stdout).group(1)
    assert f"undo with: tkbox forget e2e {rule_id}" in remembered.stdout
    assert process.wait(WAIT) == 0
    again = subprocess.run([TKBOX, "exec", "e2e", "--", *_asks(3)], capture_output=True, timeout=WAIT,
                           stdin=subprocess.DEVNULL)
    assert again.returncode == 3 and b"held for a person's approval" not in again.stderr  # the rule approved it
    forgot = tkbox("forget", "e2e", rule_id)
    assert forgot.stdout.startswith(f"forgot {rule_id} (TK-A001 for sh) in box e2e")
    process, err = _exec(*_asks(0))
    held_again = _held(process, err)  # asked again: a person must answer
    process.send_signal(signal.SIGINT)  # Ctrl+C while held withdraws it
    _, rest = process.communicate(timeout=WAIT)
    assert process.returncode == 130
    assert (bytes(err) + rest).decode().splitlines()[-1] == (
        f"tkbox exec: stopped by Ctrl+C; the approval {held_again} is withdrawn; nothing ran")
    follower = Follower()
    try:
        assert follower.wait_for(held_again, "withdrawn")["approval"]["answer_reason"]
    finally:
        follower.stop()


def _tty_exec(argv: list[str], key: bytes) -> tuple[int, bytes]:
    """``tkbox exec e2e --tty -- argv`` on a new pty; once it prompts, type ``key``; returns (status, output)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(TKBOX, [TKBOX, "exec", "e2e", "--tty", "--", *argv])
    out = bytearray()
    try:
        assert _read_until(fd, re.compile(re.escape(PROMPT)), out), bytes(out)
        os.write(fd, key)
        _read_until(fd, re.compile(rb"\Z.\A"), out)  # everything, to the end
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert PROMPT + b"\r\n" in out  # the terminal was raw before the prompt showed: the key is not echoed
    return os.waitstatus_to_exitcode(status), bytes(out)


def test_tty_answers_in_place_with_one_key(box):
    status, out = _tty_exec(_asks(5, "-tty"), b"a")
    assert status == 5 and b"done-tty" in out and b"tkbox: approved by uid " in out
    status, out = _tty_exec(_asks(5, "-tty"), b"x")
    assert status == 126 and b"tkbox: not approved (rejected)" in out and b"done-tty" not in out
