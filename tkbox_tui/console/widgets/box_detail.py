"""``BoxDetail``: the selected box's settings, allowlist, secret names with hosts (never values), limits and run.

Values arrive escaped from ``present.box_detail_lines`` and are shown as ``Text``: never read as Rich markup.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from tkbox_daemon.wire import BoxInfo

from ..present import box_detail_lines

NOTHING_SHOWN = object()
"""What ``BoxDetail.shown`` holds before the first ``show_box``."""


class BoxDetail(Static):
    """Shows one box; ``show_box(None)`` says that nothing is selected."""

    DEFAULT_CSS = """
    BoxDetail { height: auto; padding: 0 1; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.shown: list[tuple[str, str]] | None | object = NOTHING_SHOWN
        """What it shows: (label, escaped value) of the box, or None for no box selected."""

    def show_box(self, box: BoxInfo | None) -> None:
        """Show ``box`` (the App calls it at every render): only a change is drawn, since an update lays out the
        whole screen, tens of milliseconds at every render while events stream in."""
        lines = box_detail_lines(box) if box is not None else None
        if lines == self.shown:
            return
        self.shown = lines
        if lines is None:
            self.update("No box selected. Press n to create one.")
            return
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for label, value in lines:
            table.add_row(label, Text(value))
        self.update(table)
