"""A hostile guest inside a real bubblewrap box: garbage on the agent channel stops the box; the daemon goes on."""

from __future__ import annotations

import shutil

import pytest

from tests.daemon_harness import make_workspace, running_daemon
from tkbox_daemon.box.bwrap import BwrapBackend
from tkbox_daemon.boxes.manager import GUEST_DIR, install_guest
from tkbox_tui.client import DaemonError

pytestmark = pytest.mark.e2e

HOSTILE_GUEST = r'''
import json, socket
boot = socket.socket(socket.AF_UNIX); boot.connect("/run/tkbox/boot.sock")
config = json.loads(boot.makefile("rb").read())
agent = socket.socket(socket.AF_UNIX); agent.connect(config["agent_socket"])
agent.recv(65536)
agent.sendall(bytes.fromhex(GARBAGE))
agent.recv(1)
'''


@pytest.mark.parametrize("garbage, reason", [
    ("ff00000001aa", "unknown frame type"),
    ("02" + "7fffffff", "exceeds the limit"),
    ("0200000014" + b'{"id":999,"ok":true}'.hex(), "no request waiting"),
])
async def test_a_guest_sending_malformed_frames_is_stopped_and_the_daemon_is_unharmed(tmp_path, garbage, reason):
    if not shutil.which("bwrap"):
        pytest.fail("bubblewrap is not installed: run scripts/setup.sh")
    source = tmp_path / "hostile"
    source.mkdir()
    (source / "__main__.py").write_text(f"GARBAGE = {garbage!r}\n" + HOSTILE_GUEST)
    async with running_daemon(tmp_path, backend=BwrapBackend()) as daemon, daemon.client() as client:
        daemon.manager.guest_dir = install_guest(source, daemon.config.paths.layers_root / "hostile")
        with pytest.raises(DaemonError) as failed:
            await client.create_box({"name": "bad", "workspace": str(make_workspace(tmp_path))})
        assert failed.value.code == "box_failed"
        stored = await client.stored_events()
        errors = [event for event in stored if event.kind == "guest.protocol_error"]
        assert errors and reason in errors[0].data["reason"]
        daemon.manager.guest_dir = install_guest(GUEST_DIR, daemon.config.paths.layers_root / "guest")
        healthy = await client.create_box({"name": "good", "workspace": str(tmp_path / "ws")})
        assert healthy.state == "running"
