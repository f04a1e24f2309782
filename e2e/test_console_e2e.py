"""The console end to end: the real signer, the real ``tkbox daemon`` and real boxes, driven with Pilot; and
``tkbox up`` in a real terminal (tmux)."""

from __future__ import annotations

import json
import shutil

import pytest
from textual.widgets import Input, Log

from e2e import terminal
from e2e.console_pilot import until
from e2e.daemon_process import daemon_process, make_checkout
from e2e.signer_process import tkbox, tkbox_json
from tests.console_fakes import quiet_settings
from tkbox_daemon.config import DaemonPaths
from tkbox_tui.client import DaemonClient
from tkbox_tui.console.app import make_app
from tkbox_tui.console.messages import BoxActionFinished
from tkbox_tui.console.screens import NewBoxScreen
from tkbox_tui.console.widgets import BoxTable, EventLog, ExecPanel

pytestmark = pytest.mark.e2e


async def test_create_exec_stop_and_remove_from_the_console(daemon, tmp_path):
    checkout = make_checkout(tmp_path)
    recorded: list = []
    client = DaemonClient(daemon.paths.api_socket)
    app = make_app(client, settings=quiet_settings(tmp_path / "config"))
    async with client, app.run_test(size=(140, 44), message_hook=recorded.append) as pilot:
        await until(pilot, lambda: app.state.connected)
        await pilot.press("n")
        form = app.screen
        assert isinstance(form, NewBoxScreen)
        form.query_one("#field-name", Input).value = "from-console"
        form.query_one("#field-workspace", Input).value = str(checkout)
        await pilot.pause()
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any(isinstance(m, BoxActionFinished) and m.action == "create" for m in recorded))
        table = app.screen.query_one(BoxTable)
        await until(pilot, lambda: len(table.box_ids) == 1)
        await pilot.press("e", *"cat /workspace/tracked.txt", "enter")
        panel = app.screen.query_one(ExecPanel)
        await until(pilot, lambda: "[exit 0]" in "\n".join(panel.query_one("#exec-output", Log).lines))
        assert "tracked" in "\n".join(panel.query_one("#exec-output", Log).lines)
        await until(pilot, lambda: "exec.finished" in "\n".join(app.screen.query_one(EventLog).lines))
        await pilot.press("escape")
        await pilot.press("x", "y")
        await until(pilot, lambda: any(b.state == "stopped" for b in app.state.boxes.values()))
        await pilot.press("d", "y")
        await until(pilot, lambda: not table.box_ids)
    assert tkbox_json("ls") == []


async def test_reconnect_resumes_from_the_last_sequence(tmp_path):
    tkbox("signer", "up")
    client = DaemonClient(DaemonPaths.from_env().api_socket)
    app = make_app(client, settings=quiet_settings(tmp_path / "config"))
    checkout = make_checkout(tmp_path)
    first = daemon_process()
    first.__enter__()
    try:
        async with client, app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.state.connected)
            tkbox("run", "--name", "one", "--workspace", str(checkout))
            await until(pilot, lambda: any(e.kind == "box.started" for e in app.state.events))
            first.__exit__(None, None, None)  # the daemon stops: every box stopped, every run closed
            await until(pilot, lambda: not app.state.connected)
            with daemon_process():
                await until(pilot, lambda: app.state.connected)
                tkbox("run", "--name", "two", "--workspace", str(checkout))
                await until(pilot, lambda: sum(e.kind == "box.started" for e in app.state.events) == 2)
                stored = [json.loads(line)["seq"] for line in
                          (DaemonPaths.from_env().state_dir / "events.jsonl").read_text().splitlines()]
                seen = [event.seq for event in app.state.events]
                assert seen == sorted(set(seen)), "an event was shown twice or out of order"
                assert seen == list(range(1, seen[-1] + 1)), "an event was lost across the restart"
                assert seen == stored[: len(seen)]
    finally:
        tkbox("signer", "down", check=False)


def test_tkbox_up_in_a_real_terminal(tmp_path):
    session, done = terminal.start(make_checkout(tmp_path), (140, 44))
    try:
        screen = terminal.wait_for_screen(session, "box.started")
        assert "Boxes" in screen and "demo" in screen and "running" in screen
        terminal.send(session, "?")
        terminal.wait_for_screen(session, "Keys: Main")
        terminal.send(session, "Escape")
        terminal.wait_for_screen(session, "Boxes", absent="Keys: Main")  # an Escape right before a key reads as Alt+key
        terminal.send(session, "q")
        terminal.wait_done(done)  # the console exited
        boxes = tkbox_json("ls")
        assert [b["name"] for b in boxes] == ["demo"] and boxes[0]["state"] == "running"  # the daemon lives on
    finally:
        terminal.kill(session)
        tkbox("down", check=False)
        paths = DaemonPaths.from_env()
        for directory in (paths.layers_root, paths.channels_root):
            shutil.rmtree(directory, ignore_errors=True)
