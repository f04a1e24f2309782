"""``SizedTable``: a ``DataTable`` whose drawn rows follow its column widths when those change after a draw.

Textual (8.2.8, pinned) sizes columns for added rows and updated cells when the table is next idle, but a row
drawn in between stays in its render cache at the old width (the cache key does not change with a column's
width). On a loaded machine the box table showed ``exec.finished`` cut to ``exec.finish``, and the patch review
drew its excluded row's ``excluded`` two cells wider than the rows above it. So each of the two width updates
clears the caches when a width changed.
"""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable


class SizedTable(DataTable[object]):
    """A row-cursor table (no zebra stripes) that redraws every row whenever a column's width changes."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)  # type: ignore[arg-type]

    def _update_column_widths(self, updated_cells: set[Any]) -> None:
        widths = self._column_widths()
        super()._update_column_widths(updated_cells)
        if self._column_widths() != widths:
            self._clear_caches()

    def _update_dimensions(self, new_rows: Any) -> None:
        widths = self._column_widths()
        super()._update_dimensions(new_rows)
        if self._column_widths() != widths:
            self._clear_caches()

    def _column_widths(self) -> dict[Any, int]:
        return {key: column.content_width for key, column in self.columns.items()}
