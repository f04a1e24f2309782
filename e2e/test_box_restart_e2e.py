"""Boxes outlive a daemon SIGKILL, end to end: the real signer, a real ``tkbox daemon`` killed with SIGKILL and
started again, real boxes on both backends, driven through the ``tkbox`` command.

The stopped box comes back with its saved patch (``tkbox diff``); the running one comes back ``lost`` — its
processes went with the daemon (the box guards), it runs nothing more — and the restart gives back both of its
host uids (the daemon's claims are counted in the host-wide uid registry).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess

import pytest

from e2e.daemon_process import daemon_process, events, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tkbox_daemon.box.uids import UidAllocator
from tkbox_daemon.config import DaemonPaths

pytestmark = pytest.mark.e2e


def _claims() -> dict[int, str]:
    """This daemon's claims in the host-wide uid registry: uid -> the box that claims it."""
    paths = DaemonPaths.from_env()
    with contextlib.closing(UidAllocator(paths.uid_registry)) as registry:
        claims = registry.listing().claims
    return {uid: claim.box for uid, claim in claims.items() if claim.holder.daemon == str(paths.state_dir)}


def _wait_gone(pidfd: int, seconds: float) -> bool:
    """Whether the process behind ``pidfd`` ends within ``seconds`` (the fd turns readable: no polling loop)."""
    return bool(select.select([pidfd], [], [], seconds)[0])


@pytest.fixture
def signer():
    tkbox("signer", "up")
    yield
    tkbox("signer", "down", check=False)


@pytest.mark.parametrize("backend", ["bwrap", "ns"])
def test_after_a_sigkill_the_stopped_box_keeps_its_diff_and_the_running_one_is_lost(signer, tmp_path, backend):
    checkout = make_checkout(tmp_path)
    with daemon_process(backend=backend) as first:
        kept = tkbox_json("run", "--name", "kept", "--workspace", str(checkout))
        live = tkbox_json("run", "--name", "live", "--workspace", str(checkout))
        wrote = subprocess.run([TKBOX, "exec", "kept", "--", "sh", "-c", "echo made > /workspace/new.txt"],
                               capture_output=True, timeout=60)
        assert wrote.returncode == 0, wrote.stderr
        tkbox("stop", "kept")
        assert sorted(_claims().values()) == sorted([kept["id"]] * 2 + [live["id"]] * 2)
        box_init = os.pidfd_open(live["pid"])
        try:
            first.process.send_signal(signal.SIGKILL)
            first.process.wait(30)
            assert _wait_gone(box_init, 30), "the running box outlived its daemon"
        finally:
            os.close(box_init)

        with daemon_process(backend=backend):
            boxes = {box["name"]: box for box in tkbox_json("ls")}
            assert {name: box["state"] for name, box in boxes.items()} == {"kept": "stopped", "live": "lost"}
            lost = boxes["live"]
            assert "the daemon ended while the box was running" in lost["reason"]
            assert lost["run_state"] == "orphaned" and f"its run {live['run_id']} stays open" in lost["reason"]
            assert "lost" in tkbox("ls").stdout
            assert sorted(_claims().values()) == [kept["id"]] * 2  # both of the lost box's uids are free

            diff = tkbox("diff", "kept").stdout
            assert "new.txt" in diff and "+made" in diff
            refused = subprocess.run([TKBOX, "exec", "live", "--", "true"], capture_output=True, timeout=60)
            assert refused.returncode != 0 and b"is lost" in refused.stderr
            assert tkbox("stop", "live", check=False).returncode != 0

            tkbox("rm", "live")
            assert sorted(_claims().values()) == [kept["id"]] * 2
            assert not DaemonPaths.from_env().box_layers(live["id"]).exists()
            tkbox("rm", "kept")
            assert _claims() == {} and tkbox_json("ls") == []
            assert [e["kind"] for e in events() if e["box_id"] == live["id"]].count("box.lost") == 1
