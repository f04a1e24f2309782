"""The approval prompt, driven with Pilot against ``FakeDaemonClient``: it pops up wherever the operator is, with a
bell and a notification; one key approves; several queue ("1 of 3"); Esc leaves them pending; an answer given
elsewhere moves it on; and it never takes keys the operator is typing (``prompt_gate``)."""

from __future__ import annotations

import time

import pytest
from textual import events
from textual.widgets import Input

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_approval,
    quiet_settings,
    record_notifications,
    two_boxes,
    wait_until,
)
from tkbox_tui.client import DaemonError
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import (
    ApprovalPrompt,
    ApprovalsScreen,
    BoxScreen,
    ConfirmModal,
    MainScreen,
    NewBoxScreen,
    RejectReasonModal,
)
from tkbox_tui.console.widgets import ApprovalsBadge, CommandBar, ExecPanel

SIZE = (120, 36)
A1, A2, A3 = "apr-00000000000000a1", "apr-00000000000000a2", "apr-00000000000000a3"


def _app(tmp_path, **settings):
    fake = FakeDaemonClient(two_boxes())
    settings.setdefault("prompt_arm_delay", 0)
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", **settings), clock=fixed_clock)
    bells: list[int] = []
    app.bell = lambda: bells.append(1)  # type: ignore[method-assign]  # headless: nothing to hear
    app.notes = record_notifications(app)  # type: ignore[attr-defined]
    return fake, app, bells


async def _started(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)


def _answers(fake) -> list[tuple]:
    return [call[1:] for call in fake.calls if call[0] == "answer_approval"]


def _keys(recorded) -> int:
    """Distinct keys the App received (a forwarded key is the same object)."""
    return len({id(message) for message in recorded if isinstance(message, events.Key)})


async def _prompt_up(app, pilot) -> ApprovalPrompt:
    await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.shown_id)
    return app.screen


async def test_an_arriving_approval_pops_the_prompt_with_a_bell_and_one_key_approves_it(tmp_path):
    fake, app, bells = _app(tmp_path)
    recorded: list = []
    async with app.run_test(size=SIZE, notifications=True, message_hook=recorded.append) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval())
        prompt = await _prompt_up(app, pilot)
        assert bells == [1]
        note = next(n for n in app.notes if n.title == "approval needed")
        assert "web-api: sudo true (TK-A010)" in note.message
        body = dict(prompt.body)
        assert body["asks"] == "exec: sudo true" and body["rule"] == "TK-A010: runs a command as root"
        assert body["time"] == "held for 15s   expires in 1m45s"
        assert str(prompt.query_one("#prompt-title").render()) == "Approval needed — 1 of 1"
        assert app.approvals_pending == 1
        keys_before = _keys(recorded)
        await pilot.press("a")
        assert _keys(recorded) - keys_before == 1
        await wait_until(pilot, lambda: _answers(fake) == [(A1, "approve", "", False)])
        await wait_until(pilot, lambda: app.approvals_pending == 0 and isinstance(app.screen, MainScreen))
        assert app.approvals.get(A1).state == "approved"


async def test_several_arriving_together_queue_behind_one_another(tmp_path):
    fake, app, bells = _app(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        for approval_id, command in ((A1, "sudo true"), (A2, "sudo ls"), (A3, "git config core.hooksPath x")):
            fake.ask(make_approval(approval_id, command=command))
        prompt = await _prompt_up(app, pilot)
        await wait_until(pilot, lambda: prompt.position == (1, 3))
        assert prompt.shown_id == A1 and len(bells) <= 2  # one bell per batch the stream delivers
        await pilot.press("a")
        await wait_until(pilot, lambda: prompt.shown_id == A2 and prompt.position == (1, 2))
        assert str(prompt.query_one("#prompt-title").render()) == "Approval needed — 1 of 2"
        await pilot.press("r")  # approve and remember
        await wait_until(pilot, lambda: prompt.shown_id == A3)
        await pilot.press("escape")  # later: back where it was, still pending
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        await wait_until(pilot, lambda: len(_answers(fake)) == 2)
        assert _answers(fake) == [(A1, "approve", "", False), (A2, "approve", "", True)]
        assert app.approvals_pending == 1 and [info.id for info in app.approvals.pending] == [A3]
        assert str(app.main_screen.query_one(ApprovalsBadge).render()) == "i ▲ 1 approval pending"
        await pilot.press("i")
        assert isinstance(app.screen, ApprovalsScreen)
        assert [info.id for info in app.screen.shown if info.pending] == [A3]


async def test_x_rejects_with_the_reason_typed_and_esc_on_the_reason_sends_nothing(tmp_path):
    fake, app, _ = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval())
        prompt = await _prompt_up(app, pilot)
        await pilot.press("x")
        assert isinstance(app.screen, RejectReasonModal) and isinstance(app.focused, Input)
        await pilot.press(*"nope", "escape")
        assert app.screen is prompt and prompt.shown_id == A1 and _answers(fake) == []
        await pilot.press("x", *"not on a friday", "enter")
        await wait_until(pilot, lambda: _answers(fake) == [(A1, "reject", "not on a friday", False)])
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))
        assert app.approvals.get(A1).answer_reason == "not on a friday"


