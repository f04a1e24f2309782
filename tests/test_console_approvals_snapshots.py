"""SVG snapshots of the approvals inbox and the approval prompt in every shipped theme (the
``test_console_snapshots.py`` pattern): fixed clock, ids and approvals; no blink, no ticks; a fixed terminal size.
Each also asserts what the screen holds.  Update with ``pytest --snapshot-update`` only after reading the report."""

from __future__ import annotations

import pytest

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_approval,
    make_event,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import ApprovalPrompt, ApprovalsScreen

THEMES = ["tkbox-dark", "tkbox-light", "tkbox-high-contrast"]
SIZE = (110, 34)


def approvals_app(tmp_path, theme: str):
    fake = FakeDaemonClient(two_boxes())
    fake.history = [make_event(1, "b1", "box.created", name="web-api"), make_event(2, "b1", "box.started")]
    fake.approval_list = [
        make_approval("apr-00000000000000a0", command="sudo apt-get install -y jq", state="approved",
                      created_at="2025-03-01T11:57:10Z", answered_at="2025-03-01T11:57:31Z",
                      answered_by="uid 1000 (op)", remember=True),
        make_approval("apr-00000000000000a1", command="sudo systemctl restart nginx", created_at="2025-03-01T11:59:45Z"),
        make_approval("apr-00000000000000a2", "b2", "batch-jobs", "git config core.hooksPath .hooks \x1b[2J",
                      rule_ids=("TK-A020",), reason="changes where git finds hooks: code that runs on commit",
                      created_at="2025-03-01T11:59:52Z", expires_at="2025-03-01T12:01:52Z"),
        make_approval("apr-00000000000000a3", "b2", "batch-jobs", "/bin/sh", state="rejected",
                      rule_ids=("TK-A005",), reason="runs code it reads from standard input",
                      created_at="2025-03-01T11:58:00Z", answered_at="2025-03-01T11:58:20Z",
                      answered_by="uid 0 (root)", answer_reason="use e for one command"),
    ]
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", theme=theme, prompt_arm_delay=0),
                   clock=fixed_clock)
    app.bell = lambda: None  # type: ignore[method-assign]
    return app


async def _prompt(pilot) -> ApprovalPrompt:
    app = pilot.app
    await wait_until(pilot, lambda: app.state.connected and app.state.last_seq == 2)
    await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.body)
    app.clear_notifications()  # the arrival notification covers the screen's corner
    await pilot.pause()
    return app.screen


@pytest.mark.parametrize("theme", THEMES)
class TestApprovalsSnapshots:
    def test_prompt(self, snap_compare, tmp_path, theme):
        app = approvals_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            prompt = await _prompt(pilot)
            assert app.theme == theme and prompt.shown_id == "apr-00000000000000a1" and prompt.position == (1, 2)

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_inbox(self, snap_compare, tmp_path, theme):
        app = approvals_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _prompt(pilot)
            await pilot.press("escape", "i")
            await wait_until(pilot, lambda: isinstance(app.screen, ApprovalsScreen) and app.screen.detail)
            inbox = app.screen
            assert [info.state for info in inbox.shown] == ["approved", "rejected", "pending", "pending"]
            assert inbox.selected.id == "apr-00000000000000a1" and app.approvals_pending == 2
            await pilot.pause()

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
