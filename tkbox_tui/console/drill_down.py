"""``DrillDownMixin``: Enter drills in — on a stopped box, its patch review (``PatchReviewScreen``; its page
when the daemon has no saved patch for it); on any other box, its page (``BoxScreen``); in the event log, the
event's page (``EventScreen``).  Esc on a page goes back (the pages' own keys).

On the boxes table Enter (``box.open``) is the table's own select (``DataTable.RowSelected``, which a click on the
row already highlighted posts too); in the event log Enter (``log.open``) opens the event at the ``n``/``N``
marker, or without a marker the bottom line in view (the newest while following).
"""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable

from .page_text import seq_of_line
from .review_actions import REVIEWABLE_STATES
from .screens import BoxScreen, EventScreen, MainScreen
from .widgets import BoxTable, EventLog


def line_to_open(log: EventLog) -> int | None:
    """The index of the log line Enter opens: the marker's, else the bottom one in view; None when empty."""
    if not log.lines:
        return None
    if log.current_line is not None and 0 <= log.current_line < len(log.lines):
        return log.current_line
    bottom = log.scroll_offset.y + max(log.scrollable_content_region.height, 1) - 1
    return max(0, min(bottom, len(log.lines) - 1))


class DrillDownMixin:
    """Mixed into ``ConsoleApp`` (which provides ``client``, ``state``, ``screen``, ``push_screen``, ``notify`` and
    ``_selected_or_warn``).  Handlers are named for their messages: Textual collects ``@on`` only from classes
    built by its metaclass."""

    def action_open_event(self) -> None:
        """Enter in the event log (``log.open``): the event at the marker, else the newest in view."""
        app: Any = self
        screen = app.screen
        if isinstance(screen, MainScreen):
            self.open_event_at_line(screen.query_one(EventLog))

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        if isinstance(message.data_table, BoxTable) and message.row_key.value is not None:
            message.stop()
            app: Any = self
            box = app.state.boxes.get(str(message.row_key.value))
            if box is not None and box.state in REVIEWABLE_STATES:
                app.open_review(box.id)
            else:
                self.open_box_page(str(message.row_key.value))

    def open_box_page(self, box_id: str) -> None:
        app: Any = self
        box = app.state.boxes.get(box_id)
        if box is None:
            app.notify("that box is gone", severity="warning")
            return
        app.push_screen(BoxScreen(app.client, box))

    def open_event_at_line(self, log: EventLog) -> None:
        app: Any = self
        index = line_to_open(log)
        if index is None:
            app.notify("no event in the log yet", severity="warning")
            return
        seq = seq_of_line(log.lines[index])
        event = next((item for item in app.state.events if item.seq == seq), None) if seq is not None else None
        if event is None:
            app.notify(f"event #{seq} is no longer in the console's memory (it keeps the last "
                       f"{app.state.ring_size:,}); tkbox events --json has every event", severity="warning",
                       markup=False)
            return
        known = app.state.boxes.get(event.box_id)
        app.push_screen(EventScreen(event, known.name if known else None))
