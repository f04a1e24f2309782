"""Boxes started ahead (``boxes/pool.py``), end to end: a real ``tkbox daemon`` with bwrap keeps one box running
without a workspace; ``tkbox run`` takes it and its workspace is attached in the running box.

- The taken box is a whole box: ``/workspace`` is the overlay, ``/run/tkbox/base`` is read-only, nothing in the
  box can unmount either (the empty staging point below never shows), and its jobs run at the usual priority
  (the box waited at a lower one).
- A box started ahead that dies before it is taken is discarded (its dirs go) and replaced; the next create takes
  the replacement.
- A daemon killed with a box started ahead: its guard ends the box, and the next daemon clears what it left (its
  layers, dirs and marker) and gives back its uids.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from box_lab import require_backend

from e2e.daemon_process import daemon_process, events, make_checkout, next_event
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tkbox_daemon import limits
from tkbox_daemon.box import cgroups
from tkbox_daemon.boxes.pool import MARKER_DIR

pytestmark = pytest.mark.e2e


@pytest.fixture
def signer():
    require_backend("bwrap")
    tkbox("signer", "up")
    yield
    tkbox("signer", "down", check=False)


def _next_ready(after: int) -> dict:
    """The first ``daemon.pool`` event past ``after``: a box is ready (a failure to start one fails the test)."""
    event = next_event("daemon.pool", after=after)
    assert "reason" not in event["data"], event
    return event


def _ready_ids(paths) -> list[str]:
    return sorted(os.listdir(paths.state_dir / MARKER_DIR))


def _exec(box: str, script: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([TKBOX, "exec", box, "--", "sh", "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert not check or result.returncode == 0, result.stderr
    return result


def _processes_of(uids: set[int]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        real = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        if real in uids:
            found.append(int(entry))
    return found


def _claimed_uids(paths, box_id: str) -> set[int]:
    claims = set()
    for entry in os.listdir(paths.uid_registry):
        if entry.isdigit():
            try:
                claim = json.loads((paths.uid_registry / entry).read_text())
            except (OSError, ValueError):
                continue
            if claim.get("box") == box_id:
                claims.add(int(entry))
    return claims


def test_a_taken_box_is_whole_and_runs_its_jobs_at_the_usual_priority(signer, tmp_path):
    checkout = make_checkout(tmp_path)
    with daemon_process("--start-ahead", "1") as daemon:
        _next_ready(0)
        (ready,) = _ready_ids(daemon.paths)
        info = tkbox_json("run", "--name", "warm", "--workspace", str(checkout))
        assert info["id"] == ready
        assert [e for e in events("warm") if e["kind"] == "box.created"][0]["data"]["started_ahead"] is True
        assert _exec("warm", "cat /workspace/tracked.txt").stdout == "tracked\n"
        mounts = _exec("warm", "cat /proc/self/mountinfo").stdout.splitlines()
        workspace = [line for line in mounts if line.split()[4] == "/workspace"]
        assert workspace[-1].split(" - ")[1].startswith("overlay "), workspace
        base = [line for line in mounts if line.split()[4] == "/run/tkbox/base"]
        assert "ro" in base[-1].split()[5].split(","), base
        refused = _exec("warm", "touch /run/tkbox/base/x; umount /workspace; umount -l /run/tkbox/base; "
                                "ls /workspace", check=False)
        assert "tracked.txt" in refused.stdout  # still the workspace: neither mount came off
        assert not (checkout / "x").exists()
        nice = _exec("warm", "cut -d' ' -f19 /proc/self/stat").stdout.strip()
        assert nice == "0"
        tkbox("rm", "warm")


def test_a_box_started_ahead_that_dies_is_replaced(signer, tmp_path):
    checkout = make_checkout(tmp_path)
    with daemon_process("--start-ahead", "1") as daemon:
        first = _next_ready(0)
        (dead,) = _ready_ids(daemon.paths)
        uids = _claimed_uids(daemon.paths, dead)
        assert len(uids) == 2
        for pid in _processes_of(uids):
            with contextlib.suppress(ProcessLookupError):  # gone with the box's PID 1, killed just before
                os.kill(pid, signal.SIGKILL)
        _next_ready(first["seq"])
        (replacement,) = _ready_ids(daemon.paths)
        assert replacement != dead
        assert not daemon.paths.box_layers(dead).exists() and not daemon.paths.box_state(dead).exists()
        assert _claimed_uids(daemon.paths, dead) == set()
        info = tkbox_json("run", "--name", "next", "--workspace", str(checkout))
        assert info["id"] == replacement and _exec("next", "ls /workspace").stdout.split() == [
            "tracked.txt", "untracked.txt"]
        tkbox("rm", "next")


def test_a_daemon_killed_with_a_box_started_ahead_leaves_nothing_after_the_next_start(signer, tmp_path):
    with daemon_process("--start-ahead", "1", keep_layers=True) as daemon:
        _next_ready(0)
        (left,) = _ready_ids(daemon.paths)
        uids = _claimed_uids(daemon.paths, left)
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait(60)
    with daemon_process("--start-ahead", "0") as daemon:
        assert _ready_ids(daemon.paths) == []
        assert not daemon.paths.box_layers(left).exists() and not daemon.paths.box_state(left).exists()
        assert _claimed_uids(daemon.paths, left) == set()
        assert _processes_of(uids) == []  # the guards ended the box with its daemon
        assert tkbox_json("ls") == []


def test_a_box_asking_for_more_memory_takes_one_started_ahead_with_its_limit_raised(signer, tmp_path):
    """Started with the default memory limit, taken for a box with twice as much: on cgroup v1 the memory+swap
    limit must go up first, or the kernel refuses the memory limit."""
    checkout = make_checkout(tmp_path)
    wanted = 2 * limits.BOX_MEMORY.default
    with daemon_process("--start-ahead", "1"):
        _next_ready(0)
        info = tkbox_json("run", "--name", "big", "--workspace", str(checkout), "--memory", str(wanted))
        assert [e for e in events("big") if e["kind"] == "box.created"][0]["data"]["started_ahead"] is True
        group = cgroups.CGROUP_ROOT / "memory" / cgroups.PARENT_GROUP / info["id"]
        if group.is_dir():  # cgroup v1 (a v2 host has no memory+swap order to keep)
            for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
                if (group / name).exists():
                    assert int((group / name).read_text()) == wanted, name
        assert _exec("big", "echo ok").stdout == "ok\n"
        tkbox("rm", "big")
