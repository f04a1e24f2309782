"""Approvals in the console end to end: the real signer, the real ``tkbox daemon`` and a real box (bubblewrap),
driven with Pilot.  ``git config … core.hooksPath …`` is an ``ask`` under the default pack (TK-A006): the daemon
holds it, the console's prompt pops, and the console's answer decides it."""

from __future__ import annotations

import subprocess

import pytest
from textual.widgets import Input, Log

from e2e.console_pilot import until
from e2e.daemon_process import daemon_process, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tests.console_fakes import quiet_settings
from tkbox_tui.client import DaemonClient
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import ApprovalPrompt, ApprovalsScreen, BoxScreen, MainScreen
from tkbox_tui.console.widgets import BoxTable, ExecPanel

pytestmark = pytest.mark.e2e
ASKED = ["git", "config", "--file", "/tmp/hooks.cfg", "core.hooksPath", ".hooks"]
"""An ``ask`` (TK-A006: a git setting that makes git run a program) that runs and exits 0 in any box."""


def _console(daemon, tmp_path):
    client = DaemonClient(daemon.paths.api_socket)
    app = make_app(client, settings=quiet_settings(tmp_path / "config", prompt_arm_delay=0))
    app.bell = lambda: None  # type: ignore[method-assign]
    return client, app


def _panel_output(app) -> str:
    return "\n".join(app.main_screen.query_one(ExecPanel).query_one("#exec-output", Log).lines)


async def _run_in_panel(app, pilot, argv: list[str]) -> None:
    if not app.main_screen.query_one(ExecPanel).has_class("-open"):
        await pilot.press("e")
    app.main_screen.query_one(ExecPanel).query_one("#exec-argv", Input).value = " ".join(argv)
    await pilot.press("enter")


async def test_an_ask_pops_the_prompt_a_runs_it_and_r_remembers_it_for_the_next(daemon, tmp_path):
    checkout = make_checkout(tmp_path)
    tkbox("run", "--name", "asks", "--workspace", str(checkout))
    client, app = _console(daemon, tmp_path)
    async with client, app.run_test(size=(140, 44)) as pilot:
        await until(pilot, lambda: app.state.connected and app.main_screen.query_one(BoxTable).box_ids)
        await _run_in_panel(app, pilot, ASKED)
        await until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.shown_id)
        prompt = app.screen
        first = app.approvals.get(prompt.shown_id)
        assert first.asked["command"] == " ".join(ASKED) and first.rule_ids == ("TK-A006",)
        assert f"[held for approval {first.id} (TK-A006," in _panel_output(app)
        assert app.approvals_pending == 1
        await pilot.press("a")  # one key
        await until(pilot, lambda: "[exit 0]" in _panel_output(app))
        assert f"[approved {first.id} by uid" in _panel_output(app)
        await until(pilot, lambda: app.approvals.get(first.id).state == "approved" and app.approvals_pending == 0)
        assert isinstance(app.screen, MainScreen)

        # approve and remember: the next identical ask runs without a prompt, approved by the remembered rule
        await _run_in_panel(app, pilot, [*ASKED[:-1], ".hooks2"])
        await until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.shown_id)
        second = app.screen.shown_id
        await pilot.press("r")
        await until(pilot, lambda: _panel_output(app).count("[exit 0]") == 2)
        await until(pilot, lambda: app.approvals.get(second).state == "approved")
        assert app.approvals.get(second).remember
        box = tkbox_json("ls")[0]
        assert [rule["program"] for rule in box["remembered"]] == ["git"]
        await _run_in_panel(app, pilot, [*ASKED[:-1], ".hooks3"])
        await until(pilot, lambda: _panel_output(app).count("[exit 0]") == 3)
        third = [info for info in app.approvals.ordered if info.id not in (first.id, second)]
        await until(pilot, lambda: [info.remembered_by for info in app.approvals.ordered
                                    if info.id not in (first.id, second)] == [box["remembered"][0]["id"]])
        assert not isinstance(app.screen, ApprovalPrompt) and len(third) == 1 and third[0].state == "approved"

        # the box page lists the remembered rule; d forgets it
        app.main_screen.query_one(BoxTable).focus()
        await pilot.press("escape", "enter")
        await until(pilot, lambda: isinstance(app.screen, BoxScreen) and app.screen.rules)
        assert app.screen.rules[0].program == "git"
        await pilot.press("d", "y")
        await until(pilot, lambda: isinstance(app.screen, BoxScreen) and not app.screen.rules)
        assert tkbox_json("ls")[0]["remembered"] == []
    tkbox("rm", "asks", check=False)


async def test_x_with_a_reason_refuses_the_held_command_126_with_that_reason(daemon, tmp_path):
    checkout = make_checkout(tmp_path)
    tkbox("run", "--name", "refused", "--workspace", str(checkout))
    client, app = _console(daemon, tmp_path)
    async with client, app.run_test(size=(140, 44)) as pilot:
        await until(pilot, lambda: app.state.connected and app.main_screen.query_one(BoxTable).box_ids)
        held = subprocess.Popen([TKBOX, "exec", "refused", "--", *ASKED], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            await until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.shown_id)
            approval_id = app.screen.shown_id
            await pilot.press("x", *"hooks stay as they are", "enter")
            await until(pilot, lambda: app.approvals.get(approval_id).state == "rejected")
            _, stderr = held.communicate(timeout=60)
        finally:
            held.kill()
        assert held.returncode == 126
        assert "hooks stay as they are" in stderr
        assert app.approvals.get(approval_id).answer_reason == "hooks stay as they are"
        await pilot.press("i")
        assert isinstance(app.screen, ApprovalsScreen)
        assert dict(app.screen.detail)["state"].startswith("rejected by uid ")
    tkbox("rm", "refused", check=False)


@pytest.fixture
def quick_daemon():
    tkbox("signer", "up")
    with daemon_process("--approval-wait", "2") as running:
        yield running
    tkbox("signer", "down", check=False)


async def test_an_approval_nobody_answers_expires_and_the_inbox_marks_it(quick_daemon, tmp_path):
    checkout = make_checkout(tmp_path)
    tkbox("run", "--name", "expires", "--workspace", str(checkout))
    client, app = _console(quick_daemon, tmp_path)
    async with client, app.run_test(size=(140, 44)) as pilot:
        await until(pilot, lambda: app.state.connected and app.main_screen.query_one(BoxTable).box_ids)
        await pilot.press("i")  # on the inbox: it shows there, no prompt
        held = subprocess.run([TKBOX, "exec", "expires", "--", *ASKED], capture_output=True, text=True, timeout=60)
        assert held.returncode == 126
        await until(pilot, lambda: [info.state for info in app.approvals.ordered] == ["expired"])
        inbox = app.screen
        assert isinstance(inbox, ApprovalsScreen)
        await until(pilot, lambda: [info.state for info in inbox.shown] == ["expired"])
        assert app.approvals_pending == 0
    tkbox("rm", "expires", check=False)