@pytest.mark.parametrize(("kind", "asked", "refused"), [
    ("exec", {"command": "sudo true", "cwd": "/workspace", "tty": False}, "the box's command is refused with it"),
    ("host", {"host": "held.example", "port": 443, "url": "https://held.example:443", "because": "off_list"},
     "the box's connection is refused with it"),
    ("write", {"path": "setup.py"}, "the file is not written, and the apply says why"),
])
async def test_the_reason_field_says_what_is_refused_with_it_for_each_kind(tmp_path, kind, asked, refused):
    fake, app, _ = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval(kind=kind, asked=asked))
        await _prompt_up(app, pilot)
        await pilot.press("x")
        assert isinstance(app.screen, RejectReasonModal)
        assert app.screen.query_one("#reject-reason", Input).placeholder == f"reason (optional): {refused}"


async def test_A_approves_all_pending_after_asking(tmp_path):
    fake, app, _ = _app(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval(A1))
        fake.ask(make_approval(A2, "b2", "batch-jobs"))
        await _prompt_up(app, pilot)
        await wait_until(pilot, lambda: app.approvals_pending == 2)
        await pilot.press("A")
        assert isinstance(app.screen, ConfirmModal) and app.screen.focused.id == "confirm-no"
        assert "Approve all 2 pending approvals (in batch-jobs, web-api)?" in app.screen.question
        await pilot.press("n")
        assert isinstance(app.screen, ApprovalPrompt) and _answers(fake) == []
        await pilot.press("A", "y")
        await wait_until(pilot, lambda: app.approvals_pending == 0 and isinstance(app.screen, MainScreen))
        assert _answers(fake) == [(A1, "approve", "", False), (A2, "approve", "", False)]
        assert any(n.title == "approve all" and n.message == "approved 2 of 2" for n in app.notes)


async def test_an_approval_answered_elsewhere_moves_the_prompt_on_and_says_so(tmp_path):
    fake, app, _ = _app(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval(A1))
        fake.ask(make_approval(A2))
        prompt = await _prompt_up(app, pilot)
        await wait_until(pilot, lambda: prompt.position == (1, 2))
        fake.settle(A1, "rejected", answered_by="uid 0 (root)", answer_reason="seen in the CLI")
        await wait_until(pilot, lambda: prompt.shown_id == A2 and prompt.position == (1, 1))
        note = next(n for n in app.notes if n.title == "answered elsewhere")
        assert note.message.startswith(f"{A1} (web-api: sudo true (TK-A010)) is no longer pending: rejected by "
                                       "uid 0 (root): seen in the CLI")
        assert _answers(fake) == []


async def test_approving_one_the_daemon_already_took_an_answer_for_says_so_and_moves_on(tmp_path):
    fake, app, _ = _app(tmp_path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval(A1))
        await _prompt_up(app, pilot)
        # answered in the CLI a moment ago: the daemon knows, the console's event has not arrived yet
        fake.approval_list[0] = fake.approval_list[0].__class__(**{
            **fake.approval_list[0].__dict__, "state": "approved", "answered_by": "uid 0 (root)",
            "answered_at": "2025-03-01T11:59:59Z"})
        await pilot.press("a")
        await wait_until(pilot, lambda: any(n.title == "approve not taken" for n in app.notes))
        note = next(n for n in app.notes if n.title == "approve not taken")
        assert note.message == (f"approval {A1} was already approved by uid 0 (root) at 2025-03-01T11:59:59Z; "
                                "nothing changed")
        await wait_until(pilot, lambda: app.approvals.get(A1).state == "approved")  # read again from the daemon
        assert ("approval", A1) in fake.calls and isinstance(app.screen, MainScreen)


async def test_a_refused_answer_leaves_the_approval_pending_and_says_where_it_is(tmp_path):
    fake, app, _ = _app(tmp_path)
    fake.answer_errors[A1] = DaemonError("record_refused", "the signer refused the answer's record: the action "
                                         "was refused and the box stopped", 503)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval(A1))
        await _prompt_up(app, pilot)
        await pilot.press("a")
        await wait_until(pilot, lambda: any(n.title == "approve not taken" for n in app.notes))
        note = next(n for n in app.notes if n.title == "approve not taken")
        assert "signer refused" in note.message and "still pending: i opens the inbox" in note.message
        assert note.severity == "error" and app.approvals_pending == 1


