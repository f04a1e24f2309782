"""``tkbox exec`` held for a person's approval, and ``tkbox approvals --follow``: the messages of a held exec
driven in process (scripted), then the real ``tkbox`` console script in subprocesses and under a pty against the
fake daemon API (``tests/approvals_fake_api.py``): the held line, the answer from another process or from the
terminal in place, 126 with the reason, Ctrl+C (130), a reader that goes away (141).

Nothing sleeps: every wait reads until the expected bytes arrive, with a deadline as a safety net.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.approvals_fake_api import ME, fake_daemon
from tests.exec_fakes import ScriptedExec
from tkbox_tui.cli.exec_command import EXIT_DENIED, ExecResult, drive_exec
from tkbox_tui.cli.exec_held import PROMPT
from tkbox_tui.cli.report import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, CliError

TKBOX = str(Path(sys.executable).parent / "tkbox")
WAIT = 60  # seconds: the deadline on every wait for bytes or a process
HELD = re.compile(rb"tkbox: held for a person's approval: TK-A001 privilege escalation \(runs as another user, "
                  rb"usually root\) \xe2\x80\x94 approve with: tkbox approve (apr-[0-9a-f]{16}) "
                  rb"\(expires at \d\d:\d\d:\d\d UTC\)\n")
ASK = {"type": "decision", "decision": "ask", "verdict": "ask", "rule_ids": ["TK-A001"], "reason": "privilege"}


@pytest.fixture
def fake(tmp_path):
    with fake_daemon(Path(f"/tmp/tkx-{abs(hash(str(tmp_path))) % 10**8}")) as daemon:
        yield daemon


# -- in process: the messages of a held exec -------------------------------------------------------------------


def test_a_held_exec_says_how_to_approve_it_then_runs_once_approved(capfd):
    call = ScriptedExec([ASK, {"type": "held", "approval_id": "apr-00000000000000aa",
                                "expires_at": "2025-03-01T11:02:00Z"},
                          {"type": "approved", "approval_id": "apr-00000000000000aa", "by": "uid 0 (root)"},
                          {"type": "started", "stdin_window": 0}, (1, b"ok\n"), {"type": "exit", "exit_code": 3}])
    assert drive_exec(call, stream=False) == 3
    out, err = capfd.readouterr()
    assert out == "ok\n"
    assert err == ("tkbox: held for a person's approval: TK-A001 privilege — approve with: tkbox approve "
                   "apr-00000000000000aa (expires at 11:02:00 UTC)\n"
                   "tkbox: approved by uid 0 (root); running it\n")


def test_a_held_exec_that_is_rejected_ends_126_with_the_daemons_reason(capfd):
    call = ScriptedExec([ASK, {"type": "held", "approval_id": "apr-1", "expires_at": "2025-03-01T11:02:00Z"},
                          {"type": "denied", "exit_code": 126, "approval_id": "apr-1", "state": "rejected",
                           "reason": "rejected by uid 0 (root): no"}])
    assert drive_exec(call, stream=False) == EXIT_DENIED
    assert capfd.readouterr().err.splitlines()[1] == "tkbox: not approved (rejected): rejected by uid 0 (root): no"


def test_the_json_result_of_a_held_exec_says_how_its_approval_ended(capfd):
    held = {"type": "held", "approval_id": "apr-1", "expires_at": "2025-03-01T11:02:00Z"}
    expired = ScriptedExec([ASK, held, {"type": "denied", "exit_code": 126, "approval_id": "apr-1",
                                         "state": "expired", "reason": "nobody answered within 120 s"}])
    assert drive_exec(expired, stream=False, collected=ExecResult("web", ["sudo", "true"])) == EXIT_DENIED
    result = json.loads(capfd.readouterr().out)
    assert result["approval"] == {"id": "apr-1", "expires_at": "2025-03-01T11:02:00Z", "state": "expired",
                                  "reason": "nobody answered within 120 s"}
    assert result["exit_code"] == 126 and result["decision"]["decision"] == "ask" and result["exit"] is None
    approved = ScriptedExec([ASK, held, {"type": "approved", "approval_id": "apr-1", "by": "uid 0 (root)"},
                              {"type": "started", "stdin_window": 0}, {"type": "exit", "exit_code": 0}])
    assert drive_exec(approved, stream=False, collected=ExecResult("web", ["sudo", "true"])) == 0
    out, err = capfd.readouterr()
    assert json.loads(out)["approval"] == {"id": "apr-1", "expires_at": "2025-03-01T11:02:00Z",
                                           "state": "approved", "by": "uid 0 (root)"}
    assert err.startswith("tkbox: held for a person's approval:") and err.count("\n") == 1  # the held line only


def test_ctrl_c_while_held_withdraws_instead_of_signalling_a_command_that_never_started():
    call = ScriptedExec([ASK, {"type": "held", "approval_id": "apr-1", "expires_at": ""}, None])

    def operator() -> None:  # the driver runs in the main thread, where the signal is delivered
        assert call.waiting.wait(WAIT)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=operator, daemon=True).start()
    with pytest.raises(CliError) as raised:
        drive_exec(call, stream=False)
    assert raised.value.status == EXIT_INTERRUPTED and raised.value.hint == "the approval apr-1 is withdrawn; nothing ran"
    assert call.closed and call.signals == []  # closing the exec is what withdraws it


# -- the real console script against the fake ---------------------------------------------------------------------


def _read_until(fd: int, pattern: re.Pattern[bytes] | bytes, seen: bytearray) -> re.Match[bytes] | None:
    """Read ``fd`` into ``seen`` until ``pattern`` is in it (or the stream ends: None)."""
    deadline = time.monotonic() + WAIT
    while True:
        found = pattern.search(seen) if isinstance(pattern, re.Pattern) else re.search(re.escape(pattern), seen)
        if found:
            return found
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {pattern!r} in time; got {bytes(seen)!r}"
        if select.select([fd], [], [], remaining)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: a pty whose other end has closed
                chunk = b""
            if not chunk:
                return None
            seen += chunk


def _held_exec(fake, *argv: str) -> tuple[subprocess.Popen[bytes], str, bytearray]:
    """``tkbox exec web [argv…] -- sudo true``, read until it says it is held; returns it and the approval id."""
    command = argv or ("exec", "web", "--", "sudo", "true")
    process = subprocess.Popen([TKBOX, *command], env=fake.env(), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stderr is not None
    err = bytearray()
    found = _read_until(process.stderr.fileno(), HELD, err)
    assert found is not None, bytes(err)
    return process, found.group(1).decode(), err


def _tkbox(fake, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([TKBOX, *argv], env=fake.env(), capture_output=True, timeout=WAIT,
                          stdin=subprocess.DEVNULL)


def test_a_held_exec_runs_once_approved_from_another_terminal(fake):
    process, approval_id, err = _held_exec(fake)
    assert _tkbox(fake, "approve", approval_id).returncode == 0
    out, rest = process.communicate(timeout=WAIT)
    assert process.returncode == 0 and out == b"ran: sudo true\n"
    assert (bytes(err) + rest).decode().splitlines()[1] == f"tkbox: approved by {ME}; running it"


def test_a_held_exec_rejected_with_a_reason_exits_126_with_it(fake):
    process, approval_id, _ = _held_exec(fake)
    assert _tkbox(fake, "reject", approval_id, "--reason", "no").returncode == 0
    out, rest = process.communicate(timeout=WAIT)
    assert process.returncode == 126 and out == b""
    assert rest.decode() == f"tkbox: not approved (rejected): rejected by {ME}: no\n"


def test_a_held_exec_with_json_prints_one_result_with_its_approval(fake):
    process, approval_id, _ = _held_exec(fake, "exec", "web", "--json", "--", "sudo", "true")
    fake.expire(approval_id)
    out, rest = process.communicate(timeout=WAIT)
    assert process.returncode == 126 and rest == b""
    result = json.loads(out)
    assert result["approval"]["state"] == "expired" and result["approval"]["id"] == approval_id
    assert "nobody answered" in result["approval"]["reason"] and result["decision"]["rule_ids"] == ["TK-A001"]


def test_ctrl_c_while_held_withdraws_the_approval_with_one_line_and_130(fake):
    process, approval_id, _ = _held_exec(fake)
    process.send_signal(signal.SIGINT)
    out, rest = process.communicate(timeout=WAIT)
    assert process.returncode == EXIT_INTERRUPTED and out == b""
    assert rest.decode() == (f"tkbox exec: stopped by Ctrl+C; the approval {approval_id} is withdrawn; "
                             "nothing ran\n")
    assert _wait_for_state(fake, approval_id, "withdrawn")


def _wait_for_state(fake, approval_id: str, state: str) -> bool:
    """Follow the approval's events until it reaches ``state`` (the fake settles it when the client has gone)."""
    follower = subprocess.Popen([TKBOX, "approvals", "--all", "--follow", "--json"], env=fake.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert follower.stdout is not None
        seen = bytearray()
        return _read_until(follower.stdout.fileno(),
                           re.compile(rf'"id": "{approval_id}".*"state": "{state}"'.encode()), seen) is not None
    finally:
        follower.kill()
        follower.wait(WAIT)


def test_approvals_follow_prints_the_list_then_each_event_until_ctrl_c(fake):
    earlier = fake.open("sudo id")
    follower = subprocess.Popen([TKBOX, "approvals", "--follow"], env=fake.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert follower.stdout is not None
    out = bytearray()
    assert _read_until(follower.stdout.fileno(), b"  policy: TK-A001", out)  # the list: the earlier one
    process, approval_id, _ = _held_exec(fake)
    pending = re.compile(rf"\d\d:\d\d:\d\d UTC  pending   {approval_id}  web  sudo true  — TK-A001 privilege "
                         rf"escalation \(runs as another user, usually root\); expires at \d\d:\d\d:\d\d UTC; "
                         rf"approve with: tkbox approve {approval_id}\n".encode())
    assert _read_until(follower.stdout.fileno(), pending, out)
    assert _tkbox(fake, "reject", approval_id, "--reason", "not now").returncode == 0
    rejected = re.compile(rf"  rejected  {approval_id}  web  sudo true  — by {re.escape(ME)} at \d\d:\d\d:\d\d UTC: "
                          rf"not now\n".encode())
    assert _read_until(follower.stdout.fileno(), rejected, out)
    follower.send_signal(signal.SIGINT)
    rest, err = follower.communicate(timeout=WAIT)
    process.communicate(timeout=WAIT)
    assert follower.returncode == EXIT_INTERRUPTED and err == b"tkbox approvals: stopped by Ctrl+C\n"
    text = (out + rest).decode()
    assert text.startswith(f"{earlier.id}  pending") and text.count(f"pending   {approval_id}") == 1


def test_approvals_follow_json_is_one_object_per_line(fake):
    listed = fake.open("sudo id")
    follower = subprocess.Popen([TKBOX, "approvals", "--follow", "--json"], env=fake.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert follower.stdout is not None
    out = bytearray()
    assert _read_until(follower.stdout.fileno(), b"\n", out)
    fake.expire(listed.id)
    assert _read_until(follower.stdout.fileno(), b"approval.expired", out)
    _read_until(follower.stdout.fileno(), re.compile(rb"approval.expired[^\n]*\n"), out)
    follower.send_signal(signal.SIGINT)
    rest, err = follower.communicate(timeout=WAIT)
    first, second = (json.loads(line) for line in bytes(out).splitlines())
    assert first == {"event": "listed", "seq": None, "time": None, "approval": listed.to_json()}
    assert second["event"] == "approval.expired" and second["seq"] == 2 and second["approval"]["state"] == "expired"
    assert follower.returncode == EXIT_INTERRUPTED and json.loads(rest) == {
        "error": {"code": "interrupted", "message": "stopped by Ctrl+C", "hint": None}} and err == b""


def test_approvals_end_quietly_when_their_reader_has_gone(fake):
    for number in range(300):  # far more than a pipe holds
        fake.open(f"sudo echo {number} {'x' * 200}")
    for argv in (["approvals"], ["approvals", "--json"], ["approvals", "--follow"], ["approvals", "--follow", "--json"]):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            ran = subprocess.run([TKBOX, *argv], env=fake.env(), stdout=write_end, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL, timeout=WAIT)
        finally:
            os.close(write_end)
        assert (ran.returncode, ran.stderr) == (EXIT_BROKEN_PIPE, b""), argv


# -- --tty: the answer given in place ------------------------------------------------------------------------------


def _tty_exec(fake, key: bytes) -> tuple[int, bytes]:
    """``tkbox exec --tty web -- sudo sh`` on a new pty; once it prompts, type ``key``; returns (status, output)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(TKBOX, [TKBOX, "exec", "--tty", "web", "--", "sudo", "sh"], fake.env())
    out = bytearray()
    try:
        assert _read_until(fd, PROMPT.encode(), out)
        os.write(fd, key)
        while _read_until(fd, b"\x00never", out) is not None:  # everything, to the end
            pass
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert PROMPT.encode() + b"\r\n" in out  # the terminal was raw before the prompt showed: the key is not echoed
    return os.waitstatus_to_exitcode(status), bytes(out)


def test_tty_a_approves_in_place_and_the_command_runs(fake):
    status, out = _tty_exec(fake, b"a")
    assert status == 0 and b"tkbox: approved by " in out and b"ran: sudo sh" in out
    (approval,) = fake.approvals.values()
    assert approval.state == "approved" and not approval.remember and fake.remembered["b-web"] == []


def test_tty_r_approves_and_remembers_as_in_the_console(fake):
    status, _ = _tty_exec(fake, b"Ar")  # `A` is the console's "approve all": here it is not an answer
    (approval,) = fake.approvals.values()
    assert status == 0 and approval.remember and fake.remembered["b-web"][0].approval_id == approval.id
    assert len(fake.answers) == 1


def test_tty_x_rejects_in_place_and_other_keys_are_not_answers(fake):
    status, out = _tty_exec(fake, b"qz\rx")
    assert status == 126 and b"tkbox: not approved (rejected)" in out
    assert [body["answer"] for _, body in fake.answers] == ["reject"]


def test_tty_ctrl_c_while_held_withdraws(fake):
    status, out = _tty_exec(fake, b"\x03")
    (approval,) = fake.approvals.values()
    assert status == EXIT_INTERRUPTED and b"stopped by Ctrl+C; the approval" in out and fake.answers == []
    assert _wait_for_state(fake, approval.id, "withdrawn")


def test_the_tty_help_names_exactly_the_keys_the_in_place_prompt_takes():
    from tkbox_tui.cli.exec_command import _parser as exec_parser
    from tkbox_tui.cli.exec_held import KEYS

    tty_help = next(action.help for action in exec_parser()._actions if "--tty" in action.option_strings)
    named = dict(re.findall(r"\b([a-zA-Z]) (approve and remember|approve|reject)\b", tty_help))
    expected = {key.decode(): ("approve and remember" if remember else verb) for key, (verb, remember) in KEYS.items()}
    assert named == expected
