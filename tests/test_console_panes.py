"""Pilot tests of the main screen's panes: Tab moves the focus, focused inputs show their text, following keeps the
newest event on screen, a focused panel owns the keys, and the banner and footer fit the terminal.

Each test failed on the console before these fixes (issue 9): Tab did nothing (the keymap bound ``focus_next`` on a
screen without that action); a focused one-row input drew Textual's tall border over its text and the form opened
with nothing focused; the log stopped following after the exec panel opened or the terminal shrank, while the status
said FOLLOWING; ``x`` and ``q`` reached the main screen and the App from behind the exec panel; the DISCONNECTED
banner and the footer were cut at the right edge, and ``?`` and ``:`` were never in the footer.  (Two are guards
that passed before too: the exec panel's command line, styled by id, showed its text; a paused log stays put.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, Log

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_event,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.client import NO_DAEMON_HINT
from tkbox_tui.console.app import make_app
from tkbox_tui.console.messages import ConnectionChanged
from tkbox_tui.console.screens import ConfirmModal, HelpScreen, NewBoxScreen
from tkbox_tui.console.widgets import BoxTable, CommandBar, EventLog, ExecPanel


def _app(tmp_path: Path, fake: FakeDaemonClient | None = None, **overrides):
    fake = fake or FakeDaemonClient(two_boxes())
    return fake, make_app(fake, settings=quiet_settings(tmp_path / "config", **overrides), clock=fixed_clock)


async def _started(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.client.stream_opened.is_set())


def _newest_line_on_screen(log: EventLog) -> str:
    """The last line the event log shows in its viewport (empty when it shows none)."""
    top = round(log.scroll_y)
    shown = log.lines[top: top + log.scrollable_content_region.height]
    return shown[-1] if shown else ""


# -- Tab and Shift+Tab --------------------------------------------------------------------------------------------

async def test_tab_and_shift_tab_move_the_focus_between_the_panes(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        screen = app.main_screen
        assert isinstance(app.focused, BoxTable)
        await pilot.press("tab")
        assert isinstance(app.focused, EventLog)
        await pilot.press("tab")
        assert isinstance(app.focused, BoxTable)  # the closed exec panel and : line take no focus
        await pilot.press("shift+tab")
        assert isinstance(app.focused, EventLog)
        await pilot.press("shift+tab", "e")  # from the boxes, open the exec panel: its command line has the focus
        panel = screen.query_one(ExecPanel)
        assert app.focused is panel.query_one("#exec-argv", Input)
        await pilot.press("shift+tab")
        assert app.focused is panel.query_one("#exec-output", Log)
        await pilot.press("shift+tab")
        assert isinstance(app.focused, EventLog)
        await pilot.press("tab", "tab")
        assert app.focused is panel.query_one("#exec-argv", Input)
        await pilot.press("tab")
        assert isinstance(app.focused, BoxTable)


async def test_tab_reaches_the_open_filter_line(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await pilot.press("slash")
        bar = app.main_screen.query_one(CommandBar)
        assert app.focused is bar
        await pilot.press("shift+tab")
        assert isinstance(app.focused, EventLog)
        await pilot.press("tab")
        assert app.focused is bar


@pytest.mark.parametrize("key", ["slash", "colon"])
async def test_keys_typed_ahead_of_the_filter_or_command_line_never_reach_the_pane_behind(tmp_path, key):
    from textual import events

    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        for name, character in ((key, None), ("d", "d"), ("e", "e"), ("x", "x"), ("a", "a")):  # queued at once
            app.post_message(events.Key(name, character))
        await wait_until(pilot, lambda: app.main_screen.query_one(CommandBar).has_class("-open"))
        await pilot.pause()
        assert app.screen is app.main_screen  # no "Remove box?" or "Stop box?" behind the line
        assert not app.main_screen.query_one(ExecPanel).has_class("-open") and not app.state.scope_to_selected
        assert app.focused is app.main_screen.query_one(CommandBar)


# -- focused inputs show their text ---------------------------------------------------------------------------------

def _shows(field: Input, text: str) -> bool:
    """One row, no border eating it, and that row shows ``text``."""
    return (field.region.height == 1 and field.content_region.height == 1
            and text in field.render_line(0).text)


async def test_the_new_box_form_opens_on_its_first_field_and_shows_what_is_typed(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await pilot.press("n")
        assert isinstance(app.screen, NewBoxScreen)
        name = app.screen.query_one("#field-name", Input)
        assert app.focused is name
        await pilot.press(*"my-box")
        assert name.value == "my-box"
        assert _shows(name, "my-box")
        await pilot.press("tab", *"/srv")  # Tab to the next field selects its text: typing replaces it
        workspace = app.screen.query_one("#field-workspace", Input)
        assert app.focused is workspace and workspace.value == "/srv" and _shows(workspace, "/srv")


@pytest.mark.parametrize(("key", "typed"), [("colon", "box web-api"), ("slash", "kind:exec curl")])
async def test_the_command_and_filter_lines_show_what_is_typed(tmp_path, key, typed):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await pilot.press(key, *typed)
        bar = app.main_screen.query_one(CommandBar)
        assert app.focused is bar and bar.value == typed
        assert _shows(bar, typed)
        footer_row = app.screen.size.height - 1
        assert bar.region.y < footer_row  # above the footer, not under it


async def test_the_exec_command_line_shows_what_is_typed(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await pilot.press("e", *"ls -la")
        field = app.main_screen.query_one("#exec-argv", Input)
        assert app.focused is field and _shows(field, "ls -la")


# -- FOLLOWING is true ----------------------------------------------------------------------------------------------

async def _stream(app, fake, pilot, first: int, last: int) -> None:
    for seq in range(first, last + 1):
        fake.live.put_nowait(make_event(seq, "b1", "exec.finished", command=f"echo {seq}", exit_code=0))
    await wait_until(pilot, lambda: app.state.last_seq == last)
    log = app.main_screen.query_one(EventLog)
    await wait_until(pilot, lambda: log.lines and f"#{last} " in log.lines[-1])
    await pilot.pause()


async def test_following_keeps_the_newest_event_on_screen_after_the_exec_panel_opens(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await _stream(app, fake, pilot, 1, 200)  # far more than a screenful
        log = app.main_screen.query_one(EventLog)
        assert "#200 " in _newest_line_on_screen(log)
        rows = log.size.height
        await pilot.press("e")  # the panel takes rows from the event log
        await wait_until(pilot, lambda: log.size.height < rows)
        await pilot.pause()
        assert app.state.following
        assert "#200 " in _newest_line_on_screen(log)
        await _stream(app, fake, pilot, 201, 260)  # events keep coming while the panel is open
        assert app.state.following and "FOLLOWING" in str(app.main_screen.query_one("#follow-status").render())
        assert "#260 " in _newest_line_on_screen(log)


async def test_following_keeps_the_newest_event_on_screen_after_the_terminal_shrinks(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await _stream(app, fake, pilot, 1, 200)
        log = app.main_screen.query_one(EventLog)
        rows = log.size.height
        await pilot.resize_terminal(100, 26)
        await wait_until(pilot, lambda: app.main_screen.size.height == 26 and log.size.height < rows)
        await pilot.pause()
        assert "#200 " in _newest_line_on_screen(log)
        await _stream(app, fake, pilot, 201, 230)
        assert "#230 " in _newest_line_on_screen(log)


async def test_paused_stays_where_the_operator_scrolled(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await _stream(app, fake, pilot, 1, 200)
        log = app.main_screen.query_one(EventLog)
        log.focus()
        await pilot.press("k", "k")
        assert not app.state.following
        where = log.scroll_y
        await pilot.press("shift+tab", "e")  # a resize while paused does not jump to the end
        await _stream(app, fake, pilot, 201, 220)
        assert log.scroll_y <= where and "#220 " not in _newest_line_on_screen(log)


# -- a focused panel owns the keys ----------------------------------------------------------------------------------

MAIN_AND_APP_KEYS = ["x", "d", "n", "e", "s", "a", "f", "slash", "question_mark", "colon", "q", "enter"]


async def test_keys_do_not_reach_behind_the_exec_panel_while_a_command_runs(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        panel = app.main_screen.query_one(ExecPanel)
        await pilot.press("e", *"sleep 100", "enter")
        await wait_until(pilot, lambda: panel.running)
        assert app.focused is panel.query_one("#exec-output", Log)  # the focus stays in the panel
        for key in MAIN_AND_APP_KEYS:
            await pilot.press(key)
            assert app.screen is app.main_screen, key  # no "Stop box?", no help, no form
            assert not app.main_screen.query_one(CommandBar).has_class("-open"), key
        assert app.is_running and app.return_code is None  # q did not quit
        assert app.state.following and not app.state.scope_to_selected  # f and a did nothing either
        await pilot.press("escape")  # Esc leaves the panel; the main screen's keys are back
        assert isinstance(app.focused, BoxTable)
        await pilot.press("x")
        assert isinstance(app.screen, ConfirmModal)


async def test_the_footer_shows_only_the_panels_keys_while_it_has_the_focus(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await pilot.press("e")
        app.main_screen.query_one("#exec-output", Log).focus()  # the output has the focus while a command runs
        await pilot.pause()
        shown = {active.binding.id for active in app.screen.active_bindings.values()}
        assert {"exec.close", "exec.interrupt"} <= shown
        assert not shown & {"box.stop", "box.remove", "app.quit", "app.help", "app.command"}
        await pilot.press("escape", "question_mark")
        assert isinstance(app.screen, HelpScreen)


# -- the banner and the footer fit ----------------------------------------------------------------------------------

LONG_REASON = ("no daemon answers at /tmp/pytest-of-root/pytest-123/test_tkbox_up_in_a_real_termin0/xdg-runtime/"
               "tkbox/api.sock (No such file or directory)")


@pytest.mark.parametrize("width", [180, 200, 80])
async def test_the_disconnected_banner_is_never_cut(tmp_path, width):
    fake, app = _app(tmp_path, reconnect_initial=60.0, reconnect_maximum=60.0)
    fake.unreachable_times = 1
    async with app.run_test(size=(width, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.disconnect_reason != "")
        app.post_message(ConnectionChanged(False, LONG_REASON))
        banner = app.main_screen.query_one("#connection-banner")
        await wait_until(pilot, lambda: LONG_REASON[-20:] in str(banner.render()))
        await pilot.pause()
        drawn = "".join(banner.render_line(y).text.strip() for y in range(banner.region.height))
        assert drawn.startswith("DISCONNECTED — still retrying")
        assert LONG_REASON.replace(" ", "") in drawn.replace(" ", "")  # all of it, wrapped
        status = app.main_screen.query_one("#follow-status")
        assert "FOLLOWING" in "".join(status.render_line(y).text for y in range(status.region.height))


def _footer_keys(app) -> dict[str, object]:
    """The footer's keys by binding key, each with its region on screen."""
    return {key.key: key for key in app.main_screen.query("FooterKey")}


