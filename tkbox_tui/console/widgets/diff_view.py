"""``DiffView``: the patch review's diff pane — one file's diff, unified or side by side (``diff_render``), scrolled
by the review's keys (half pages, top and bottom, sideways) from wherever the focus is."""

from __future__ import annotations

from textual.widgets import RichLog

from ..diff_render import DiffColours, DiffLine, side_by_side, unified

SIDEWAYS = 8
"""Columns one ``H``/``L`` scrolls."""


class DiffView(RichLog):
    """A ``RichLog`` that holds one file's diff at a time; its text is escaped already and is never markup."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(wrap=False, markup=False, highlight=False, auto_scroll=False, max_lines=None,
                         **kwargs)  # type: ignore[arg-type]

    def show(self, lines: list[DiffLine], colours: DiffColours, split: bool) -> None:
        """Draw ``lines`` (unified, or side by side when ``split``) from the top."""
        self.clear()
        if split:
            self.write(side_by_side(lines, colours), expand=True)
        else:
            self.write(unified(lines, colours))
        self.scroll_home(animate=False)

    def half_page(self, direction: int) -> None:
        """Half a page down (``direction`` 1) or up (-1)."""
        self.scroll_relative(y=direction * max(1, self.scrollable_content_region.height // 2), animate=False)

    def sideways(self, direction: int) -> None:
        self.scroll_relative(x=direction * SIDEWAYS, animate=False)
