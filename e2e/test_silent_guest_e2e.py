"""A guest that stops answering cannot hang the host (issue 8): the real signer, daemon, boxes and guest, with the
guest frozen from the host (SIGSTOP to its host pid, which nothing inside the box can do any more).

`tkbox exec --timeout 5` ends within its limit plus the documented grace (``limits.EXEC_END_GRACE``), the box is
failed with the unanswered request named, the allowed decision still gets its completion (the host's word), and
`tkbox stop` of another silent box ends within ``limits.STOP_GRACE`` with the same kind of reason. The patch of a
box the host ended is still saved: the host makes it from the box's layers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from e2e.daemon_process import daemon_process, events, make_checkout, next_event
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tkbox_daemon import limits

pytestmark = pytest.mark.e2e

# A bound for the test itself, never an assertion on time: far above limit + grace.
BOUND_S = 120


@pytest.fixture(params=["bwrap", "ns"])
def daemon(request, tmp_path):
    tkbox("signer", "up")
    with daemon_process(backend=request.param) as running:
        yield {"daemon": running, "checkout": make_checkout(tmp_path)}
    tkbox("signer", "down", check=False)


def _silenced_box(daemon, name: str) -> dict:
    info = tkbox_json("run", "--name", name, "--workspace", str(daemon["checkout"]))
    assert info["state"] == "running"
    made = subprocess.run([TKBOX, "exec", name, "--", "sh", "-c", "echo changed > /workspace/tracked.txt"],
                          capture_output=True, timeout=BOUND_S)
    assert made.returncode == 0, made.stderr
    pid = tkbox_json("ls")  # the guest's host pid, as the daemon reports it
    guest_pid = next(box["pid"] for box in pid if box["name"] == name)
    os.kill(guest_pid, signal.SIGSTOP)  # from the host: the guest now answers nothing
    return info


def _box(name: str) -> dict:
    return next(box for box in tkbox_json("ls") if box["name"] == name)


def test_a_silent_guest_ends_an_exec_at_its_limit_plus_grace_and_the_box_fails_with_the_reason(daemon):
    _silenced_box(daemon, "silent")
    ended = subprocess.run([TKBOX, "exec", "--timeout", "5", "silent", "--", "true"], capture_output=True,
                           timeout=5 + limits.EXEC_END_GRACE.default + limits.GUEST_PING_DEADLINE.default)
    assert ended.returncode == 2
    assert b"did not" in ended.stderr and b"the host ended the box" in ended.stderr
    box = _box("silent")
    assert box["state"] == "failed" and "the guest did not" in box["reason"] and "request" in box["reason"]
    kinds = [event["kind"] for event in events("silent")]
    assert "box.failed" in kinds and "guest.protocol_error" not in kinds
    finished = [event for event in events("silent") if event["kind"] == "exec.finished"]
    assert finished[-1]["data"]["reported_by"] == "host"
    assert finished[-1]["data"]["host"]["outcome"] == "host_time_limit"
    diff = subprocess.run([TKBOX, "diff", "silent", "--raw"], capture_output=True, timeout=BOUND_S)
    assert diff.returncode == 0 and b"+changed" in diff.stdout  # the patch is the host's: not lost


def test_a_guest_silenced_while_a_command_runs_cannot_hold_it_past_its_limit(daemon):
    info = tkbox_json("run", "--name", "quiet", "--workspace", str(daemon["checkout"]))
    running = subprocess.Popen([TKBOX, "exec", "--timeout", "5", "quiet", "--", "sleep", "600"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    next_event("exec.started", "quiet")
    os.kill(info["pid"], signal.SIGSTOP)  # its own timeout would have ended the command: now only the host can
    _, stderr = running.communicate(timeout=BOUND_S)
    assert running.returncode == 2
    assert b"did not report the end of exec request" in stderr and b"5 s time limit" in stderr
    finished = [event for event in events("quiet") if event["kind"] == "exec.finished"]
    assert finished[-1]["data"]["host"]["outcome"] == "host_time_limit"
    assert _box("quiet")["state"] == "failed"


def test_stop_of_a_silent_guest_kills_the_box_after_its_grace_and_names_the_unanswered_request(daemon):
    _silenced_box(daemon, "mute")
    stopped = subprocess.run([TKBOX, "stop", "mute", "--json"], capture_output=True, timeout=BOUND_S)
    assert stopped.returncode == 0, stopped.stderr
    box = json.loads(stopped.stdout)
    assert box["state"] == "failed"
    assert "the guest did not answer shutdown (request" in box["reason"] and "killed the box" in box["reason"]
    diff = subprocess.run([TKBOX, "diff", "mute", "--raw"], capture_output=True, timeout=BOUND_S)
    assert diff.returncode == 0 and b"+changed" in diff.stdout


def test_a_guest_killed_for_memory_is_reported_as_such_not_as_a_protocol_error(daemon):
    tkbox_json("run", "--name", "full", "--workspace", str(daemon["checkout"]), "--memory", "64M")
    # tmpfs pages count against the box's memory but belong to no process: the kernel kills the biggest one
    subprocess.run([TKBOX, "exec", "full", "--", "sh", "-c", "head -c 128M /dev/zero > /tmp/fill"],
                   capture_output=True, timeout=BOUND_S)
    next_event("box.failed", "full")  # the exec's end can reach its client before the box's stop ends
    box = _box("full")
    assert box["state"] == "failed"
    kinds = [event["kind"] for event in events("full")]
    assert "guest.protocol_error" not in kinds
    # whichever the host saw first, PID 1's exit or its channel's end, the reason is what the host saw
    assert "ended with signal 9" in box["reason"], box["reason"]
    assert "the box's memory limit made the kernel kill" in box["reason"], box["reason"]
