"""The approvals inbox and the pending count, driven with Pilot against ``FakeDaemonClient``: ``i`` from every screen
and ``:approvals``; two keys approve one; answered ones marked, then dropped; a live countdown; the count in every
footer (never cut at 80 columns) and in the box table; the list read again at every (re)connection."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from textual import events
from textual.widgets.data_table import CellDoesNotExist

from tests.console_fakes import (
    DROP_STREAM,
    FIXED_NOW,
    FakeDaemonClient,
    make_approval,
    make_box,
    make_event,
    quiet_settings,
    record_notifications,
    two_boxes,
    wait_until,
)
from tkbox_tui.client import DaemonError
from tkbox_tui.console.app import make_app
from tkbox_tui.console.keymap import BINDING_IDS
from tkbox_tui.console.screens import (
    ApprovalPrompt,
    ApprovalsScreen,
    BoxScreen,
    ConfirmModal,
    EventScreen,
    HelpScreen,
    MainScreen,
    RejectReasonModal,
)
from tkbox_tui.console.widgets import ApprovalsBadge, BoxTable, CommandBar, EventLog

A1, A2, A3 = "apr-00000000000000a1", "apr-00000000000000a2", "apr-00000000000000a3"


class MovableClock:
    def __init__(self) -> None:
        self.now = FIXED_NOW

    def __call__(self):
        return self.now


def _app(tmp_path, fake=None, clock=None, **settings):
    fake = fake or FakeDaemonClient(two_boxes())
    settings.setdefault("prompt_arm_delay", 0)
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", **settings), clock=clock or MovableClock())
    app.bell = lambda: None  # type: ignore[method-assign]
    app.notes = record_notifications(app)  # type: ignore[attr-defined]
    return fake, app


async def _started(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)


def _answers(fake) -> list[tuple]:
    return [call[1:] for call in fake.calls if call[0] == "answer_approval"]


def _keys(recorded) -> int:
    return len({id(message) for message in recorded if isinstance(message, events.Key)})


def _three_pending(fake) -> None:
    """Three approvals pending when the console connects (the daemon's list), oldest first."""
    fake.approval_list = [
        make_approval(A1, created_at="2025-03-01T11:59:40Z"),
        make_approval(A2, "b2", "batch-jobs", "git config core.hooksPath /tmp/h", created_at="2025-03-01T11:59:41Z"),
        make_approval(A3, command="sudo reboot", created_at="2025-03-01T11:59:42Z")]


async def _inbox(app, pilot) -> ApprovalsScreen:
    if isinstance(app.screen, ApprovalPrompt):
        await pilot.press("escape")
    await pilot.press("i")
    await wait_until(pilot, lambda: isinstance(app.screen, ApprovalsScreen))
    return app.screen


async def test_at_most_two_keys_approve_one_from_the_inbox(tmp_path):
    fake, app = _app(tmp_path)
    _three_pending(fake)
    recorded: list = []
    async with app.run_test(size=(120, 36), message_hook=recorded.append) as pilot:
        await _started(app, pilot)
        inbox = await _inbox(app, pilot)
        assert [info.id for info in inbox.shown] == [A1, A2, A3] and inbox.selected.id == A1
        before = _keys(recorded)
        await pilot.press("a")  # the oldest pending: one key
        await wait_until(pilot, lambda: _answers(fake) == [(A1, "approve", "", False)])
        await pilot.press("j", "a")  # the next: two keys
        await wait_until(pilot, lambda: len(_answers(fake)) == 2)
        assert _keys(recorded) - before == 3
        assert _answers(fake)[1] == (A2, "approve", "", False)
        await wait_until(pilot, lambda: app.approvals_pending == 1)
        # answered ones stay, marked, where they were
        table = inbox.table
        assert [str(table.get_row(approval_id)[0]) for approval_id in (A1, A2, A3)] == ["approved", "approved",
                                                                                       "PENDING"]
        await pilot.press("j", "r")  # approve and remember
        await wait_until(pilot, lambda: _answers(fake)[-1] == (A3, "approve", "", True))
        await pilot.press("a")  # on one already answered: said, not sent
        await pilot.pause()
        assert len(_answers(fake)) == 3


async def test_x_rejects_from_the_inbox_with_a_reason_and_A_approves_all_after_asking(tmp_path):
    fake, app = _app(tmp_path)
    _three_pending(fake)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await _started(app, pilot)
        inbox = await _inbox(app, pilot)
        await pilot.press("x")
        assert isinstance(app.screen, RejectReasonModal) and app.screen.approval.id == A1
        await pilot.press(*"no reboots today", "enter")
        await wait_until(pilot, lambda: _answers(fake) == [(A1, "reject", "no reboots today", False)])
        assert app.screen is inbox
        await pilot.press("A")
        assert isinstance(app.screen, ConfirmModal)
        assert app.screen.question.startswith("Approve all 2 pending approvals (in batch-jobs, web-api)?")
        await pilot.press("y")
        await wait_until(pilot, lambda: app.approvals_pending == 0)
        assert _answers(fake)[1:] == [(A2, "approve", "", False), (A3, "approve", "", False)]
        details = dict(inbox.detail)  # the cursor stayed on the rejected one
        assert details["state"] == "rejected by uid 1000 (op): no reboots today"


async def test_i_opens_the_inbox_from_every_screen_and_colon_approvals_with_tab(tmp_path):
    fake, app = _app(tmp_path)
    fake.history = [make_event(1, "b1", "box.started")]
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await wait_until(pilot, lambda: app.state.last_seq == 1)
        await pilot.press("i")
        assert isinstance(app.screen, ApprovalsScreen)
        await pilot.press("escape", "enter")  # the box page
        await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen))
        await pilot.press("i")
        assert isinstance(app.screen, ApprovalsScreen)
        await pilot.press("escape", "escape")
        app.main_screen.query_one(EventLog).focus()
        await pilot.press("enter")  # the event page
        assert isinstance(app.screen, EventScreen)
        await pilot.press("i")
        assert isinstance(app.screen, ApprovalsScreen)
        await pilot.press("escape", "escape")
        assert isinstance(app.screen, MainScreen)
        await pilot.press("colon", *"appr", "tab")
        assert app.main_screen.query_one(CommandBar).value == "approvals"
        await pilot.press("enter")
        assert isinstance(app.screen, ApprovalsScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        rows = {ids: (keys, does) for keys, ids, does in app.screen.rows()}
        assert rows["inbox.approve"][0] == "a" and rows["inbox.remember"][0] == "r"
        assert rows["inbox.approve_all"][0] == "A" and rows["inbox.reject"][0] == "x"


def test_every_approvals_binding_has_an_id_from_the_catalogue():
    for owner in (ApprovalsScreen, ApprovalPrompt, RejectReasonModal):
        assert owner.BINDINGS and all(binding.id in BINDING_IDS for binding in owner.BINDINGS), owner


async def test_answered_ones_stay_marked_for_a_while_then_drop_and_the_countdown_moves(tmp_path):
    clock = MovableClock()
    fake, app = _app(tmp_path, clock=clock, tick_interval=0.02)
    fake.approval_list = [make_approval(A1), make_approval(A2, state="expired", answer_reason="nobody answered "
                                                                "in 120 s", created_at="2025-03-01T11:55:00Z",
                                                          expires_at="2025-03-01T11:57:00Z")]
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        inbox = await _inbox(app, pilot)
        assert [str(inbox.table.get_row(A1)[i]) for i in (4, 5)] == ["15s", "1m45s"]
        assert str(inbox.table.get_row(A2)[0]) == "expired" and inbox.selected.id == A1
        clock.now = FIXED_NOW + timedelta(seconds=5)
        await wait_until(pilot, lambda: str(inbox.table.get_row(A1)[5]) == "1m40s", rounds=2000)
        assert str(inbox.table.get_row(A1)[4]) == "20s" and dict(inbox.detail)["time"] == \
            "held for 20s   expires in 1m40s"
        clock.now = FIXED_NOW + timedelta(seconds=121)  # the expired one settled at 11:57:00, kept for 300 s
        await wait_until(pilot, lambda: [info.id for info in inbox.shown] == [A1], rounds=2000)
        assert str(inbox.table.get_row(A1)[5]) == "due"  # past its time: the daemon's approval.expired follows
        fake.settle(A1, "expired", "approval.expired", answer_reason="nobody answered in 120 s")
        await wait_until(pilot, lambda: str(inbox.table.get_row(A1)[0]) == "expired")
        assert app.approvals_pending == 0 and str(inbox.table.get_row(A1)[5]) == "-"


HOSTILE_COMMAND = "sh -c 'x' \x1b]52;c;cm0gLXJmIC8K\x07\x1b[2J\u202e[bold red]gone[/]"


async def test_hostile_text_is_escaped_in_the_inbox_and_the_prompt(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval(A1, box_name="web\x1b[8m", command=HOSTILE_COMMAND, reason="[@click=app.quit]x"))
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.body)
        prompt_text = "\n".join(value for _, value in app.screen.body)
        assert "\\x1b]52;c;cm0gLXJmIC8K\\x07\\x1b[2J\\u202e[bold red]gone[/]" in prompt_text
        assert "web\\x1b[8m" in prompt_text and "[@click=app.quit]x" in prompt_text
        body = app.screen.query_one("#prompt-body")
        drawn = [line.text for line in body.render_lines(body.region.reset_offset)]
        assert not any("\x1b" in line or "\u202e" in line for line in drawn)
        assert "red]gone[/]" in "".join(drawn)  # drawn as text (wrapped), not as a style
        inbox = await _inbox(app, pilot)
        row = [str(cell) for cell in inbox.table.get_row(A1)]
        assert row[1] == "web\\x1b[8m" and row[3].startswith("sh -c 'x' \\x1b]52;c;")
        assert all("\x1b" not in cell and "\u202e" not in cell for cell in row)
        await pilot.pause()
        assert isinstance(app.screen, ApprovalsScreen)  # the [@click=app.quit] was text, not an action


