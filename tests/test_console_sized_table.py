"""``SizedTable`` keeps every drawn row at its columns' widths: a row drawn between a cell's update and the
table's next idle (when Textual measures the column) is drawn again once the column widened (Textual's own
``DataTable`` kept it in its render cache at the old width: rows of one table out of line)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import DataTable

from tkbox_tui.console.widgets.sized_table import SizedTable


class _TableApp(App[None]):
    def __init__(self, table_class: type[DataTable[object]]) -> None:
        super().__init__()
        self.table_class = table_class

    def compose(self) -> ComposeResult:
        yield self.table_class(id="table")


def _tail_columns(table: DataTable[object]) -> list[int]:
    """Where ``tail`` starts on the header and on each row."""
    return [table.render_line(y).text.index("tail") for y in range(3)]


async def _widen_a_cell_after_a_draw(table_class: type[DataTable[object]]) -> list[int]:
    app = _TableApp(table_class)
    async with app.run_test(size=(60, 8)) as pilot:
        table = app.query_one(DataTable)
        table.add_column("in", key="in")
        table.add_column("tail", key="tail")
        for key in ("r1", "r2"):
            table.add_row("[x]", "tail", key=key)
        await pilot.pause()
        assert len(set(_tail_columns(table))) == 1
        table.update_cell("r2", "in", "excluded", update_width=True)
        _tail_columns(table)  # drawn before the table is next idle, as a loaded machine does
        await pilot.pause()
        return _tail_columns(table)


def _lined_up_after_the_wide_cell(columns: list[int]) -> bool:
    return len(set(columns)) == 1 and columns[0] >= len(" excluded ")


async def test_every_row_follows_a_column_that_widened():
    assert _lined_up_after_the_wide_cell(await _widen_a_cell_after_a_draw(SizedTable))


async def test_the_plain_data_table_draws_from_its_stale_cache():
    """The case the class exists for: Textual's own table still draws the column at its old width."""
    assert not _lined_up_after_the_wide_cell(await _widen_a_cell_after_a_draw(DataTable))
