"""Shutdown: once it begins, no timer, worker or message of the console touches a screen or a widget.

``App.run_test`` (every Pilot test) empties the screen stack while the App's message loop, timers and workers still
run; on a busy machine a render tick or a queued ``select_box`` fell into that window and raised ``IndexError``
from ``screen_stack[0]``.  These tests put the console in exactly that state — the stack empty, the loop still
going — by hooking the last step of Textual's shutdown, and check that nothing of the console runs into it.
``scripts/console_under_load.sh`` runs the console tests with both cores busy (docs/performance.md).
"""

from __future__ import annotations

from pathlib import Path

from tests.console_fakes import FakeDaemonClient, fixed_clock, make_box, quiet_settings, two_boxes, wait_until
from tkbox_tui.console.app import make_app
from tkbox_tui.console.lifecycle import is_console_message
from tkbox_tui.console.messages import (
    BoxActionFinished,
    BoxesLoaded,
    BoxRefreshed,
    ConnectionChanged,
    EventsPending,
    ExecEnded,
    ExecOutputReceived,
)
from tkbox_tui.console.widgets import BoxTable, CommandBar, EventLog, ExecPanel


def _console_messages() -> list:
    """One of every message the App handles itself (from the daemon, its workers and its widgets)."""
    box = make_box("b2", "batch-jobs")
    return [EventsPending(), ConnectionChanged(False, "gone"), BoxesLoaded([box]), BoxRefreshed(box),
            BoxActionFinished("stop", "b2", box), ExecOutputReceived("late output\n"), ExecEnded("exit 0", 0),
            BoxTable.BoxHighlighted("b2"), EventLog.FollowPaused(), CommandBar.Entered("command", "events"),
            ExecPanel.RunRequested("b1", ["true"]), ExecPanel.Closed("b1")]


class ShutdownProbe:
    """Hooks the App's last shutdown step (``_close_messages``, after Textual emptied the screen stack and while the
    App's loop still handles its queue) to do what a late tick, worker or widget would do at that moment."""

    def __init__(self, app, *, queue_messages: bool = False, post_messages: bool = False, tick: bool = False,
                 queue_keys: bool = False):
        self.app = app
        self.queue_messages, self.post_messages, self.tick = queue_messages, post_messages, tick
        self.queue_keys = queue_keys
        self.stack_was_empty = False
        self.posted: list[bool] = []
        self._close_messages = app._close_messages
        app._close_messages = self._probe

    async def _probe(self, *args, **kwargs):
        app = self.app
        self.stack_was_empty = not app.screen_stack
        if self.queue_messages:  # as if queued just before shutdown began: already past post_message's check
            for message in _console_messages():
                app._message_queue.put_nowait(message)
        if self.queue_keys:  # typed just before shutdown began, still queued
            from textual import events

            for key in ("d", "q", "enter"):
                app._message_queue.put_nowait(events.Key(key, key if len(key) == 1 else None))
        if self.post_messages:
            self.posted = [app.post_message(message) for message in _console_messages()]
        if self.tick:  # what the render, box-refresh and clock timers call (Textual calls them directly)
            app._render_dirty = True
            app._boxes_to_refresh.add("b1")
            await app._render_if_dirty()
            app._refresh_touched_boxes()
        await self._close_messages(*args, **kwargs)


def _app(tmp_path: Path):
    fake = FakeDaemonClient(two_boxes())
    return fake, make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)


async def test_messages_queued_before_shutdown_are_not_handled_once_the_screens_are_gone(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        probe = ShutdownProbe(app, queue_messages=True)
        selected = app.state.selected_box_id
    # run_test re-raises what a handler raised during shutdown (before: IndexError from screen_stack[0])
    assert probe.stack_was_empty
    assert app.state.selected_box_id == selected and app.state.connected  # no handler ran
    assert not any(call[0] == "exec" for call in fake.calls)  # no exec worker started


async def test_keys_queued_before_shutdown_are_not_routed_once_the_screens_are_gone(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        probe = ShutdownProbe(app, queue_keys=True)
    # before: ScreenStackError from App.screen, where Textual routes a key to the focused widget
    assert probe.stack_was_empty
    assert not any(call[0] == "remove_box" for call in fake.calls)


async def test_messages_posted_after_shutdown_began_are_refused(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        probe = ShutdownProbe(app, post_messages=True)
    assert probe.stack_was_empty
    assert probe.posted and not any(probe.posted)


async def test_a_timer_tick_after_the_screens_are_gone_draws_and_fetches_nothing(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        box_calls = len([call for call in fake.calls if call[0] == "box"])
        probe = ShutdownProbe(app, tick=True)
    assert probe.stack_was_empty
    assert app._render_dirty  # nothing was drawn
    assert len([call for call in fake.calls if call[0] == "box"]) == box_calls  # no refresh worker started


async def test_after_exit_is_called_queued_messages_no_longer_reach_the_widgets(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        log = app.main_screen.query_one(EventLog)
        app.exit(0)
        assert app.ui_closed
        assert not app.post_message(BoxTable.BoxHighlighted("b2"))
        assert not app.post_message(CommandBar.Entered("filter", "nothing-matches-this"))
        await pilot.pause()
        assert app.state.selected_box_id == "b1" and not app.state.event_filter.active
        assert log.is_mounted


def test_the_console_messages_are_told_from_textuals():
    from textual import events, messages

    assert all(is_console_message(message) for message in _console_messages())
    assert not is_console_message(messages.ExitApp()) and not is_console_message(events.Key("q", "q"))
