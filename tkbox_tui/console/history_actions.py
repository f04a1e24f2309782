"""``HistoryActionsMixin``: the console starts from the newest events and pages back through older ones on demand.

At its first connection the event worker asks the daemon for the newest ``start_events`` events
(``load_start_events``: one ``event_page``) and follows the stream from the last of them, instead of replaying the
daemon's whole history.  ``o`` in the event log, or scrolling to its top, asks for the page before the oldest event
held (``OlderWanted`` → worker → ``OlderEventsLoaded``); the page joins the front of the log and the view stays on
the line it showed.  The page that reaches the start of what the daemon keeps says so (and, when the daemon no
longer keeps its oldest events, from which sequence number it does).
"""

from __future__ import annotations

from typing import Any

from textual import work

from ..client import DaemonError
from .event_stream import EventInbox
from .messages import EventsPending, OlderEventsLoaded
from .settings import ConsoleSettings
from .state import ConsoleState
from .widgets import EventLog


class HistoryActionsMixin:
    """Mixed into ``ConsoleApp`` (which provides ``client``, ``state``, ``inbox``, ``settings``, ``main_screen``,
    ``post_message``, ``notify`` and ``_render_now``); its handlers go by name (``on_…``), as in the other mixins."""

    state: ConsoleState
    inbox: EventInbox
    settings: ConsoleSettings
    _older_before: int | None = None
    """The ``before`` of the page back being fetched (asked once however often the operator scrolls)."""

    async def load_start_events(self) -> None:
        """At the first connection: the newest ``start_events`` events into the inbox, so the stream follows from
        the last of them.  A daemon without pages (its route answers 404) replays its whole history instead."""
        if self.inbox.after or self.state.last_seq:
            return  # a reconnect: the stream resumes from where it was
        client: Any = self.client  # type: ignore[attr-defined]
        try:
            page = await client.event_page(limit=self.settings.start_events)
        except DaemonError as exc:
            if exc.status == 404:
                return
            raise
        self.state.older_available = page.more
        self.state.first_kept = page.first_kept
        signal = False
        for event in page.events:
            signal = self.inbox.put(event) or signal
        if signal:
            self.post_message(EventsPending())  # type: ignore[attr-defined]

    def on_event_log_older_wanted(self, message: EventLog.OlderWanted) -> None:
        """Ask for the page before the oldest event held (once at a time; none past the start or the log's room)."""
        state = self.state
        if not state.older_available or self._older_before is not None:
            return
        if not state.room_for_older:
            self.notify(f"the console holds {len(state.events):,} events at most; read older ones with: "  # type: ignore[attr-defined]
                        f"tkbox events --after {max(0, state.events[0].seq - 1 - self.settings.older_page)}",
                        severity="warning", markup=False)
            return
        before = state.events[0].seq if state.events else state.last_seq + 1
        self._older_before = before
        self._fetch_older_events(before)

    @work(exclusive=True, group="event-history", exit_on_error=False, description="fetch older events")
    async def _fetch_older_events(self, before: int) -> None:
        client: Any = self.client  # type: ignore[attr-defined]
        try:
            page = await client.event_page(before=before, limit=self.settings.older_page)
        except DaemonError as exc:
            self._older_before = None
            self.notify(f"older events could not be read: {exc.message}", severity="error", markup=False)  # type: ignore[attr-defined]
            return
        self.post_message(OlderEventsLoaded(page))  # type: ignore[attr-defined]

    def on_older_events_loaded(self, message: OlderEventsLoaded) -> None:
        self._older_before = None
        state, page = self.state, message.page
        taken = state.take_older(page.events)
        state.older_available = page.more or len(taken) < len(page.events)
        state.first_kept = page.first_kept
        if not state.older_available:
            kept = f" (older events are no longer kept: the daemon keeps seq {page.first_kept} on)" \
                if page.first_kept > 1 else ""
            self.notify(f"the event log reaches back to the daemon's first event{kept}", markup=False)  # type: ignore[attr-defined]
        if not taken:
            return
        log = self.main_screen.query_one(EventLog)  # type: ignore[attr-defined]
        log.grow(len(state.events))
        added_lines = len(state.shown_entries(taken))
        self._log_rebuild = True
        self._render_now()  # type: ignore[attr-defined]
        log.scroll_to(y=added_lines, animate=False, immediate=True)  # the line shown before stays in view
