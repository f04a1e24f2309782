"""The console starts from the newest events and pages back on demand (Pilot, against ``FakeDaemonClient``): no
replay of the whole history at start, each page exactly the events before the oldest held, the view kept on the
line it showed, and a clear word at the start of what the daemon keeps."""

from __future__ import annotations

from pathlib import Path

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_event,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.client import DaemonError
from tkbox_tui.console.app import make_app
from tkbox_tui.console.widgets import EventLog

HISTORY = 3000


def _app(tmp_path: Path, fake: FakeDaemonClient, **settings):
    values = dict(start_events=100, older_page=400, event_ring=500) | settings
    return make_app(fake, settings=quiet_settings(tmp_path / "config", **values), clock=fixed_clock)


def _long_history(first: int = 1) -> FakeDaemonClient:
    fake = FakeDaemonClient(two_boxes())
    fake.history = [make_event(seq, "b1" if seq % 2 else "b2", "exec.finished", n=seq)
                    for seq in range(first, HISTORY + 1)]
    return fake


async def _started(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.client.stream_opened.is_set())
    await wait_until(pilot, lambda: app.state.last_seq == HISTORY)


async def test_the_console_starts_from_the_newest_events_and_follows_from_the_last(tmp_path):
    fake = _long_history()
    app = _app(tmp_path, fake)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        assert fake.pages_asked == [(None, 100)]
        assert fake.events_after == [HISTORY]  # the stream follows on from the page: nothing replayed
        assert [event.seq for event in app.state.events] == list(range(HISTORY - 99, HISTORY + 1))
        assert app.state.older_available
        await wait_until(pilot, lambda: "older" in str(app.screen.query_one("#events-title").render()))


async def test_paging_back_adds_exactly_the_events_before_the_oldest_and_keeps_the_view(tmp_path):
    fake = _long_history()
    app = _app(tmp_path, fake)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        log = app.screen.query_one(EventLog)
        log.focus()
        await wait_until(pilot, lambda: log.line_count == 100)
        top_line = log.lines[0]
        await pilot.press("o")
        await wait_until(pilot, lambda: len(app.state.events) == 500)
        assert fake.pages_asked[-1] == (HISTORY - 99, 400)
        assert [event.seq for event in app.state.events] == list(range(HISTORY - 499, HISTORY + 1))
        assert log.line_count == 500 and not log.auto_scroll  # paging back stops following
        assert log.scroll_offset.y == 400 and log.lines[400] == top_line  # the line shown before is still on top


async def test_scrolling_to_the_top_pages_back_to_the_start_without_gaps_or_repeats(tmp_path):
    fake = _long_history()
    app = _app(tmp_path, fake, event_ring=1000)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        log = app.screen.query_one(EventLog)
        log.focus()
        while app.state.older_available:
            held = len(app.state.events)
            await pilot.press("home")
            await wait_until(pilot, lambda held=held: len(app.state.events) > held or not app.state.older_available)
        assert [event.seq for event in app.state.events] == list(range(1, HISTORY + 1))
        assert app.state.events_seen == HISTORY
        await pilot.press("home")  # at the start: nothing more is asked
        await pilot.pause()
        assert len(fake.pages_asked) == 1 + 8  # the start's page, then 2,900 events 400 at a time
        assert any("first event" in str(n.message) for n in app._notifications)


async def test_the_log_grows_by_pages_only_so_far(tmp_path):
    fake = _long_history()
    app = _app(tmp_path, fake, event_ring=200)  # room for 800 events once paged back
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        app.screen.query_one(EventLog).focus()
        for _ in range(3):
            held = len(app.state.events)
            await pilot.press("o")
            await wait_until(pilot, lambda held=held: len(app.state.events) > held or not app.state.room_for_older)
        assert [event.seq for event in app.state.events] == list(range(HISTORY - 799, HISTORY + 1))
        asked = len(fake.pages_asked)
        await pilot.press("o")
        await pilot.pause()
        assert len(fake.pages_asked) == asked  # refused in the console, with the command that reads further back
        assert any("tkbox events --after" in str(n.message) for n in app._notifications)


async def test_a_history_the_daemon_no_longer_keeps_whole_is_said(tmp_path):
    fake = _long_history(first=2601)  # the daemon keeps seq 2601 on
    app = _app(tmp_path, fake, start_events=300)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        app.screen.query_one(EventLog).focus()
        await pilot.press("o")
        await wait_until(pilot, lambda: not app.state.older_available)
        assert app.state.events[0].seq == 2601 and app.state.first_kept == 2601
        assert any("2601" in str(n.message) for n in app._notifications)


class _NoPages(FakeDaemonClient):
    async def event_page(self, before=None, limit=500, box=None):
        raise DaemonError("http_error", "the daemon answered 404", 404)


async def test_a_daemon_without_pages_replays_its_history(tmp_path):
    fake = _NoPages(two_boxes())
    fake.history = [make_event(seq) for seq in range(1, HISTORY + 1)]
    app = _app(tmp_path, fake, event_ring=5000)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        assert fake.events_after == [0] and len(app.state.events) == HISTORY
