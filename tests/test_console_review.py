"""The patch review, driven with Pilot against ``FakeDaemonClient``: Enter on a stopped box opens it; the files with
their action, size, sensitivity, verdict and checkout; ``space`` excludes (the apply's ``only`` leaves the file
out); ``a`` confirms first (sensitive files in their own step); an ``ask`` raises the approval prompt during the
apply; afterwards each file shows what became of it. Keystrokes are counted."""

from __future__ import annotations

from dataclasses import replace

from textual import events

from tests.console_fakes import wait_until
from tests.review_fixtures import APP_PY, CI, NOTES, OLD, SIZE, apply_calls, review_app
from tkbox_tui.console.screens import (
    ApplyConfirmModal,
    ApprovalPrompt,
    BoxScreen,
    HelpScreen,
    MainScreen,
    PatchReviewScreen,
)
from tkbox_tui.console.widgets import BoxTable
from tkbox_tui.console.widgets.review_file_table import ReviewFileTable


def _keys(recorded) -> int:
    """Distinct keys the App received (a forwarded key is the same object)."""
    return len({id(message) for message in recorded if isinstance(message, events.Key)})


async def _connected(app, pilot) -> None:
    """Until the box is a row of the focused boxes table, under its cursor (Enter before that selects nothing)."""
    await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
    table = app.main_screen.query_one(BoxTable)
    await wait_until(pilot, lambda: table.box_ids and app.focused is table and table.cursor_row == 0)


async def _open_review(app, pilot) -> PatchReviewScreen:
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, PatchReviewScreen) and app.screen.loads > 0)
    return app.screen


def _result(screen: PatchReviewScreen, path: str) -> str:
    return str(screen.query_one(ReviewFileTable).get_cell(path, "result"))


async def test_review_and_apply_in_three_keys_and_each_file_shows_written(tmp_path):
    fake, app = review_app(tmp_path)
    recorded: list = []
    async with app.run_test(size=SIZE, message_hook=recorded.append) as pilot:
        await _connected(app, pilot)
        before = _keys(recorded)
        screen = await _open_review(app, pilot)
        table = screen.query_one(ReviewFileTable)
        assert [row.value for row in table.rows] == ["src/app.py", "docs/notes.md", "old.txt"]
        assert [str(cell) for cell in table.get_row("docs/notes.md")] == [
            "[x]", "docs/notes.md", "allow TK-W001", "", "ok", "", "add", "+31 B"]
        await pilot.press("a")
        assert isinstance(app.screen, ApplyConfirmModal)
        assert "Apply 3 files of web-api's patch to /home/op/web-api" in app.screen.plan_text
        await pilot.press("y")
        await wait_until(pilot, lambda: screen.result is not None)
        assert _keys(recorded) - before == 3  # Enter, a, y
        assert apply_calls(fake) == [("b1", False, None, False)]  # nothing excluded: the whole patch
        assert [_result(screen, path) for path in ("src/app.py", "docs/notes.md", "old.txt")] == ["written"] * 3
        assert "applied: 3 written" in str(screen.query_one("#review-summary").render())
        assert any("applied: 3 written" in note.message for note in app.notes)


async def test_an_excluded_file_is_not_in_only_and_shows_declined(tmp_path):
    fake, app = review_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _connected(app, pilot)
        screen = await _open_review(app, pilot)
        await pilot.press("down", "space")  # exclude docs/notes.md
        assert screen.excluded == {"docs/notes.md"}
        assert _result(screen, "docs/notes.md") == "excluded"
        await pilot.press("space", "space")  # in again, out again
        await pilot.press("a")
        plan = app.screen.plan_text
        assert "Apply 2 files" in plan and "Excluded, recorded as declined (1):\n  docs/notes.md" in plan
        await pilot.press("y")
        await wait_until(pilot, lambda: screen.result is not None)
        (call,) = apply_calls(fake)
        assert call[2] == ("src/app.py", "old.txt") and "docs/notes.md" not in call[2]
        assert _result(screen, "docs/notes.md") == "declined"
        assert _result(screen, "src/app.py") == _result(screen, "old.txt") == "written"


async def test_sensitive_files_need_their_own_confirm(tmp_path):
    fake, app = review_app(tmp_path, [APP_PY, CI])
    recorded: list = []
    async with app.run_test(size=SIZE, message_hook=recorded.append) as pilot:
        await _connected(app, pilot)
        screen = await _open_review(app, pilot)
        assert str(screen.query_one(ReviewFileTable).get_cell(CI.path, "sensitive")) == "sensitive"
        await pilot.press("a", "y")  # the plan, then the sensitive step: nothing applied yet
        assert isinstance(app.screen, ApplyConfirmModal) and app.screen.step == "sensitive"
        assert "CI workflow" in app.screen.sensitive_text and apply_calls(fake) == []
        await pilot.press("n")  # no to the sensitive files: nothing at all is applied
        await pilot.pause()
        assert app.screen is screen and apply_calls(fake) == [] and not screen.applying
        before = _keys(recorded)
        await pilot.press("a", "y", "y")
        await wait_until(pilot, lambda: screen.result is not None)
        assert _keys(recorded) - before == 3  # with Enter before them: four keys
        assert apply_calls(fake) == [("b1", False, None, True)]  # allow_sensitive only after its own yes
        assert _result(screen, CI.path) == "written"


async def test_without_the_sensitive_yes_the_daemon_would_refuse_and_each_row_says_so(tmp_path):
    fake, app = review_app(tmp_path, [APP_PY, CI])
    async with app.run_test(size=SIZE) as pilot:
        await _connected(app, pilot)
        screen = await _open_review(app, pilot)
        screen.app.start_apply("b1", None, False)  # what the confirm never sends without its second yes
        await wait_until(pilot, lambda: screen.result is not None)
        assert _result(screen, CI.path) == "refused TK-F008" and _result(screen, APP_PY.path) == "not written"
        assert "refused, nothing written" in str(screen.query_one("#review-summary").render())


