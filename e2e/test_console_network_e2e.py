"""The console's network view end to end: the real signer, the real ``tkbox daemon``, a real box (bubblewrap) whose
Python asks its egress proxy for a host off the list, and the console driven with Pilot. The connection is held
(the prompt pops; Esc leaves it pending), ``w`` shows the host with its held count and the url the proxy read,
``a`` shows what the allow would have let through (the held connection) and ``y`` makes it, recorded with the
operator; ``tkbox allowlist`` reads the same list. Rejecting the approval refuses the held connection with a 403.

Nothing is resolved or dialled: the host is held before any lookup and rejected afterwards."""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e.console_pilot import until
from e2e.daemon_process import make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tests.console_fakes import quiet_settings
from tkbox_tui.client import DaemonClient
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import AllowConfirmModal, ApprovalPrompt, MainScreen, NetworkScreen
from tkbox_tui.console.widgets import BoxTable

pytestmark = pytest.mark.e2e
URL = "http://up.test:80/simple/pkg/?page=2"
FETCH = ("import sys, urllib.request, urllib.error\n"
         "try:\n"
         "    urllib.request.urlopen('http://up.test/simple/pkg/?page=2', timeout=300)\n"
         "except urllib.error.HTTPError as exc:\n"
         "    print('status', exc.code, exc.read().decode()[:400]); sys.exit(3)\n")


async def test_a_held_host_shows_in_the_network_view_and_is_allowed_in_place(daemon, tmp_path):
    tkbox("run", "--name", "net", "--workspace", str(make_checkout(tmp_path)))
    fetch = subprocess.Popen([TKBOX, "exec", "net", "--", "python3", "-c", FETCH], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    client = DaemonClient(daemon.paths.api_socket)
    app = make_app(client, settings=quiet_settings(tmp_path / "config", prompt_arm_delay=0))
    app.bell = lambda: None  # type: ignore[method-assign]
    try:
        async with client, app.run_test(size=(140, 44)) as pilot:
            await until(pilot, lambda: app.state.connected and app.main_screen.query_one(BoxTable).box_ids)
            await until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.shown_id,
                        rounds=200000)
            held = app.approvals.get(app.screen.shown_id)
            assert held.kind == "host" and held.asked["url"] == URL
            await pilot.press("escape")  # later: still pending
            await until(pilot, lambda: isinstance(app.screen, MainScreen))
            box_id = app.state.selected_box.id
            await pilot.press("w")
            await until(pilot, lambda: isinstance(app.screen, NetworkScreen) and bool(app.screen.keys))
            row = app.network.find(box_id, "http", "up.test", 80)
            assert row is not None and (row.held, len(row.waiting)) == (1, 1)
            assert [seen.url for seen in row.recent] == [URL]

            await pilot.press("a")
            await until(pilot, lambda: isinstance(app.screen, AllowConfirmModal))
            text = app.screen.text
            assert "adds:    up.test" in text and "it would have let through (1):" in text
            assert "http up.test port 80: held" in text and URL in text
            await pilot.press("y")
            await until(pilot, lambda: app.network.box(box_id).entries == ("up.test",), rounds=200000)
            assert isinstance(app.screen, NetworkScreen)
            assert tkbox_json("allowlist", "net")["entries"] == ["up.test"]
            events = [json.loads(line) for line in tkbox("events", "net", "--json").stdout.splitlines()]
            [change] = [event for event in events
                        if event["kind"] == "egress.allowlist" and event["data"]["action"] == "allow"]
            assert change["data"]["added"] == ["up.test"] and change["data"]["by"].startswith("uid ")

            tkbox("reject", held.id, "--reason", "not this one")
            out, err = fetch.communicate(timeout=120)
            assert fetch.returncode == 3 and "status 403" in out and "egress-not-approved" in out, (out, err)
            await until(pilot, lambda: not row.waiting and row.refused == 1, rounds=200000)
    finally:
        if fetch.poll() is None:
            fetch.kill()
            fetch.wait()
