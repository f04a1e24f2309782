"""``BoxDetail``: the selected box's settings, allowlist, secret names with hosts (never values), limits and run.

Values arrive escaped from ``present.box_detail_lines`` and are shown as ``Text``: never read as Rich markup.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tkbox_daemon.wire import BoxInfo

from ..present import box_detail_lines


class BoxDetail(Static):
    """Shows one box; ``show_box(None)`` says that nothing is selected."""

    DEFAULT_CSS = """
    BoxDetail { height: auto; padding: 0 1; }
    """

    def show_box(self, box: BoxInfo | None) -> None:
        if box is None:
            self.update("No box selected. Press n to create one.")
            return
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for label, value in box_detail_lines(box):
            table.add_row(label, Text(value))
        self.update(table)
