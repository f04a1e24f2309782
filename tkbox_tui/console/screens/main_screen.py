"""``MainScreen``: boxes table, detail pane, event log with its status line, the exec panel and the command bar.

The screen owns layout and keys; the App owns the state and the daemon, and sets this screen's widgets from it
("attributes down").  Key actions that need the daemon are forwarded to the App.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Label, Static

from ..keymap import bindings_for
from ..widgets import BoxDetail, BoxTable, CommandBar, EventLog, ExecPanel


class MainScreen(Screen[None]):
    """The console's home; its bindings are the ``main`` scope of the key catalogue."""

    BINDINGS = bindings_for("main")

    def __init__(self, event_ring: int) -> None:
        super().__init__(id="main")
        self.event_ring = event_ring

    def compose(self) -> ComposeResult:
        yield Static("tkbox", id="connection-banner")
        with Horizontal(id="top-panes"):
            with Vertical(id="boxes-pane"):
                yield Label("Boxes", classes="pane-title")
                yield BoxTable(id="box-table")
            with Vertical(id="detail-pane"):
                yield Label("Detail", classes="pane-title")
                yield BoxDetail(id="box-detail")
        with Vertical(id="events-pane"):
            yield Label("Events", classes="pane-title", id="events-title")
            yield EventLog(self.event_ring, id="event-log")
            yield Static("", id="follow-status")
        yield ExecPanel(id="exec-panel")
        yield CommandBar(id="command-bar")
        yield Footer()

    def on_mount(self) -> None:
        self.app.main_screen_ready()  # type: ignore[attr-defined]

    # Navigation that works whichever pane has the focus.
    def action_cursor_down(self) -> None:
        focused = self.focused
        if isinstance(focused, BoxTable):
            focused.action_cursor_down()
        elif focused is not None:
            focused.scroll_down(animate=False)

    def action_cursor_up(self) -> None:
        focused = self.focused
        if isinstance(focused, BoxTable):
            focused.action_cursor_up()
        elif isinstance(focused, EventLog):
            focused.action_scroll_up()
        elif focused is not None:
            focused.scroll_up(animate=False)

    # Everything else is the App's business (it holds the client and the state).
    def action_new_box(self) -> None:
        self.app.action_new_box()  # type: ignore[attr-defined]

    def action_exec_box(self) -> None:
        self.app.action_exec_box()  # type: ignore[attr-defined]

    def action_open_shell(self) -> None:
        self.app.action_open_shell()  # type: ignore[attr-defined]

    def action_stop_box(self) -> None:
        self.app.action_stop_box()  # type: ignore[attr-defined]

    def action_remove_box(self) -> None:
        self.app.action_remove_box()  # type: ignore[attr-defined]

    def action_filter_events(self) -> None:
        self.query_one(CommandBar).open("filter", self.app.state.event_filter.describe())  # type: ignore[attr-defined]

    def action_follow_events(self) -> None:
        self.app.action_follow_events()  # type: ignore[attr-defined]

    def action_toggle_scope(self) -> None:
        self.app.action_toggle_scope()  # type: ignore[attr-defined]