async def test_keys_pressed_before_the_prompt_is_armed_answer_nothing(tmp_path):
    fake, app, _ = _app(tmp_path, prompt_arm_delay=3600)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval(A1))
        prompt = await _prompt_up(app, pilot)
        await pilot.press("a", "x", "escape")
        await pilot.pause()
        assert prompt.ignored_keys == 3 and app.screen is prompt and _answers(fake) == []


async def test_a_key_typed_before_the_prompt_showed_answers_nothing(tmp_path):
    fake, app, _ = _app(tmp_path)  # armed at once: only the key's age matters
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        fake.ask(make_approval(A1))
        prompt = await _prompt_up(app, pilot)
        early = events.Key("a", "a")
        early.time = prompt.shown_at - 0.01  # typed for the screen behind, handled after the prompt appeared
        app.post_message(early)
        await pilot.pause()
        assert prompt.ignored_keys == 1 and _answers(fake) == []
        await pilot.press("a")
        await wait_until(pilot, lambda: _answers(fake) == [(A1, "approve", "", False)])


async def test_the_prompt_waits_while_the_command_line_is_typed_in_and_opens_when_it_closes(tmp_path):
    fake, app, bells = _app(tmp_path, prompt_typing_pause=3600)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await _started(app, pilot)
        await pilot.press("colon", "f", "i")
        bar = app.main_screen.query_one(CommandBar)
        fake.ask(make_approval(A1))
        await wait_until(pilot, lambda: app.approvals_pending == 1)
        assert bells == [1] and any(n.title == "approval needed" for n in app.notes)
        await pilot.press(*"lter x")  # an 'x' and an 'a'-free word: none of it reaches a prompt
        await pilot.pause()
        assert isinstance(app.screen, MainScreen) and bar.value == "filter x" and app.focused is bar
        await pilot.press("escape")  # the line closes; the focus leaves the input
        await _prompt_up(app, pilot)
        assert _answers(fake) == []


async def test_the_prompt_opens_over_the_exec_panels_input_once_typing_has_paused(tmp_path):
    fake, app, _ = _app(tmp_path, prompt_typing_pause=60)
    skew = [0.0]
    app.monotonic = lambda: time.monotonic() + skew[0]  # the typing pause's clock, moved on by the test
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("e", *"ls -la")
        argv = app.main_screen.query_one(ExecPanel).query_one("#exec-argv", Input)
        fake.ask(make_approval(A1))
        await wait_until(pilot, lambda: app.approvals_pending == 1)
        await pilot.press(*" /tmp")
        for _ in range(20):
            await pilot.pause()
        assert isinstance(app.screen, MainScreen) and argv.value == "ls -la /tmp"
        skew[0] = 61.0  # a minute without a key
        await _prompt_up(app, pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.focused is argv)  # back where it was, the line as typed
        assert argv.value == "ls -la /tmp" and _answers(fake) == []


async def test_the_prompt_does_not_open_over_the_new_box_form_being_filled_in(tmp_path):
    fake, app, _ = _app(tmp_path, prompt_typing_pause=3600)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("n", *"web")
        form = app.screen
        assert isinstance(form, NewBoxScreen)
        fake.ask(make_approval(A1))
        await wait_until(pilot, lambda: app.approvals_pending == 1)
        await pilot.press(*"-api")
        await pilot.pause()
        assert app.screen is form and form.query_one("#field-name", Input).value == "web-api"
        await pilot.press("escape")
        await _prompt_up(app, pilot)


async def test_the_prompt_pops_over_the_box_page_and_esc_goes_back_to_it(tmp_path):
    fake, app, _ = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen))
        page = app.screen
        fake.ask(make_approval(A1))
        await _prompt_up(app, pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is page)
        assert app.approvals_pending == 1 and _answers(fake) == []
        fake.ask(make_approval(A2))  # a new one pops again
        prompt = await _prompt_up(app, pilot)
        assert prompt.shown_id == A2 and prompt.position == (1, 1)


async def test_on_the_inbox_an_arrival_shows_in_it_and_does_not_pop_the_prompt(tmp_path):
    fake, app, bells = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _started(app, pilot)
        await pilot.press("i")
        inbox = app.screen
        assert isinstance(inbox, ApprovalsScreen)
        fake.ask(make_approval(A1))
        await wait_until(pilot, lambda: [info.id for info in inbox.shown] == [A1])
        assert app.screen is inbox and bells == [1]
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)  # seen in the inbox: it does not pop up afterwards