def _cell(table: BoxTable, row: str, column: str) -> str | None:
    """The cell's text, or None while the table has no such row yet."""
    try:
        return str(table.get_cell(row, column))
    except CellDoesNotExist:
        return None


async def test_the_count_is_on_every_screens_footer_and_in_the_box_table(tmp_path):
    fake, app = _app(tmp_path)
    fake.history = [make_event(1, "b1", "box.started")]
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await wait_until(pilot, lambda: app.state.last_seq == 1)
        table = app.main_screen.query_one(BoxTable)

        def badge() -> ApprovalsBadge:  # the footer composes it again when the keys change
            return app.main_screen.query_one(ApprovalsBadge)

        await wait_until(pilot, lambda: _cell(table, "b1", "approvals") == "0")  # rows are drawn after the event
        assert str(badge().render()) == "i approvals 0"
        fake.ask(make_approval(A1))
        fake.ask(make_approval(A2))
        await wait_until(pilot, lambda: _cell(table, "b1", "approvals") == "2")
        await wait_until(pilot, lambda: str(badge().render()) == "i ▲ 2 approvals pending")
        assert badge().has_class("-pending") and _cell(table, "b2", "approvals") == "0"
        await pilot.press("escape")  # later
        for key, screen_type in (("enter", BoxScreen), ("i", ApprovalsScreen)):
            await pilot.press(key)
            await wait_until(pilot, lambda screen_type=screen_type: isinstance(app.screen, screen_type))
            await wait_until(pilot, lambda: app.screen.query(ApprovalsBadge))
            assert str(app.screen.query_one(ApprovalsBadge).render()) == "i ▲ 2 approvals pending"
            await pilot.press("escape")
        fake.settle(A1, "approved", answered_by="uid 0 (root)")
        await wait_until(pilot, lambda: _cell(table, "b1", "approvals") == "1")
        assert str(badge().render()) == "i ▲ 1 approval pending"