async def _laid_out_footer(app, pilot, wanted: tuple[str, ...]) -> dict[str, object]:
    """The footer's keys once it has (re)composed with ``wanted`` among them and laid them out."""
    def ready() -> bool:
        keys = _footer_keys(app)
        return all(key in keys and keys[key].region.width for key in wanted)  # type: ignore[attr-defined]

    await wait_until(pilot, ready)
    return _footer_keys(app)


MAIN_FOOTER_KEYS = ("question_mark", "colon", "q", "n", "e", "x", "d", "slash", "f", "a")


@pytest.mark.parametrize("width", [180, 200])
async def test_the_footer_hints_help_and_commands_and_fits(tmp_path, width):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(width, 48)) as pilot:
        await _started(app, pilot)
        keys = await _laid_out_footer(app, pilot, MAIN_FOOTER_KEYS)
        for key in MAIN_FOOTER_KEYS:
            region = keys[key].region
            assert region.right <= width - len("^p palette"), key  # on screen, not under ^p


async def test_at_80_columns_the_footer_still_hints_help_and_commands_first(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(80, 30)) as pilot:
        await _started(app, pilot)
        keys = await _laid_out_footer(app, pilot, ("question_mark", "colon", "q"))
        shown = [key for key in keys if keys[key].region.width]  # a key cut off has an empty region
        order = sorted(shown, key=lambda key: keys[key].region.x)
        assert order[:3] == ["question_mark", "colon", "q"]
        assert all(keys[key].region.right <= 70 for key in order[:3])


def test_the_footer_words_and_first_keys_name_real_bindings():
    from tkbox_tui.console.keymap import BINDING_IDS, FOOTER_FIRST, FOOTER_HINTS

    assert set(FOOTER_HINTS) <= BINDING_IDS and set(FOOTER_FIRST) <= BINDING_IDS


async def test_with_no_daemon_the_banner_says_how_to_start_one_and_the_status_line_does_not_repeat_it(tmp_path):
    fake, app = _app(tmp_path, reconnect_initial=60.0, reconnect_maximum=60.0)
    fake.unreachable_times = 1
    async with app.run_test(size=(180, 48)) as pilot:
        banner = app.main_screen.query_one("#connection-banner")
        await wait_until(pilot, lambda: "DISCONNECTED" in str(banner.render()))
        text = str(banner.render())
        assert "no daemon answers (fake)" in text and NO_DAEMON_HINT in text
        status = str(app.main_screen.query_one("#follow-status").render())
        assert "DISCONNECTED" in status and "no daemon answers" not in status and NO_DAEMON_HINT not in status
