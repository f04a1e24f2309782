"""``MainScreen``: boxes table, detail pane, event log with its status line, the exec panel and the command bar.

The screen owns layout and keys; the App owns the state and the daemon, and sets this screen's widgets from it
("attributes down").  Key actions that need the daemon are forwarded to the App.

Tab and Shift+Tab move the focus between the panes that are shown: the boxes, the event log, and the exec panel's
output and command line and the ``:``/``/`` line while they are open.  A panel that has the focus (the exec panel)
owns the keys: the main screen's and the App's keys do not reach behind it (``held_by_focused_panel``), except
those that move between panes and scroll; Esc leaves it.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Label, Static

from ..keymap import bindings_for, held_by_panels
from ..widgets import BoxDetail, BoxTable, CommandBar, EventLog, ExecPanel
from ..widgets.console_footer import ConsoleFooter


class MainScreen(Screen[None]):
    """The console's home; its bindings are the ``main`` scope of the key catalogue."""

    BINDINGS = bindings_for("main")

    def __init__(self, event_ring: int, *, cursor_blink: bool = True) -> None:
        super().__init__(id="main")
        self.event_ring = event_ring
        self.cursor_blink = cursor_blink

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
        command_bar = CommandBar(id="command-bar")
        command_bar.cursor_blink = self.cursor_blink
        yield command_bar
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.app.main_screen_ready()  # type: ignore[attr-defined]

    # Panes: Tab / Shift+Tab, and the keys a focused panel keeps for itself.
    def action_focus_next(self) -> None:
        self.focus_next()

    def action_focus_previous(self) -> None:
        self.focus_previous()

    def held_by_focused_panel(self, action: str) -> bool:
        """Whether ``action`` (of this screen or the App) is kept from running because a panel has the focus."""
        focused = self.focused
        in_panel = focused is not None and any(isinstance(node, ExecPanel) for node in focused.ancestors_with_self)
        return in_panel and action in held_by_panels()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # False: the binding does not run (the key goes on, unhandled) and the footer leaves it out.
        return not self.held_by_focused_panel(action)

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

    def action_review_box(self) -> None:
        self.app.action_review_box()  # type: ignore[attr-defined]

    def action_export_box(self) -> None:
        self.app.action_export_box()  # type: ignore[attr-defined]

    def action_filter_events(self) -> None:
        self.query_one(CommandBar).open("filter", self.app.state.event_filter.describe())  # type: ignore[attr-defined]

    def action_follow_events(self) -> None:
        self.app.action_follow_events()  # type: ignore[attr-defined]

    def action_toggle_scope(self) -> None:
        self.app.action_toggle_scope()  # type: ignore[attr-defined]
