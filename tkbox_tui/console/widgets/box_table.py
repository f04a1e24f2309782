"""``BoxTable``: the boxes, one row per box id, updated cell by cell (never cleared and refilled).

``DataTable`` reads a ``str`` cell as Rich markup, so every text cell (already escaped by ``present.box_cells``)
is written as literal markup too (``rich_markup_literal``): a box's text shows as itself, never as styles or
links.  The state and last-event cells are ``Text`` coloured with the theme's tokens (``box-<state>``;
``event-alert`` for an alert kind).  A column widens when a cell updated in place needs it (``DataTable`` sizes
columns when rows are added and, by default, not on ``update_cell``), so ``exec.finished`` is never cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from textual.message import Message

from tkbox_daemon.wire import BoxInfo

from ..keymap import bindings_for
from ..present import BOX_COLUMNS, box_cells, last_event_cell, rich_markup_literal, state_cell
from .sized_table import SizedTable


class BoxTable(SizedTable):
    """Boxes keyed by id; ``sync`` applies a new picture of the boxes with ``update_cell``/``add_row``/``remove_row``."""

    BINDINGS = bindings_for("boxes")
    """Enter (``box.open``) opens the box's page: the table's own select, which posts ``RowSelected``."""
    KEY_SCOPE = "boxes"
    HELP_PANE = "boxes table"
    DEFAULT_CSS = """
    BoxTable { height: 1fr; }
    """

    @dataclass
    class BoxHighlighted(Message):
        """The cursor moved to a box (or there is none)."""

        box_id: str | None

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._shown_cells: dict[str, tuple[str, ...]] = {}

    def on_mount(self) -> None:
        for column in BOX_COLUMNS:
            self.add_column(column, key=column)

    @property
    def box_ids(self) -> list[str]:
        """Row keys in display order."""
        return [str(row.key.value) for row in self.ordered_rows]

    def sync(self, boxes: dict[str, BoxInfo], now: datetime, theme_variables: dict[str, str]) -> None:
        """Bring the rows in line with ``boxes``, touching only cells whose text changed."""
        for box_id in [key for key in self._shown_cells if key not in boxes]:
            self.remove_row(box_id)
            del self._shown_cells[box_id]
        for box_id, box in boxes.items():
            cells = box_cells(box, now)
            shown = self._shown_cells.get(box_id)
            rendered = [_cell(column, cell, theme_variables) for column, cell in zip(BOX_COLUMNS, cells, strict=True)]
            if shown is None:
                self.add_row(*rendered, key=box_id)
            else:
                for column, old, new, value in zip(BOX_COLUMNS, shown, cells, rendered, strict=True):
                    if old != new:
                        self.update_cell(box_id, column, value, update_width=True)
            self._shown_cells[box_id] = cells

    def recolour(self, theme_variables: dict[str, str]) -> None:
        """Re-render the coloured cells (state, last event) after a theme change."""
        for box_id, cells in self._shown_cells.items():
            for column in _COLOURED:
                self.update_cell(box_id, column, _cell(column, cells[_COLOURED[column]], theme_variables))

    def select_box(self, box_id: str) -> bool:
        """Move the cursor to ``box_id``; False when there is no such row."""
        if box_id not in self._shown_cells:
            return False
        self.move_cursor(row=self.get_row_index(box_id))
        return True

    def on_data_table_row_highlighted(self, event: SizedTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.BoxHighlighted(str(event.row_key.value) if event.row_key else None))


_COLOURED = {"state": BOX_COLUMNS.index("state"), "last event": BOX_COLUMNS.index("last event")}
"""The columns whose cells carry a theme colour, with their index in ``BOX_COLUMNS``."""


def _cell(column: str, shown: str, theme_variables: dict[str, str]) -> object:
    """One cell as the table takes it: a coloured ``Text`` for state and last event, literal markup otherwise."""
    if column == "state":
        return state_cell(shown, theme_variables)
    if column == "last event":
        return last_event_cell(shown, theme_variables)
    return rich_markup_literal(shown)