async def test_an_ask_raises_the_approval_prompt_during_the_apply(tmp_path):
    asked = replace(NOTES, verdict="ask", rule_ids=("TK-W010",), reason="a new file outside src/")
    fake, app = review_app(tmp_path, [APP_PY, asked])
    async with app.run_test(size=SIZE) as pilot:
        await _connected(app, pilot)
        screen = await _open_review(app, pilot)
        assert str(screen.query_one(ReviewFileTable).get_cell(asked.path, "verdict")) == "ask TK-W010"
        await pilot.press("a")
        assert "1 ask a person first" in app.screen.plan_text
        await pilot.press("y")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.body)
        assert ("asks", "write: add docs/notes.md") in app.screen.body
        assert screen.applying and _result(screen, asked.path).startswith("held: apr-")
        assert screen.result is None  # the apply waits for the person
        await pilot.press("a")  # approve, on the prompt
        await wait_until(pilot, lambda: screen.result is not None)
        assert app.screen is screen
        assert _result(screen, asked.path) == "written" and _result(screen, APP_PY.path) == "written"
        assert [call[2] for call in fake.calls if call[0] == "answer_approval"] == ["approve"]


async def test_a_rejected_ask_refuses_the_apply_and_the_row_names_the_rule(tmp_path):
    asked = replace(NOTES, verdict="ask", rule_ids=("TK-W010",))
    fake, app = review_app(tmp_path, [APP_PY, asked])
    async with app.run_test(size=SIZE) as pilot:
        await _connected(app, pilot)
        screen = await _open_review(app, pilot)
        await pilot.press("a", "y")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt))
        await pilot.press("x")
        await pilot.press("enter")  # the reason modal: no reason
        await wait_until(pilot, lambda: screen.result is not None)
        assert _result(screen, asked.path) == "refused TK-W010"
        assert _result(screen, APP_PY.path) == "not written"


async def test_a_denied_file_is_said_in_the_confirm_and_refused(tmp_path):
    denied = replace(OLD, verdict="deny", rule_ids=("TK-W020",), reason="deletes a tracked file")
    fake, app = review_app(tmp_path, [APP_PY, denied])
    async with app.run_test(size=SIZE) as pilot:
        await _connected(app, pilot)
        screen = await _open_review(app, pilot)
        await pilot.press("a")
        assert "The policy's preview refuses 1: the signer will refuse the apply" in app.screen.plan_text
        await pilot.press("n")
        await pilot.press("down", "space", "a", "y")  # exclude it, apply the rest
        await wait_until(pilot, lambda: screen.result is not None)
        assert apply_calls(fake) == [("b1", False, ("src/app.py",), False)]
        assert _result(screen, "old.txt") == "declined" and _result(screen, "src/app.py") == "written"


async def test_the_diff_is_escaped_coloured_and_toggles_side_by_side(tmp_path):
    fake, app = review_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _connected(app, pilot)
        screen = await _open_review(app, pilot)
        texts = [line.text for line in screen.diff_shown]
        assert "+print('hello, \\x1b[31mworld\\x1b[0m')" in texts  # the escape byte shown, never sent
        assert not any("\x1b" in text for text in texts)
        assert [line.kind for line in screen.diff_shown][:5] == ["header", "header", "header", "header", "hunk"]
        await pilot.press("v")
        assert screen.side_by_side
        await pilot.press("down")
        assert screen.selected_path == "docs/notes.md"
        assert [line.text for line in screen.diff_shown if line.kind == "added"] == ["+# Notes",
                                                                                   "+written in the box"]
        await pilot.press("enter")  # into the diff; Esc back to the files, Esc back to the boxes
        assert screen.focused is screen.query_one("#review-diff")
        await pilot.press("escape")
        assert isinstance(screen.focused, ReviewFileTable)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_a_stopped_box_without_a_saved_patch_opens_its_page(tmp_path):
    fake, app = review_app(tmp_path)
    del fake.previews["b1"]
    async with app.run_test(size=SIZE) as pilot:
        await _connected(app, pilot)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen))
        assert any("no saved patch" in note.message for note in app.notes)
        await pilot.press("p")  # the page offers the review: the daemon still has no patch, so it says so again
        await wait_until(pilot, lambda: sum("no saved patch" in note.message for note in app.notes) == 2)


async def test_colon_review_and_p_open_it_and_a_running_box_is_told_to_stop_first(tmp_path):
    fake, app = review_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _connected(app, pilot)
        await pilot.press("colon", *"review web-api", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, PatchReviewScreen) and app.screen.loads > 0)
        await pilot.press("o")  # the box's page, from the review
        await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen))
        await pilot.press("escape", "escape")
        await pilot.press("p")
        await wait_until(pilot, lambda: isinstance(app.screen, PatchReviewScreen))
        await pilot.press("escape")
        app.state.boxes["b1"] = replace(app.state.boxes["b1"], state="running")
        await pilot.press("p")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert any("once it is stopped" in note.message for note in app.notes)


async def test_question_mark_lists_the_review_keys(tmp_path):
    fake, app = review_app(tmp_path)
    async with app.run_test(size=(180, 48)) as pilot:
        await _connected(app, pilot)
        await _open_review(app, pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        ids = {binding_id for _, ids, _ in app.screen.rows() for binding_id in ids.split(", ")}
        assert {"review.toggle", "review.apply", "review.view", "review.diff_down", "review.diff_up",
                "review.diff_top", "review.diff_bottom", "review.back", "review.diff"} <= ids
