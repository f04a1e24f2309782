"""The box page and the event page end to end: the real signer, the real ``tkbox daemon`` and a real box (bubblewrap).
Commands run through ``tkbox exec`` and through the exec panel; the console reads what the daemon kept of them."""

from __future__ import annotations

import subprocess

import pytest
from textual.widgets import DataTable, Input, Log

from e2e.console_pilot import until
from e2e.daemon_process import make_checkout
from e2e.signer_process import tkbox
from tests.console_fakes import quiet_settings
from tkbox_daemon import limits
from tkbox_tui.client import DaemonClient
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import BoxScreen, EventScreen, MainScreen
from tkbox_tui.console.widgets import BoxTable, EventLog, ExecPanel

pytestmark = pytest.mark.e2e


async def test_the_box_page_shows_what_the_daemon_kept_escaped_and_cut_to_its_tail(daemon, tmp_path):
    checkout = make_checkout(tmp_path)
    tkbox("run", "--name", "pages", "--workspace", str(checkout))
    tkbox("exec", "pages", "--", "seq", "1", "100000")
    hostile = tkbox("exec", "pages", "--", "printf", "\\033]52;c;cm0gLXJmIC8K\\007 \\033[2J wiped?\\n", check=False)
    assert hostile.returncode == 0
    client = DaemonClient(daemon.paths.api_socket)
    app = make_app(client, settings=quiet_settings(tmp_path / "config"))
    async with client, app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.state.connected and app.screen.query_one(BoxTable).box_ids)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, BoxScreen) and app.screen.output is not None
                    and app.screen.output.exec.id == 2)
        page = app.screen
        table = page.query_one("#exec-table", DataTable)
        assert [str(table.get_row("1")[i]) for i in (2, 5, 6)] == ["seq 1 100000", "exit 0", "guest"]
        seq, _ = page.execs
        expected = subprocess.run(["seq", "1", "100000"], capture_output=True, check=True).stdout
        assert (seq.stdout.kept, seq.stdout.total) == (limits.EXEC_OUTPUT_TAIL.default, len(expected))
        shown = "\n".join(page.query_one("#exec-page-output", Log).lines)
        assert "\x1b" not in shown and "\\x1b]52;c;cm0gLXJmIC8K\\x07 \\x1b[2J wiped?" in shown
        await pilot.press("up")
        await until(pilot, lambda: page.output is not None and page.output.exec.id == 1)
        lines = page.query_one("#exec-page-output", Log).lines
        assert lines[-2:] == ["100000", "── stderr: 0 B ──"] and "the last 256.0 KiB of 575.1 KiB" in lines[0]
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        # the exec panel, then the page again: the new exec is there, and Enter in the log opens its event
        await pilot.press("e")
        panel = app.screen.query_one(ExecPanel)
        panel.query_one("#exec-argv", Input).value = "!echo from the panel | tr a-z A-Z"
        await pilot.press("enter")
        await until(pilot, lambda: "[exit 0]" in "\n".join(panel.query_one("#exec-output", Log).lines))
        assert "FROM THE PANEL" in "\n".join(panel.query_one("#exec-output", Log).lines)
        await pilot.press("escape")
        log = app.screen.query_one(EventLog)
        await until(pilot, lambda: "exec.finished" in log.lines[-1] if log.lines else False)
        log.focus()
        await pilot.press("enter")
        assert isinstance(app.screen, EventScreen) and app.screen.event.kind == "exec.finished"
        assert ("data.command", "sh -c 'echo from the panel | tr a-z A-Z'") in app.screen.fields
        await pilot.press("escape")
        app.screen.query_one(BoxTable).focus()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, BoxScreen) and len(app.screen.execs) == 3
                    and app.screen.output is not None and app.screen.output.exec.id == 3)
        assert app.screen.output.stdout == b"FROM THE PANEL\n"
    tkbox("rm", "pages")
