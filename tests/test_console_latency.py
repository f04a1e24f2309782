"""What keeps the approval prompt and the keys quick while thousands of events a second stream in
(``bench/console.py`` measures it; docs/performance.md): the event log formats only the lines it draws, the footer is
not composed again when its keys have not changed, and the console's heap is frozen once it has started.  Each test
also holds the behaviour these must keep: every event reaches the state and the log, scrolling, selection."""

from __future__ import annotations

from textual.geometry import Offset
from textual.selection import Selection

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_approval,
    make_event,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.console import app as console_app
from tkbox_tui.console.app import make_app
from tkbox_tui.console.present import event_line
from tkbox_tui.console.screens import ApprovalPrompt, ApprovalsScreen
from tkbox_tui.console.widgets import EventLog

SIZE = (120, 36)
FLOOD = 3_000
NAMES = {"b1": "web-api", "b2": "batch-jobs"}


def _app(tmp_path, **settings):
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", **settings), clock=fixed_clock)
    app.bell = lambda: None  # type: ignore[method-assign]  # headless: nothing to hear
    return fake, app


def _traffic(first: int, count: int):
    return [make_event(seq, "b1" if seq % 2 else "b2", "exec.finished", exit_code=0)
            for seq in range(first, first + count)]


def _formatted(log: EventLog) -> list[int]:
    return [index for index in range(len(log.lines)) if log.lines.is_formatted(index)]


def _in_view(log: EventLog) -> range:
    top = log.scroll_offset.y
    return range(top, top + log.scrollable_content_region.height)


async def _flooded(app, pilot, fake, count: int = FLOOD) -> EventLog:
    await wait_until(pilot, lambda: app.state.connected and fake.stream_opened.is_set())
    for event in _traffic(1, count):
        fake.live.put_nowait(event)
    log = app.main_screen.query_one(EventLog)
    await wait_until(pilot, lambda: app.state.last_seq == count and len(log.lines) == count, rounds=2_000)
    await pilot.pause()
    return log


async def test_a_flood_of_events_formats_only_the_lines_the_log_draws(tmp_path):
    """Following, each render formats the lines then in view, at the end; paused, a flood formats nothing."""
    fake, app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        log = await _flooded(app, pilot, fake)
        view = _in_view(log)
        assert log.auto_scroll and view.stop == FLOOD  # following: the newest line at the bottom
        assert set(view) <= set(_formatted(log)) and len(_formatted(log)) < FLOOD // 4
        bottom = log.render_line(len(view) - 1).text
        assert bottom.rstrip() == event_line(app.state.events[-1], "batch-jobs")[:log.scrollable_content_region.width]
        log.focus()
        await pilot.press("up")  # following pauses; the view stays where it is
        await wait_until(pilot, lambda: not app.state.following)
        formatted = _formatted(log)
        for event in _traffic(FLOOD + 1, 1_000):
            fake.live.put_nowait(event)
        await wait_until(pilot, lambda: app.state.last_seq == FLOOD + 1_000 and len(log.lines) == FLOOD + 1_000,
                         rounds=2_000)
        assert _formatted(log) == formatted  # the view shows the same lines: nothing new was drawn
        assert app.state.new_while_paused == 1_000


async def test_scrolling_to_the_top_draws_the_oldest_lines_as_they_come_into_view(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        log = await _flooded(app, pilot, fake)
        log.focus()
        await pilot.press("home")
        await wait_until(pilot, lambda: log.scroll_offset.y == 0 and not app.state.following)
        assert "#1 " in log.render_line(0).text and "web-api" in log.render_line(0).text
        assert set(_in_view(log)) <= set(_formatted(log)) and len(_formatted(log)) < FLOOD // 4
        await pilot.press("n")  # the marker goes to the top line; Enter opens that event
        assert log.current_line == 0
        await pilot.press("enter")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "EventScreen")
        assert app.screen.event.seq == 1


async def test_selected_log_text_is_the_lines_as_drawn(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        log = await _flooded(app, pilot, fake, count=50)
        drawn = [event_line(event, NAMES[event.box_id]) for event in _traffic(1, 50)]
        selected, ending = log.get_selection(Selection(Offset(9, 2), Offset(16, 4)))
        assert selected == "\n".join([drawn[2][9:], drawn[3], drawn[4][:16]]) and ending == "\n"


async def test_an_approval_behind_thousands_of_events_pops_the_prompt_and_every_event_is_kept(tmp_path):
    fake, app = _app(tmp_path, prompt_arm_delay=0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.connected and fake.stream_opened.is_set())
        for event in _traffic(1, FLOOD):
            fake.live.put_nowait(event)
        approval = make_approval()
        fake.live.put_nowait(make_event(FLOOD + 1, "b1", "approval.pending", approval=approval.to_json()))
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and app.screen.shown_id == approval.id,
                         rounds=2_000)
        log = app.main_screen.query_one(EventLog)
        assert len(_formatted(log)) < FLOOD // 4
        await pilot.press("escape")
        await wait_until(pilot, lambda: len(log.lines) == FLOOD + 1)
        assert app.state.events_seen == FLOOD + 1 and "approval.pending" in log.lines[-1]


async def test_opening_and_closing_a_screen_on_top_leaves_the_footers_keys_alone(tmp_path):
    """Textual composes the footer again at every push and pop of a screen; with the same keys it draws nothing new,
    and when the keys do change (the focus moves to the log) it shows the new ones."""
    fake, app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.main_screen.query("FooterKey"))
        keys = list(app.main_screen.query("FooterKey"))
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalsScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is app.main_screen)
        await pilot.pause()
        assert list(app.main_screen.query("FooterKey")) == keys
        assert all(key.is_attached for key in keys)
        app.main_screen.query_one(EventLog).focus()
        await wait_until(pilot, lambda: "next_match" in {key.action for key in app.main_screen.query("FooterKey")})
        assert not any(key.is_attached for key in keys)


async def test_the_heap_is_frozen_once_the_main_screen_is_up_only_when_asked(tmp_path, monkeypatch):
    frozen: list[str] = []
    monkeypatch.setattr(console_app, "freeze_startup_heap", lambda: frozen.append("frozen"))
    for freeze in (False, True):
        fake, app = _app(tmp_path, freeze_startup_heap=freeze)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda app=app: app.state.connected)
        assert frozen == (["frozen"] if freeze else [])
