"""``NetworkScreen``: the network view — the hosts a box (or every box) contacted through its egress door, one row
per scheme, host and port: connections allowed, held for a person and refused, bytes up and down, when last seen,
the last outcome and its reason; below, the selected row in full with its latest urls (the full url where the proxy
reads the request) and the box's allowlist.  ``w`` on the main screen (or ``:network [BOX]``) opens it; Esc goes
back.

``a`` allows the selected host in its box, after a confirm that shows what the allow would have let through
(``AllowConfirmModal``); ``b`` blocks it; ``v`` switches between the box and every box.  The App owns the state
(``NetworkState``, fed from the event stream) and the daemon calls (``network_actions``); this screen redraws from
the state when it changed, touching only the cells that changed.  Every piece of box text is escaped
(``network_text``) and shown as ``Text``.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Label, Static

from ...terminal_text import safe_text
from ..keymap import bindings_for
from ..network_state import HostKey, HostRow, NetworkState
from ..network_text import (
    OUTCOME_TOKENS,
    allowlist_lines,
    box_note,
    columns,
    copy_text,
    detail_lines,
    host_cells,
    title_text,
)
from ..widgets.console_footer import ConsoleFooter
from ..widgets.sized_table import SizedTable
from .clipboard import copy_escaped

REDRAW_EVERY = 0.25
"""Seconds between checks for a change of the state (a burst of events redraws once)."""


class NetworkScreen(Screen[None]):
    """The view of ``box_id``'s hosts (every box's when None); rows are keyed by ``HostKey.row_key``."""

    BINDINGS = bindings_for("network")
    DEFAULT_CSS = """
    NetworkScreen #network-title { width: 100%; height: auto; padding: 0 1; background: $primary 20%; text-style: bold; }
    NetworkScreen #network-note { width: 100%; height: auto; padding: 0 1; color: $text-muted; }
    NetworkScreen #network-table { height: 1fr; border: round $panel; }
    NetworkScreen #network-table:focus { border: round $primary; }
    NetworkScreen #network-detail-scroll { height: 1fr; border: round $panel; padding: 0 1; }
    """

    def __init__(self, box_id: str | None) -> None:
        super().__init__(id="network-view")
        self.box_id = box_id
        """The box whose hosts are shown; None: every box's."""
        self.keys: dict[str, HostKey] = {}
        """The rows shown, by row key, in table order."""
        self.selected: HostKey | None = None
        self.detail: list[tuple[str, str]] = []
        """The selected row's details as shown: (label, escaped value)."""
        self._cells: dict[str, tuple[str, ...]] = {}
        self._drawn: tuple[int, str | None, str] | None = None
        """(state version, box, theme) of the last draw."""
        self._ready = False
        self._detail = Static("", id="network-detail")
        """Kept, not queried: the screen mounts before the scroll container's child does."""

    def compose(self) -> ComposeResult:
        yield Label("Network", id="network-title")
        yield Static("", id="network-note")
        yield SizedTable(id="network-table")
        with VerticalScroll(id="network-detail-scroll", can_focus=False):
            yield self._detail
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self._ready = True
        self._set_columns()
        self.table.focus()
        self.redraw()
        self.set_interval(REDRAW_EVERY, self.redraw)

    @property
    def table(self) -> DataTable[Any]:
        return self.query_one("#network-table", DataTable)

    @property
    def state(self) -> NetworkState:
        return self.app.network  # type: ignore[attr-defined, no-any-return]

    def box_label(self, box_id: str) -> str:
        """``name (id)`` of a box, escaped; the id alone when its name is not known."""
        name = self.app.state.box_names.get(box_id)  # type: ignore[attr-defined]
        return f"{safe_text(name)} ({safe_text(box_id)})" if name else safe_text(box_id)

    # -- drawing ----------------------------------------------------------------------------------------------

    def _set_columns(self) -> None:
        table = self.table
        table.clear(columns=True)
        self.keys.clear()
        self._cells.clear()
        for column in columns(self.box_id is None):
            table.add_column(column, key=column)

    def redraw(self, force: bool = False) -> None:
        """Bring the view in line with the state, when it changed (or ``force``)."""
        if not self._ready:
            return
        theme = self.app.theme
        drawn = (self.state.version, self.box_id, theme)
        if drawn == self._drawn and not force:
            return
        if self._drawn is not None and self._drawn[2] != theme:
            self._set_columns()  # colours come from the theme: draw every cell again
        self._drawn = drawn
        rows = self.state.rows(self.box_id)
        emptied = not self.keys
        if self._sync_rows(rows) and not emptied:
            self.selected = self.cursor_key()  # rows above the cursor went: it is on another row now
        elif emptied and self.selected is not None and self.selected.row_key in self.keys:
            self.table.move_cursor(row=list(self.keys).index(self.selected.row_key))  # drawn afresh: keep the row
        box_label = None if self.box_id is None else self.box_label(self.box_id)
        self.query_one("#network-title", Label).update(Text(title_text(self.state, box_label, len(rows))))
        note = box_note(self.state.box(self.box_id)) if self.box_id is not None else ""
        self.query_one("#network-note", Static).update(Text(note))
        self.query_one("#network-note", Static).display = bool(note)
        if rows and (self.selected is None or self.selected.row_key not in self.keys):
            self.table.move_cursor(row=0)
            self.selected = rows[0].key
        self._show_detail()

    def _sync_rows(self, rows: list[HostRow]) -> bool:
        """Bring the table in line with ``rows``, touching only the cells that changed; returns whether rows went
        (dropped from the state's bound)."""
        table = self.table
        tokens: dict[str, str] = self.app.tkbox_tokens  # type: ignore[attr-defined]
        listed = {row.key.row_key for row in rows}
        gone = [key for key in self.keys if key not in listed]
        for row_key in gone:
            table.remove_row(row_key)
            del self.keys[row_key], self._cells[row_key]
        names = columns(self.box_id is None)
        for row in rows:
            row_key = row.key.row_key
            cells = host_cells(row, None if self.box_id is not None else self._box_name(row.key.box_id))
            shown = self._cells.get(row_key)
            if shown is None:
                table.add_row(*(self._cell(name, cell, tokens) for name, cell in zip(names, cells, strict=True)),
                              key=row_key)
                self.keys[row_key] = row.key
            else:
                for name, old, new in zip(names, shown, cells, strict=True):
                    if old != new:
                        table.update_cell(row_key, name, self._cell(name, new, tokens), update_width=True)
            self._cells[row_key] = cells
        return bool(gone)

    def _box_name(self, box_id: str) -> str:
        return self.app.state.box_names.get(box_id) or box_id  # type: ignore[attr-defined, no-any-return]

    @staticmethod
    def _cell(column: str, value: str, tokens: dict[str, str]) -> Text:
        if column == "last":
            return Text(value, style=tokens.get(OUTCOME_TOKENS.get(value, ""), ""))
        if column in ("held", "refused") and value != "0":
            return Text(value, style=tokens.get("verdict-ask" if column == "held" else "verdict-deny", ""))
        return Text(value)

    def _show_detail(self) -> None:
        row = self.state.row(self.selected) if self.selected is not None else None
        if row is None:
            whose = "this box" if self.box_id is not None else "any box"
            self.detail = [("hosts", f"No connection of {whose} seen yet: the hosts appear here as the box's "
                                     "egress events arrive.")]
            if self.box_id is not None:
                self.detail += allowlist_lines(self.state.box(self.box_id))
        else:
            self.detail = detail_lines(row, self.box_label(row.key.box_id), self.state.box(row.key.box_id))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for label, value in self.detail:
            grid.add_row(label, Text(value))
        self._detail.update(grid)

    @on(DataTable.RowHighlighted, "#network-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is not None and event.row_key.value in self.keys:
            self.selected = self.keys[str(event.row_key.value)]
            self._show_detail()

    # -- keys -------------------------------------------------------------------------------------------------

    def cursor_key(self) -> HostKey | None:
        """The row under the table's cursor now (keys typed ahead act on it, before its highlight message
        arrives)."""
        table = self.table
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0))
        return self.keys.get(str(row_key.value))

    def _selected_or_warn(self) -> HostKey | None:
        key = self.cursor_key()
        if key is None or self.state.row(key) is None:
            self.notify("no host selected: the list fills as the box's connections come", severity="warning")
            return None
        if key != self.selected:
            self.selected = key
            self._show_detail()
        return key

    def action_allow_host(self) -> None:
        key = self._selected_or_warn()
        if key is not None:
            self.app.request_allow_host(key)  # type: ignore[attr-defined]

    def action_block_host(self) -> None:
        key = self._selected_or_warn()
        if key is not None:
            self.app.block_host(key)  # type: ignore[attr-defined]

    def action_toggle_scope(self) -> None:
        """``v``: every box's hosts, or back to one box's (the selected row's, else the main screen's selection)."""
        if self.box_id is None:
            app: Any = self.app
            key = self.cursor_key()
            box_id = key.box_id if key is not None else app.state.selected_box_id
            if box_id is None:
                self.notify("no box to show alone: select a row or a box first", severity="warning")
                return
            self.box_id = box_id
        else:
            self.box_id = None
        self._set_columns()
        self.redraw(force=True)

    def action_copy(self) -> None:
        if self._selected_or_warn() is not None:
            copy_escaped(self, copy_text(self.detail), "the host's details")

    def action_cursor_down(self) -> None:
        self.table.action_cursor_down()

    def action_cursor_up(self) -> None:
        self.table.action_cursor_up()

    def action_back(self) -> None:
        self.dismiss(None)
