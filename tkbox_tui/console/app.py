"""``ConsoleApp``: the operator console.  It owns the state and the daemon client; screens and widgets show it.

One App-level worker consumes the daemon's event stream (``_stream_daemon_events``); every other daemon call runs
in its own worker, so nothing on the UI's path waits on the network.  This module holds the state, the event
stream, rendering, selection and filter; approvals, their prompt and inbox (``approval_actions.py``), box actions
(``box_actions.py``), the exec panel and shell (``exec_actions.py``), the ``:`` commands (``command_actions.py``),
Enter's box and event pages (``drill_down.py``) and themes (``theming.py``) are mixins.  ``make_app`` builds the App for the CLI,
tests and the bench; ``run_console`` runs it against a real daemon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import App, SystemCommand
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from tkbox_daemon.wire import Event

from ..client import DaemonError
from ..terminal_text import safe_text
from .approval_actions import ApprovalActionsMixin
from .box_actions import BoxActionsMixin
from .client_protocol import ConsoleClient
from .command_actions import CommandActionsMixin
from .drill_down import DrillDownMixin
from .event_lines import LogEntry
from .event_stream import YIELD_EVERY, Backoff, EventInbox, fetch_approvals, fetch_box_list
from .exec_actions import ExecActionsMixin
from .export_actions import ExportActionsMixin
from .filter_pattern import FilterError
from .gc_tuning import freeze_startup_heap, tune_garbage_collector
from .history_actions import HistoryActionsMixin
from .key_routing import KeyRoutingMixin
from .keymap import bindings_for, load_user_keymap, scope_bindings
from .lifecycle import LifecycleMixin
from .messages import ApprovalsLoaded, BoxesLoaded, BoxRefreshed, ConnectionChanged, EventsPending
from .network_actions import NetworkActionsMixin
from .present import connection_label, disconnected_banner, textual_markup_literal
from .review_actions import ReviewActionsMixin
from .screens import BoxScreen, DaemonScreen, HelpScreen, MainScreen
from .settings import ConsoleSettings
from .state import ConsoleState, EventFilter
from .theming import ThemeMixin
from .widgets import ApprovalsBadge, BoxDetail, BoxTable, CommandBar, EventLog, ExecPanel

Clock = Callable[[], datetime]
RENDER_CHUNK = 500
"""New events a render sorts for the log (with a regular expression in the filter, searches) before it lets the
App's messages through (``_render_if_dirty``)."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class ConsoleApp(LifecycleMixin, ApprovalActionsMixin, KeyRoutingMixin, ThemeMixin, BoxActionsMixin, ExecActionsMixin, CommandActionsMixin,
                 DrillDownMixin, ReviewActionsMixin, ExportActionsMixin, NetworkActionsMixin, HistoryActionsMixin,
                 App[int]):
    """The console; construct it with ``make_app``."""

    CSS_PATH = ["styles/base.tcss", "styles/app.tcss"]
    BINDINGS = bindings_for("app")
    TITLE = "tkbox console"

    connected: reactive[bool] = reactive(False)
    """Whether the event stream is connected to the daemon (the banner says so plainly when not)."""
    approvals_pending: reactive[int] = reactive(0)
    """Pending approvals across every box: every screen's footer shows it (``ApprovalsBadge``)."""

    def __init__(self, client: ConsoleClient, settings: ConsoleSettings, clock: Clock) -> None:
        super().__init__()
        self.client = client
        self.settings = settings
        self.clock = clock
        self.state = ConsoleState(ring_size=settings.event_ring)
        self.inbox = EventInbox()
        self._render_dirty = True
        self._log_rebuild = True
        self._rendered_seq = 0
        self._boxes_to_refresh: set[str] = set()
        self._shown_texts: dict[str, str] = {}
        self.init_approvals()
        self.init_network()
        self.user_keymap, self.keymap_problems = load_user_keymap(settings.config_file)
        self.set_keymap(self.user_keymap)

    def get_default_screen(self) -> Screen[Any]:
        self._main_screen = MainScreen(self.settings.event_ring, cursor_blink=self.settings.cursor_blink)
        return self._main_screen

    @property
    def main_screen(self) -> MainScreen:
        """The screen at the bottom of the stack (modals go on top of it); the same object while Textual tears the
        stack down on exit (``lifecycle.py``: nothing may touch it then)."""
        return self._main_screen

    def on_mount(self) -> None:
        self.load_console_themes()
        if self.keymap_problems:
            self.notify("Keymap entries ignored (defaults kept):\n" + "\n".join(self.keymap_problems),
                        title="config.yaml", severity="warning", timeout=10)
        self.set_interval(self.settings.render_interval, self._render_if_dirty)
        self.set_interval(self.settings.box_refresh_interval, self._refresh_touched_boxes)
        if self.settings.tick_interval:
            self.set_interval(self.settings.tick_interval, self._mark_dirty)
            self.set_interval(self.settings.tick_interval, self.tick_approvals)
        self.set_interval(self.settings.prompt_recheck_interval, self.recheck_prompt)
        if self.settings.watch_themes:
            self.watch_user_themes()

    def main_screen_ready(self) -> None:
        """Called by ``MainScreen`` once its widgets exist: first render, then the event stream starts."""
        self._render_now()
        self.main_screen.query_one(BoxTable).focus()
        if self.settings.freeze_startup_heap:
            freeze_startup_heap()
        self._stream_daemon_events()
        self.maybe_show_prompt()

    # -- the event stream -----------------------------------------------------------------------------------

    @work(exclusive=True, group="daemon-events", exit_on_error=False, description="daemon event stream")
    async def _stream_daemon_events(self) -> None:
        """Resync boxes and approvals, then follow events from the last seq; on any loss, say so and retry with
        backoff."""
        backoff = Backoff(self.settings.reconnect_initial, self.settings.reconnect_maximum)
        while True:
            try:
                boxes, listed_through = await fetch_box_list(self.client)  # the table is reconciled with it
                approvals = await fetch_approvals(self.client)  # asked after the same last seq as the boxes
                self.post_message(BoxesLoaded(boxes, listed_through))
                self.post_message(ApprovalsLoaded(approvals, listed_through))
                self.post_message(ConnectionChanged(True))
                backoff.reset()
                await self.load_start_events()  # the first time: the newest events, not the whole history
                received = 0
                async for event in self.client.events(after=self.inbox.after):
                    if self.inbox.put(event):
                        self.post_message(EventsPending())
                    received += 1
                    if received % YIELD_EVERY == 0:
                        await asyncio.sleep(0)  # let keys and renders through during a burst
                reason, hint = "the daemon closed the event stream", ""
            except DaemonError as exc:
                reason, hint = exc.message, str(exc.extra.get("hint") or "")
            except (OSError, ValueError) as exc:
                reason, hint = f"the event stream failed: {exc}", ""
            self.post_message(ConnectionChanged(False, reason, hint))
            await asyncio.sleep(backoff.next_delay())

    @on(EventsPending)
    def take_events(self) -> None:
        taken = []
        for event in self.inbox.drain():
            if self.state.apply(event):
                taken.append(event)
                if event.box_id in self.state.boxes and event.kind != "box.removed":
                    self._boxes_to_refresh.add(event.box_id)
            if event.kind == "box.removed":
                self.state.forget_box(event.box_id)
        self._render_dirty = True
        self.take_approval_events(taken)  # at once, not at the next render: the prompt pops now
        self.take_network_events(taken)

    @on(ConnectionChanged)
    def show_connection(self, message: ConnectionChanged) -> None:
        self.state.set_connected(message.connected, message.reason, message.hint)
        self.connected = message.connected
        self._render_dirty = True

    def watch_connected(self, connected: bool) -> None:
        self.set_class(not connected, "-disconnected")

    def watch_approvals_pending(self, count: int) -> None:
        """Every screen's footer shows the count ("attributes down")."""
        if self.ui_closed:
            return
        for screen in self.screen_stack:
            for badge in screen.query(ApprovalsBadge):
                badge.show_count(count)

    @on(BoxesLoaded)
    def take_boxes(self, message: BoxesLoaded) -> None:
        self.state.set_boxes(message.boxes, message.listed_through)
        self._render_dirty = True
        self.count_pending()

    @on(BoxRefreshed)
    def take_box(self, message: BoxRefreshed) -> None:
        if message.box.id in self.state.boxes:
            self.state.update_box(message.box)
            self._render_dirty = True
            self.count_pending()
            for screen in self.screen_stack:  # the box's page, open: its remembered rules
                if isinstance(screen, BoxScreen) and screen.box.id == message.box.id and screen.is_mounted:
                    screen.show_box(message.box)

    def _refresh_touched_boxes(self) -> None:
        if self._boxes_to_refresh and self.state.connected and not self.ui_closed:
            box_ids, self._boxes_to_refresh = sorted(self._boxes_to_refresh), set()
            self._fetch_boxes(box_ids)

    @work(group="box-refresh", exit_on_error=False, description="refresh boxes touched by events")
    async def _fetch_boxes(self, box_ids: list[str]) -> None:
        for box_id in box_ids:
            try:
                self.post_message(BoxRefreshed(await self.client.box(box_id)))
            except DaemonError:
                continue  # gone or the daemon went away; the next event or resync tells

    # -- rendering (coalesced: at most once per render_interval) ----------------------------------------------

    def _mark_dirty(self) -> None:
        self._render_dirty = True

    def _may_render(self) -> bool:
        return self._render_dirty and not self.ui_closed and self.main_screen.is_mounted and not self.prompt_opening

    async def _render_if_dirty(self) -> None:
        """The render timer: the new events are sorted for the log ``RENDER_CHUNK`` at a time, the App's messages
        let through in between (at 20,000 events/s a render takes thousands, and a filter's regular expression
        searches each: an approval's prompt must not wait)."""
        if self._may_render():
            fresh = await self._fresh_entries()
            if self._may_render():
                self._render_now(fresh)

    async def _fresh_entries(self) -> tuple[list[LogEntry], int] | None:
        """The log's entries of the events not drawn yet, and the last seq among them; None when the render must
        sort them itself: the log is to be rebuilt, or meanwhile something drew it or changed what it shows."""
        state, drawn = self.state, self._rendered_seq
        shown_by = (state.event_filter, state.scope_to_selected, state.selected_box_id)
        fresh = [event for event in state.events if event.seq > drawn] if not self._log_rebuild else []
        if len(fresh) <= RENDER_CHUNK:
            return None
        entries: list[LogEntry] = []
        for start in range(0, len(fresh), RENDER_CHUNK):
            if start:
                await asyncio.sleep(0)
                if self._log_rebuild or self._rendered_seq != drawn or shown_by != (
                        state.event_filter, state.scope_to_selected, state.selected_box_id):
                    return None
            entries += state.shown_entries(fresh[start:start + RENDER_CHUNK])
        return entries, fresh[-1].seq

    def _main_widgets(self) -> tuple[BoxTable, BoxDetail, EventLog, Static, Static, Static] | None:
        """The widgets a render draws into, or None while the main screen's widgets are composed or torn down
        (on exit Textual removes them while timers and queued messages can still call for a render)."""
        screen = self.main_screen
        try:
            return (screen.query_one(BoxTable), screen.query_one(BoxDetail), screen.query_one(EventLog),
                    screen.query_one("#events-title", Static), screen.query_one("#follow-status", Static),
                    screen.query_one("#connection-banner", Static))
        except NoMatches:
            return None

    def _render_now(self, sorted_fresh: tuple[list[LogEntry], int] | None = None) -> None:
        """Draw the state; ``sorted_fresh``: the log's new entries already sorted out, and the last seq among them
        (the events after it are drawn by the next render)."""
        widgets = self._main_widgets()
        if widgets is None:
            self._render_dirty = True  # nothing to draw into: a later render draws
            return
        table, detail, log, title, follow_status, banner = widgets
        self._render_dirty = False
        state = self.state
        table.sync(self._boxes_with_live_counts(), self.clock(), self.tkbox_tokens)
        detail.show_box(state.selected_box)
        drawn_through = state.last_seq
        if self._log_rebuild:
            self._log_rebuild = False
            log.set_match_pattern(state.event_filter.highlight)
            log.replace_events(state.shown_entries(state.events))
        else:
            if sorted_fresh is None:
                fresh = state.shown_entries(event for event in state.events if event.seq > self._rendered_seq)
            else:
                fresh, drawn_through = sorted_fresh
                self._render_dirty = drawn_through < state.last_seq
            if fresh:
                log.write_events(fresh)
        self._rendered_seq = drawn_through
        scope = f" of {safe_text(state.selected_box.name)}" if state.scope_to_selected and state.selected_box else ""
        # One row, full width (app.tcss): its count changes at every render, without a layout of the screen.
        older = "  (older: scroll to the top)" if state.older_available else ""
        self._show_text(title, f"Events{scope}  ({state.events_seen} received){older}", layout=False)
        self._show_text(follow_status, connection_label(
            state.connected, state.following, state.new_while_paused,
            state.event_filter.describe(), state.event_filter.inverted))
        # What matters first (the reason can be long: it wraps, see #connection-banner in app.tcss).
        self._show_text(banner, "tkbox console" if state.connected else disconnected_banner(
            state.disconnect_reason, state.disconnect_hint))

    def _show_text(self, widget: Static, text: str, layout: bool = True) -> None:
        """Show ``text`` in ``widget`` as ``Text`` (box names and regexes are no markup), only when it changed: an
        update that may change a widget's size lays out the whole screen, tens of milliseconds at every render
        while events stream in."""
        if self._shown_texts.get(widget.id or "") != text:
            self._shown_texts[widget.id or ""] = text
            widget.update(Text(text), layout=layout)

    def _boxes_with_live_counts(self) -> dict[str, Any]:
        """The boxes, each with its pending approvals as the approval events have it (the daemon's count in
        ``BoxInfo`` lags until the box is read again); the daemon's count stands when it has no approvals API."""
        if not self.approvals.synced:
            return self.state.boxes
        return {box_id: box if box.approvals_pending == (live := self.approvals.pending_count(box_id))
                else replace(box, approvals_pending=live) for box_id, box in self.state.boxes.items()}

    # -- selection, follow, filter, scope -------------------------------------------------------------------

    @on(BoxTable.BoxHighlighted)
    def select_box(self, message: BoxTable.BoxHighlighted) -> None:
        self.state.selected_box_id = message.box_id
        if self.state.scope_to_selected:
            self._log_rebuild = True
        self._render_now()

    def _selected_or_warn(self) -> Any:
        """The selected box, or None after telling the operator to select one (for the box, exec and shell keys)."""
        box = self.state.selected_box
        if box is None:
            self.notify("select a box first", severity="warning")
        return box

    @on(EventLog.FollowPaused)
    def pause_following(self) -> None:
        self.state.pause()
        self._render_dirty = True

    def action_follow_events(self) -> None:
        self.state.follow()
        self.main_screen.query_one(EventLog).resume()
        self._render_now()

    def action_toggle_scope(self) -> None:
        self.state.scope_to_selected = not self.state.scope_to_selected
        self._log_rebuild = True
        self._render_now()

    def set_event_filter(self, text: str) -> bool:
        """Filter the log by ``text`` and give it the focus (for ``n``/``N``); a refused filter is reported and
        the one in force stays.  Returns whether ``text`` was taken."""
        try:
            rule = EventFilter.parse(text)
        except FilterError as exc:
            self.notify(f"{exc}\nThe filter in force stays: {self.state.event_filter.describe() or 'none'}.",
                        title="filter refused", severity="error", timeout=10, markup=False)
            return False
        self.state.event_filter = rule
        self._log_rebuild = True
        self._render_now()
        self.main_screen.query_one(EventLog).focus()
        return True

    @on(CommandBar.Entered)
    def run_entered(self, message: CommandBar.Entered) -> None:
        if message.mode == "filter":
            if not self.set_event_filter(message.text):
                self.main_screen.query_one(CommandBar).open("filter", message.text)  # fix the typo, or Esc
        else:
            self.run_command(message.text)

    # -- command mode, help, palette ------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # A panel with the focus owns the keys: q, ?, : … of the App do not run behind it (main_screen.py).
        top = self.screen_stack[-1] if self.screen_stack else None
        return not (isinstance(top, MainScreen) and top.held_by_focused_panel(action))

    def action_command_mode(self) -> None:
        if self.screen is self.main_screen:
            self.main_screen.query_one(CommandBar).open("command")

    def open_daemon_page(self) -> None:
        if not isinstance(self.screen, DaemonScreen):
            self.push_screen(DaemonScreen())

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        screen = self.screen
        bindings = [(key, active.binding) for key, active in screen.active_bindings.items()]
        listed = {binding.id for _, binding in bindings}
        # Keys of the screen's other panes (the event log's n/N while the boxes have the focus), marked as such.
        elsewhere = [(widget.HELP_PANE, key, binding) for widget in screen.query("*")
                     if getattr(widget, "KEY_SCOPE", None) and widget.display
                     for key, binding in scope_bindings(widget.KEY_SCOPE, self.user_keymap)
                     if binding.id not in listed]
        self.push_screen(HelpScreen(type(screen).__name__.removesuffix("Screen") or "console", bindings,
                                    elsewhere))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("box: New", "Create a box from a form", self.action_new_box)
        yield SystemCommand("approvals: Inbox", "Every pending approval, across all boxes (i)",
                            self.action_open_approvals)
        box = self.state.selected_box
        if box is not None and isinstance(screen, MainScreen):
            box_name = textual_markup_literal(safe_text(box.name))  # the palette reads help text as markup
            yield SystemCommand("box: Exec", f"Run a command in {box_name}", self.action_exec_box)
            yield SystemCommand("box: Shell", f"Open a shell in {box_name}", self.action_open_shell)
            yield SystemCommand("box: Stop", f"Stop {box_name} (asks first)", self.action_stop_box)
            yield SystemCommand("box: Remove", f"Remove {box_name} (asks first)", self.action_remove_box)
            if box.state == "stopped":
                yield SystemCommand("box: Review patch", f"Review {box_name}'s patch and apply it (p)",
                                    self.action_review_box)
                yield SystemCommand("box: Export and verify", f"Export {box_name}'s run, then verify it (E)",
                                    self.action_export_box)
        yield SystemCommand("view: Network", "Hosts the boxes contacted; allow or block one (w)",
                            lambda: self.open_network(self.state.selected_box_id))
        yield SystemCommand("view: Daemon", "The daemon's health and what its host gives a box (:daemon)",
                            self.open_daemon_page)
        yield SystemCommand("view: Follow events", "Resume following the event stream", self.action_follow_events)
        for name in self.console_theme_names:
            yield SystemCommand(f"theme: {name}", f"Switch to the {name} theme",
                                lambda name=name: self.switch_theme(name))

    async def on_unmount(self) -> None:
        self.stop_watching_themes()
        await self.client.close()

    # -- failures -------------------------------------------------------------------------------------------

    @on(Worker.StateChanged)
    def report_worker_failure(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            error = event.worker.error
            self.notify(f"{event.worker.group}: {safe_text(error)}", title="console error", severity="error",
                        timeout=10, markup=False)
            if event.worker.group == "exec":
                self.main_screen.query_one(ExecPanel).set_running(False)


def make_app(client: ConsoleClient, *, settings: ConsoleSettings | None = None, clock: Clock | None = None
             ) -> ConsoleApp:
    """The console for ``client``; the one factory used by the CLI, tests and the bench."""
    return ConsoleApp(client, settings or ConsoleSettings(), clock or utc_now)


def run_console(socket_path: Path | None = None) -> int:
    """Open the console on the daemon at ``socket_path`` (default socket when None); returns an exit code."""
    from ..client import DaemonClient

    tune_garbage_collector()
    app = make_app(DaemonClient(socket_path), settings=ConsoleSettings(freeze_startup_heap=True))
    result = app.run()
    return result if isinstance(result, int) else (app.return_code or 0)


__all__ = ["ConsoleApp", "ConsoleSettings", "Event", "make_app", "run_console"]
