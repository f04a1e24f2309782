"""``ApprovalsScreen``: the inbox — every pending approval across all boxes (box, kind, what is asked, rule and
reason, held for, a live countdown to expiry), and the answered, expired, withdrawn or lost ones of the last
minutes, marked.  ``i`` or ``:approvals`` opens it from every screen; Esc goes back.

At most two keys approve one: the cursor starts on the oldest pending approval, so ``a`` approves it, and ``j``
(or Down) then ``a`` the next.  ``x`` rejects with an optional reason, ``r`` approves and remembers, ``A`` approves
all pending (asks first).  The App sets the rows from its ``ApprovalsState`` ("attributes down": ``show``); box
text is escaped (``approval_text``) and shown as ``Text``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Label, Static

from tkbox_daemon.wire import ApprovalInfo

from ...terminal_text import safe_text
from ..approval_text import INBOX_COLUMNS, detail_lines, inbox_cells
from ..keymap import bindings_for
from ..widgets.console_footer import ConsoleFooter
from ..widgets.sized_table import SizedTable

STATE_TOKENS = {"pending": "verdict-ask", "approved": "verdict-allow", "rejected": "verdict-deny",
                "expired": "verdict-deny", "withdrawn": "box-stopped", "lost": "box-failed"}
"""The theme token each approval state's mark is coloured with."""


class ApprovalsScreen(Screen[None]):
    """The inbox; rows are keyed by approval id."""

    BINDINGS = bindings_for("inbox")
    DEFAULT_CSS = """
    ApprovalsScreen #inbox-title { width: 100%; height: auto; padding: 0 1; background: $primary 20%; text-style: bold; }
    ApprovalsScreen #inbox-table { height: 1fr; border: round $panel; }
    ApprovalsScreen #inbox-table:focus { border: round $primary; }
    ApprovalsScreen #inbox-detail-scroll { height: auto; max-height: 45%; border: round $panel; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__(id="approvals-inbox")
        self.shown: list[ApprovalInfo] = []
        """The approvals as shown, in row order."""
        self.detail: list[tuple[str, str]] = []
        """The selected approval's details as shown: (label, escaped value)."""
        self._cells: dict[str, tuple[str, ...]] = {}
        self._ready = False
        """Whether the table has its columns (from ``on_mount`` on)."""
        self._detail = Static("", id="inbox-detail")
        """Kept, not queried: the screen mounts before the scroll container's child does."""

    def compose(self) -> ComposeResult:
        yield Label("Approvals", id="inbox-title")
        yield SizedTable(id="inbox-table")
        with VerticalScroll(id="inbox-detail-scroll", can_focus=False):
            yield self._detail
        yield ConsoleFooter()

    def on_mount(self) -> None:
        table = self.query_one("#inbox-table", DataTable)
        for column in INBOX_COLUMNS:
            table.add_column(column, key=column)
        table.focus()
        self._ready = True
        app: Any = self.app
        self.show(app.approvals.ordered, app.clock())

    @property
    def table(self) -> DataTable[Any]:
        return self.query_one("#inbox-table", DataTable)

    @property
    def selected(self) -> ApprovalInfo | None:
        """The approval under the cursor."""
        row = self.table.cursor_row
        return self.shown[row] if self.shown and 0 <= row < len(self.shown) else None

    # -- what it shows ---------------------------------------------------------------------------------------

    def show(self, approvals: list[ApprovalInfo], now: datetime) -> None:
        """Bring the rows in line with ``approvals`` (oldest first): cells change in place; rows are laid out again
        only when approvals came or went.  The cursor stays on its approval, and starts on the oldest pending."""
        if not self._ready:
            return
        table = self.table
        selected = self.selected
        first_show = not self.shown and approvals
        tokens = self.app.tkbox_tokens  # type: ignore[attr-defined]
        if [info.id for info in approvals] != [info.id for info in self.shown]:
            table.clear()
            self._cells = {}
            for info in approvals:
                cells = inbox_cells(info, now)
                table.add_row(*_row(info, cells, tokens), key=info.id)
                self._cells[info.id] = cells
        else:
            for info in approvals:
                cells = inbox_cells(info, now)
                restyle = self._cells[info.id][0] != cells[0]  # a settled row is dimmed whole
                for column, old, new, value in zip(INBOX_COLUMNS, self._cells[info.id], cells,
                                                   _row(info, cells, tokens), strict=True):
                    if old != new or restyle:
                        table.update_cell(info.id, column, value, update_width=True)
                self._cells[info.id] = cells
        self.shown = list(approvals)
        ids = [info.id for info in approvals]
        if first_show or selected is None or selected.id not in ids:
            target = next((index for index, info in enumerate(approvals) if info.pending), len(approvals) - 1)
        else:
            target = ids.index(selected.id)
        if approvals and table.cursor_row != target:
            table.move_cursor(row=target, animate=False)
        self._show_title(now)
        self._show_detail(now)

    def tick(self) -> None:
        app: Any = self.app
        self.show(app.approvals.ordered, app.clock())

    def _show_title(self, now: datetime) -> None:
        pending = [info for info in self.shown if info.pending]
        boxes = sorted({safe_text(info.box_name or info.box_id) for info in pending})
        settled = len(self.shown) - len(pending)
        if pending:
            text = (f"Approvals — {len(pending)} pending (in {', '.join(boxes)})"
                    + (f"; {settled} answered recently" if settled else ""))
        else:
            text = ("Approvals — nothing pending" + (f"; {settled} answered recently" if settled else "") +
                    ".  When a box's command needs a person's answer it shows here, and the prompt pops up.")
        self.query_one("#inbox-title", Label).update(Text(text))

    def _show_detail(self, now: datetime) -> None:
        info = self.selected
        self.detail = detail_lines(info, now) if info is not None else []
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for label, value in self.detail:
            table.add_row(label, Text(value))
        self._detail.update(table if self.detail else Text(""))

    @on(DataTable.RowHighlighted, "#inbox-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        app: Any = self.app
        self._show_detail(app.clock())

    # -- keys -----------------------------------------------------------------------------------------------

    def _pending_selected(self) -> ApprovalInfo | None:
        info = self.selected
        if info is None:
            self.notify("no approval to answer", severity="warning")
            return None
        return info  # the App says so when it is no longer pending

    def action_approve(self) -> None:
        if (info := self._pending_selected()) is not None:
            self.app.answer_approval(info.id, "approve")  # type: ignore[attr-defined]

    def action_approve_remember(self) -> None:
        if (info := self._pending_selected()) is not None:
            self.app.answer_approval(info.id, "approve", remember=True)  # type: ignore[attr-defined]

    def action_reject(self) -> None:
        if (info := self._pending_selected()) is not None:
            self.app.request_reject(info.id)  # type: ignore[attr-defined]

    def action_approve_all(self) -> None:
        self.app.request_approve_all()  # type: ignore[attr-defined]

    def action_back(self) -> None:
        self.dismiss(None)

    def action_cursor_down(self) -> None:
        self.table.action_cursor_down()

    def action_cursor_up(self) -> None:
        self.table.action_cursor_up()


def _row(info: ApprovalInfo, cells: tuple[str, ...], tokens: dict[str, str]) -> list[Text]:
    """The cells as ``Text`` (never markup); the state (first) in its state's colour, settled rows dimmed."""
    colour = tokens.get(STATE_TOKENS.get(info.state, ""), "")
    state = Text(cells[0], style=f"bold {colour}" if info.pending else colour)
    return [state, *(Text(cell, style="" if info.pending else "dim") for cell in cells[1:])]
