"""``ReviewFileTable``: the patch review's files, one row per path (keyed by it), cells drawn as ``Text``."""

from __future__ import annotations

from textual.widgets import DataTable

from ..keymap import bindings_for


class ReviewFileTable(DataTable[object]):
    """Enter (``review.diff``) takes the focus into the diff: the table's own select, which posts ``RowSelected``."""

    BINDINGS = bindings_for("review_files")
    KEY_SCOPE = "review_files"
    HELP_PANE = "files"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)  # type: ignore[arg-type]

    def cursor_path(self) -> str | None:
        """The path of the row under the cursor now (keys typed together arrive before the highlight message)."""
        if not self.row_count:
            return None
        row_key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return str(row_key.value) if row_key.value is not None else None
