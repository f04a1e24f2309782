"""Approvals where commands run: a held exec in the exec panel (the prompt pops, ``a`` and its output follows), the
``s`` shell's refusal told from its approval, and the box page's remembered rules (shown, forgotten after a
confirm); against ``FakeDaemonClient``."""

from __future__ import annotations

from textual.widgets import DataTable, Log

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_approval,
    make_box,
    make_rule,
    quiet_settings,
    record_notifications,
    two_boxes,
    wait_until,
)
from tkbox_tui.console import shell
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import ApprovalPrompt, BoxScreen, ConfirmModal, MainScreen
from tkbox_tui.console.widgets import ExecPanel

SIZE = (120, 36)


def _app(tmp_path, fake=None):
    fake = fake or FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", prompt_arm_delay=0), clock=fixed_clock)
    app.bell = lambda: None  # type: ignore[method-assign]
    app.notes = record_notifications(app)  # type: ignore[attr-defined]
    return fake, app


async def _started(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)


def _output(app) -> str:
    return "\n".join(app.main_screen.query_one(ExecPanel).query_one("#exec-output", Log).lines)


async def test_a_held_exec_says_so_in_the_panel_pops_the_prompt_and_a_runs_it(tmp_path):
    fake, app = _app(tmp_path)
    fake.hold("sudo")
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("e", *"sudo true", "enter")
        await wait_until(pilot, lambda: "held for approval" in _output(app))
        approval_id = fake.approval_list[0].id
        assert (f"[held for approval {approval_id} (TK-A010, runs a command as root) — a to approve]"
                in _output(app))
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.shown_id == approval_id)
        assert "[exit" not in _output(app)  # it waits
        await pilot.press("a")
        await wait_until(pilot, lambda: "[exit 0]" in _output(app))
        lines = _output(app).splitlines()
        approved = lines.index(f"[approved {approval_id} by uid 1000 (op)]")
        assert lines[approved + 1:] == ["sudo true", "[exit 0]"]  # the command's output follows as usual
        assert isinstance(app.screen, MainScreen)


async def test_a_rejected_exec_ends_126_with_the_reason_in_the_panel(tmp_path):
    fake, app = _app(tmp_path)
    fake.hold("sudo")
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("e", *"sudo reboot", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.shown_id)
        await pilot.press("x", *"not today", "enter")
        await wait_until(pilot, lambda: "[denied:" in _output(app))
        assert "[denied: rejected by uid 1000 (op): not today]" in _output(app)
        assert not app.main_screen.query_one(ExecPanel).running


def _shell_app(tmp_path, monkeypatch, answer: dict):
    fake, app = _app(tmp_path)
    monkeypatch.setattr(shell, "exec_supports_tty", lambda: True)

    def run_suspended(app_, command):
        # what happens while tkbox exec --tty holds the shell: the daemon opens an approval, someone answers it
        approval = fake.ask(make_approval("apr-00000000000000e5", command="/bin/sh", program="/bin/sh",
                                          rule_ids=("TK-A005",), reason="runs code it reads from standard input"))
        fake.settle(approval.id, **answer)
        return 126

    monkeypatch.setattr(shell, "run_suspended", run_suspended)
    return fake, app


async def test_a_shell_that_was_rejected_says_who_rejected_it_and_why(tmp_path, monkeypatch):
    fake, app = _shell_app(tmp_path, monkeypatch, {"state": "rejected", "answered_by": "uid 0 (root)",
                                                   "answer_reason": "use e for one command"})
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        await pilot.press("s")
        await wait_until(pilot, lambda: any(n.title == "shell refused" for n in app.notes), rounds=2000)
        note = next(n for n in app.notes if n.title == "shell refused")
        assert note.message == ("The shell was not approved, so it was refused: the policy asks a person before "
                                "/bin/sh (TK-A005: runs code it reads from standard input), and uid 0 (root) "
                                "rejected it: use e for one command. s asks again; meanwhile e runs one command at "
                                "a time, each decided on its own.")


async def test_a_shell_whose_approval_expired_says_nobody_answered(tmp_path, monkeypatch):
    fake, app = _shell_app(tmp_path, monkeypatch, {"state": "expired", "kind": "approval.expired"})
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        await pilot.press("s")
        await wait_until(pilot, lambda: any(n.title == "shell refused" for n in app.notes), rounds=2000)
        note = next(n for n in app.notes if n.title == "shell refused")
        assert "and nobody answered before it expired." in note.message


def test_the_shell_module_no_longer_says_approvals_do_not_exist():
    text = (shell.__doc__ or "") + shell.describe_exit(126)
    assert "cannot take approvals" not in text and "approvals issue" not in text
    assert "offers the answer in place" in (shell.__doc__ or "")


async def test_the_box_page_lists_remembered_rules_and_d_forgets_one_after_a_confirm(tmp_path):
    rules = [make_rule("rem-0123456789ab", "sudo"), make_rule("rem-ba9876543210", "git\x1b[2J",
                                                               rule_id="TK-A020")]
    fake = FakeDaemonClient([make_box("b1", "web-api", remembered=[rule.to_json() for rule in rules])])
    fake, app = _app(tmp_path, fake)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen) and app.screen.loads)
        page = app.screen
        table = page.query_one("#remembered-table", DataTable)
        assert [rule.id for rule in page.rules] == ["rem-0123456789ab", "rem-ba9876543210"]
        assert [str(cell) for cell in table.get_row("rem-ba9876543210")][:3] == [
            "rem-ba9876543210", "git\\x1b[2J", "TK-A020"]
        assert table.display and page.query_one("#remembered-title").display
        table.focus()
        await pilot.press("down", "d")
        assert isinstance(app.screen, ConfirmModal) and "rem-ba9876543210 (TK-A020 for git\\x1b[2J)" in \
            app.screen.question
        await pilot.press("n")
        assert ("forget_rule", "b1", "rem-ba9876543210") not in fake.calls
        await pilot.press("d", "y")
        await wait_until(pilot, lambda: [rule.id for rule in page.rules] == ["rem-0123456789ab"])
        assert ("forget_rule", "b1", "rem-ba9876543210") in fake.calls
        assert any(n.message.startswith("forgot rem-ba9876543210") for n in app.notes)


async def test_a_box_without_remembered_rules_hides_the_table_and_d_says_how_one_is_made(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen) and app.screen.loads)
        assert not app.screen.query_one("#remembered-table").display
        await pilot.press("d")
        assert isinstance(app.screen, BoxScreen)
        assert any("approve and remember" in n.message for n in app.notes)


async def test_a_rule_added_while_the_box_page_is_open_shows_there(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen) and app.screen.loads)
        page = app.screen
        rule = make_rule()
        fake.box_list[0] = make_box("b1", "web-api", remembered=[rule.to_json()])
        fake.emit("b1", "approval.rule_added", rule=rule.to_json())
        await wait_until(pilot, lambda: [item.id for item in page.rules] == [rule.id])
        assert page.query_one("#remembered-table").display
