"""``BoxScreen``: one box's page — its remembered approval rules, its execs (command, decision, end and whose word
it is, duration, start, output sizes) and the selected exec's details and kept output.  Enter on a box opens it;
Esc goes back one level.

A remembered rule ("approve and remember" on the prompt or in the inbox) approves later identical asks in this box
without a person; ``d`` forgets the selected one (asks first), and those asks go to a person again.

The daemon keeps the last 256 KiB of each stream of each exec within a per-box budget (``exec_history.py`` in the
daemon); the page reads them in workers that die with the page.  While an exec runs, the page reads again every
``REFRESH_WHILE_RUNNING`` seconds.  Every piece of box text is escaped (``page_text``) and shown as ``Text`` or in a
``Log``, never read as markup.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Label, Log, Static

from tkbox_daemon.wire import BoxInfo, ExecInfo, ExecOutput, RememberedRule

from ...client import DaemonError
from ...terminal_text import safe_text
from ..approval_text import REMEMBERED_COLUMNS, remembered_cells, remembered_rules
from ..keymap import bindings_for
from ..page_text import (
    EXEC_COLUMNS,
    exec_cells,
    exec_copy_text,
    exec_detail_lines,
    format_bytes,
    output_lines,
)
from ..widgets.console_footer import ConsoleFooter
from ..widgets.sized_table import SizedTable
from .clipboard import copy_escaped
from .confirm_modal import ConfirmModal

REFRESH_WHILE_RUNNING = 1.0
"""Seconds between reads of the execs while one of them runs."""
OUTPUT_LINES = 2 * 256 * 1024 + 8
"""Lines the output pane holds: both 256 KiB tails even if every byte were a newline, and their headings (the daemon
bounds what it sends; the ``Log`` holds lines, not a screenful)."""


class BoxScreen(Screen[None]):
    """The page of ``box``; ``client`` is the console's daemon client (``execs``, ``exec_output``)."""

    BINDINGS = bindings_for("box_page")
    DEFAULT_CSS = """
    BoxScreen #box-page-title { height: 1; padding: 0 1; background: $primary 20%; text-style: bold; }
    BoxScreen #remembered-title { height: 1; padding: 0 1; color: $text-muted; text-style: bold; }
    BoxScreen #remembered-table { height: auto; max-height: 6; border: round $panel; }
    BoxScreen #remembered-table:focus { border: round $primary; }
    BoxScreen .-no-rules { display: none; }
    BoxScreen #exec-table { height: 2fr; border: round $panel; }
    BoxScreen #exec-table:focus { border: round $primary; }
    BoxScreen #exec-detail { height: auto; max-height: 12; padding: 0 1; border: round $panel; }
    BoxScreen #exec-page-output { height: 3fr; border: round $panel; background: $surface; }
    BoxScreen #exec-page-output:focus { border: round $primary; }
    """

    def __init__(self, client: Any, box: BoxInfo) -> None:
        super().__init__(id="box-page")
        self.client = client
        self.box = box
        self.execs: list[ExecInfo] = []
        self.output: ExecOutput | None = None
        """The selected exec with its kept output, once read."""
        self.selected_exec: int | None = None
        self.detail: list[tuple[str, str]] = []
        """The selected exec's details as shown: (label, escaped value)."""
        self._shown_cells: dict[int, tuple[str, ...]] = {}
        self._refresh_timer: Timer | None = None
        self.loads = 0
        """How many times the execs were read (tests wait on it)."""
        self.kept_bytes: int | None = None
        """The output the daemon keeps of the execs listed (None until they are read)."""
        self.rules: list[RememberedRule] = []
        """The box's remembered rules as shown."""

    def compose(self) -> ComposeResult:
        yield Label(self._title(), id="box-page-title")
        yield Label("Remembered approvals (d forgets the selected one)", id="remembered-title", classes="-no-rules")
        yield SizedTable(id="remembered-table", classes="-no-rules")
        table = SizedTable(id="exec-table")
        yield table
        yield Static(Text("reading the box's execs…"), id="exec-detail")
        yield Log(id="exec-page-output", max_lines=OUTPUT_LINES, auto_scroll=False)
        yield ConsoleFooter()

    def _title(self, kept: int | None = None) -> Text:
        box = self.box
        parts = [f"Box {safe_text(box.name)} ({safe_text(box.id)})", safe_text(box.state),
                 f"{len(self.execs)} execs listed"]
        if kept is not None:
            parts.append(f"output kept {format_bytes(kept)}")
        if box.state == "stopped":
            parts.append("p: review its patch")
        return Text("  ·  ".join(parts))  # Text: a box name is no markup

    def on_mount(self) -> None:
        table = self.query_one("#exec-table", DataTable)
        for column in EXEC_COLUMNS:
            table.add_column(column, key=column)
        for column in REMEMBERED_COLUMNS:
            self.query_one("#remembered-table", DataTable).add_column(column, key=column)
        table.focus()
        self.show_box(self.box)
        self.load_execs()

    # -- reading ----------------------------------------------------------------------------------------------

    @work(exclusive=True, group="box-page-execs", exit_on_error=False, description="read the box's execs")
    async def load_execs(self) -> None:
        try:
            execs = await self.client.execs(self.box.id)
            box = await self.client.box(self.box.id)  # its state now, for the title; its remembered rules
        except DaemonError as exc:
            self.query_one("#exec-detail", Static).update(Text(f"could not read the execs: {safe_text(exc.message)}"))
            return
        self.show_box(box)
        self.show_execs(execs)

    def show_box(self, box: BoxInfo) -> None:
        """The box as the daemon describes it now: the title, and its remembered rules (hidden when none)."""
        self.box = box
        rules = remembered_rules(box.remembered)
        self.query_one("#box-page-title", Label).update(self._title(self.kept_bytes))
        if [rule.id for rule in rules] != [rule.id for rule in self.rules]:
            table = self.query_one("#remembered-table", DataTable)
            table.clear()
            for rule in rules:
                table.add_row(*(Text(cell) for cell in remembered_cells(rule)), key=rule.id)
        self.rules = rules
        for widget_id in ("#remembered-title", "#remembered-table"):
            self.query_one(widget_id).set_class(not rules, "-no-rules")

    def show_execs(self, execs: list[ExecInfo]) -> None:
        """Bring the table in line with ``execs`` (oldest first), touching only cells that changed."""
        before = {info.id: info for info in self.execs}
        self.execs = execs
        self.loads += 1
        table = self.query_one("#exec-table", DataTable)
        listed = {info.id for info in execs}
        for exec_id in [key for key in self._shown_cells if key not in listed]:
            table.remove_row(str(exec_id))
            del self._shown_cells[exec_id]
        for info in execs:
            cells = exec_cells(info)
            shown = self._shown_cells.get(info.id)
            if shown is None:
                table.add_row(*(Text(cell) for cell in cells), key=str(info.id))
            else:
                for column, old, new in zip(EXEC_COLUMNS, shown, cells, strict=True):
                    if old != new:
                        table.update_cell(str(info.id), column, Text(new), update_width=True)
            self._shown_cells[info.id] = cells
        self.kept_bytes = sum(info.stdout.kept + info.stderr.kept for info in execs)
        self.query_one("#box-page-title", Label).update(self._title(self.kept_bytes))
        if not execs:
            self.query_one("#exec-detail", Static).update(
                Text("No command has run in this box yet: e on the main screen runs one."))
        elif self.selected_exec is None or self.selected_exec not in listed:
            table.move_cursor(row=len(execs) - 1)  # the newest
            self._select(execs[-1].id)
        elif before.get(self.selected_exec) != next(info for info in execs if info.id == self.selected_exec):
            self.load_output(self.selected_exec)  # it ran on, or ended: read its output again
        self._schedule_refresh()

    def _schedule_refresh(self) -> None:
        if self._refresh_timer is not None:
            self._refresh_timer.stop()
            self._refresh_timer = None
        if any(info.state == "running" for info in self.execs):
            self._refresh_timer = self.set_timer(REFRESH_WHILE_RUNNING, self.load_execs)

    @on(DataTable.RowHighlighted, "#exec-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is not None and event.row_key.value is not None:
            self._select(int(event.row_key.value))

    @on(DataTable.RowSelected, "#exec-table")
    def _drill_into_output(self, event: DataTable.RowSelected) -> None:
        """Enter on an exec: its output takes the focus (PgUp/PgDn, arrows); Esc comes back to the execs."""
        event.stop()
        self.query_one("#exec-page-output", Log).focus()

    def _select(self, exec_id: int) -> None:
        if exec_id == self.selected_exec and self.output is not None and self.output.exec.id == exec_id:
            return
        self.selected_exec = exec_id
        info = next((item for item in self.execs if item.id == exec_id), None)
        if info is not None:
            self._show_detail(info)
        self.load_output(exec_id)

    @work(exclusive=True, group="box-page-output", exit_on_error=False, description="read an exec's output")
    async def load_output(self, exec_id: int) -> None:
        try:
            output = await self.client.exec_output(self.box.id, exec_id)
        except DaemonError as exc:
            log = self.query_one("#exec-page-output", Log)
            log.clear()
            log.write_line(f"could not read the output: {safe_text(exc.message)}")
            return
        if exec_id == self.selected_exec:
            self.show_output(output)

    def show_output(self, output: ExecOutput) -> None:
        self.output = output
        self._show_detail(output.exec)
        log = self.query_one("#exec-page-output", Log)
        at_end = log.is_vertical_scroll_end or log.scroll_offset.y == 0
        log.clear()
        log.write_lines(output_lines(output))
        if at_end:
            log.scroll_end(animate=False)

    def _show_detail(self, info: ExecInfo) -> None:
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        self.detail = [("exec", f"#{info.id}  {info.state}"), *exec_detail_lines(info)]
        for label, value in self.detail:
            table.add_row(label, Text(value))
        self.query_one("#exec-detail", Static).update(table)

    # -- keys -------------------------------------------------------------------------------------------------

    def action_back(self) -> None:
        """Esc: from the output back to the execs; from the execs back to the boxes."""
        if isinstance(self.focused, Log):
            self.query_one("#exec-table", DataTable).focus()
        else:
            self.dismiss(None)

    def action_forget_rule(self) -> None:
        """``d``: forget the remembered rule under the cursor of the rules table (asks first)."""
        if not self.rules:
            self.notify("this box has no remembered rule: \"approve and remember\" (r) on the prompt or in the inbox "
                        "makes one", severity="warning", markup=False)
            return
        row = self.query_one("#remembered-table", DataTable).cursor_row
        rule = self.rules[min(max(row, 0), len(self.rules) - 1)]
        question = (f"Forget remembered rule {safe_text(rule.id)} ({safe_text(rule.rule_id)} for "
                    f"{safe_text(rule.program)})? Later asks of it in {safe_text(self.box.name)} go to a person again.")
        self.app.push_screen(ConfirmModal(question, "Forget"), lambda yes: self._forget(rule.id) if yes else None)

    @work(group="box-page-forget", exit_on_error=False, description="forget a remembered rule")
    async def _forget(self, rule_id: str) -> None:
        try:
            removed = await self.client.forget_rule(self.box.id, rule_id)
            box = await self.client.box(self.box.id)
        except DaemonError as exc:
            self.notify(f"could not forget {safe_text(rule_id)}: {safe_text(exc.message)}", severity="error",
                        timeout=10, markup=False)
            return
        self.notify(f"forgot {safe_text(removed.id)}: {safe_text(removed.rule_id)} for {safe_text(removed.program)} "
                    "asks a person again", markup=False)
        self.show_box(box)

    def action_review(self) -> None:
        """``p``: the review of the box's patch (a stopped box's; the App says why not for any other)."""
        self.app.open_review(self.box.id)  # type: ignore[attr-defined]

    def action_refresh(self) -> None:
        self.load_execs()
        if self.selected_exec is not None:
            self.load_output(self.selected_exec)

    def action_copy(self) -> None:
        """``y``: the selected exec's details and output, escaped as shown (``clipboard.copy_escaped``)."""
        if self.output is None:
            self.notify("no exec selected (or its output is still being read)", severity="warning")
            return
        copy_escaped(self, exec_copy_text(self.output), f"exec #{self.output.exec.id}")

