"""``ReviewFileTable``: the patch review's files, one row per path (keyed by it), cells drawn as ``Text``."""

from __future__ import annotations

from ..keymap import bindings_for
from .sized_table import SizedTable


class ReviewFileTable(SizedTable):
    """Enter (``review.diff``) takes the focus into the diff: the table's own select, which posts ``RowSelected``."""

    BINDINGS = bindings_for("review_files")
    KEY_SCOPE = "review_files"
    HELP_PANE = "files"

    def cursor_path(self) -> str | None:
        """The path of the row under the cursor now (keys typed together arrive before the highlight message)."""
        if not self.row_count:
            return None
        row_key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return str(row_key.value) if row_key.value is not None else None