@pytest.mark.parametrize("width", [80, 200])
async def test_the_count_is_never_cut_from_the_footer(tmp_path, width):
    fake, app = _app(tmp_path)
    fake.approval_list = [make_approval(A1)]
    async with app.run_test(size=(width, 30)) as pilot:
        await _started(app, pilot)
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt))
        await pilot.press("escape")
        badge = app.main_screen.query_one(ApprovalsBadge)
        await wait_until(pilot, lambda: badge.region.width > 0 and str(badge.render()).startswith("i ▲ 1"))
        assert badge.region.x == 0 and badge.region.right <= width and badge.region.y == 29
        assert badge.region.width >= len("i ▲ 1 approval pending")
        await pilot.click(ApprovalsBadge)  # the count opens the inbox too
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalsScreen))


async def test_the_list_is_read_at_every_connection_and_a_restarted_daemons_list_wins(tmp_path):
    fake, app = _app(tmp_path)
    _three_pending(fake)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await wait_until(pilot, lambda: app.approvals_pending == 3)
        assert sum(1 for call in fake.calls if call[0] == "approvals") == 1
        fake.approval_list = [replace(fake.approval_list[0], state="lost", answer_reason="the daemon stopped")]
        fake.live.put_nowait(DROP_STREAM)  # a daemon restart: the others are gone with it
        await wait_until(pilot, lambda: sum(1 for call in fake.calls if call[0] == "approvals") == 2)
        await wait_until(pilot, lambda: app.approvals_pending == 0)
        assert [info.state for info in app.approvals.ordered] == ["lost"]


async def test_a_daemon_without_the_approvals_api_leaves_the_boxes_counts_standing(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "web-api", approvals_pending=2), make_box("b2", "batch-jobs")])
    fake.approvals_error = DaemonError("http_error", 'the daemon answered 404: "404: Not Found"', 404)
    fake, app = _app(tmp_path, fake=fake)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        table = app.main_screen.query_one(BoxTable)
        await wait_until(pilot, lambda: table.box_ids == ["b1", "b2"])
        assert str(table.get_cell("b1", "approvals")) == "2" and app.approvals_pending == 2
        assert app.state.connected and not app.approvals.synced


async def test_the_command_palette_offers_the_inbox(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "approvals: Inbox")
        command.callback()
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalsScreen))
