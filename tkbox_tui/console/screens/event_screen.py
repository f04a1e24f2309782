"""``EventScreen``: one event with every field in full (the log cuts lines; this page does not), opened with Enter in
the event log; ``y`` copies it, escaped as shown; Esc goes back.

Fields are escaped by ``page_text.event_fields`` and shown as ``Text``: never read as markup.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Label, Static

from tkbox_daemon.wire import Event

from ...terminal_text import safe_text
from ..keymap import bindings_for
from ..page_text import event_copy_text, event_fields
from ..widgets.console_footer import ConsoleFooter
from .clipboard import copy_escaped


class EventScreen(Screen[None]):
    """The page of ``event`` (of the box named ``box_name``, when the console knows it)."""

    BINDINGS = bindings_for("event_page")
    DEFAULT_CSS = """
    EventScreen #event-page-title { height: 1; padding: 0 1; background: $primary 20%; text-style: bold; }
    EventScreen VerticalScroll { border: round $primary; background: $surface; padding: 0 1; }
    """

    def __init__(self, event: Event, box_name: str | None) -> None:
        super().__init__(id="event-page")
        self.event = event
        self.box_name = box_name
        self.fields = event_fields(event, box_name)
        """Every field as shown: (label, escaped value)."""

    def compose(self) -> ComposeResult:
        event = self.event
        yield Label(Text(f"Event #{event.seq}  ·  {safe_text(event.kind)}  ·  "
                         f"{safe_text(self.box_name or event.box_id or 'daemon')}"), id="event-page-title")
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for label, value in self.fields:
            table.add_row(Text(label), Text(value))
        with VerticalScroll(id="event-page-fields"):
            yield Static(table, id="event-fields")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()

    def action_back(self) -> None:
        self.dismiss(None)

    def action_copy(self) -> None:
        """``y``: every field, escaped as shown (``clipboard.copy_escaped``)."""
        copy_escaped(self, event_copy_text(self.event, self.box_name), f"event #{self.event.seq}")
