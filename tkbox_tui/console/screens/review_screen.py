"""``PatchReviewScreen``: a stopped box's patch, file by file — what the patch does to each, whether it is sensitive,
the policy's preview verdict and whether the checkout still holds what the patch was made against; the selected
file's diff, unified or side by side; include or exclude files, then apply them after a confirm.

The files are the daemon's (a dry run of ``tkbox apply``: ``client.apply_preview``); the diff is the patch's text
cut per file (``patch_sections``), a view only. ``a`` asks (``ApplyConfirmModal``) and hands the apply to the App
(``ReviewActionsMixin.start_apply``), which runs it in a worker that outlives this screen and tells it what
happens: a file held for a person (its approval prompt opens from the event stream, over this screen), then the
report, whose outcome each row shows. Every piece of box text is escaped and drawn as ``Text``.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Label, Static

from tkbox_daemon.wire import BoxInfo
from tkbox_daemon.wire_apply import ApplyFile, ApplyReport

from ...client import DaemonError
from ...terminal_text import safe_text
from ..diff_render import DiffColours, DiffLine, diff_lines
from ..keymap import bindings_for
from ..patch_sections import PatchSections, split_patch
from ..review_text import (
    REVIEW_COLUMNS,
    apply_plan,
    file_cells,
    file_details,
    plan_text,
    report_summary,
    sensitive_text,
)
from ..widgets.console_footer import ConsoleFooter
from ..widgets.diff_view import DiffView
from ..widgets.review_file_table import ReviewFileTable
from .apply_confirm_modal import ApplyConfirmModal, ApplyConsent

NO_PATCH = "no_patch"
"""The daemon's error code for a box without a saved patch: its page opens instead."""
COLOURED_COLUMNS = {name: REVIEW_COLUMNS.index(name) for name in ("verdict", "sensitive", "result")}


class PatchReviewScreen(Screen[None]):
    """The review of ``box``'s saved patch; ``client`` is the console's daemon client."""

    BINDINGS = bindings_for("review")
    DEFAULT_CSS = """
    PatchReviewScreen #review-title { height: 1; padding: 0 1; background: $primary 20%; text-style: bold; }
    PatchReviewScreen #review-summary { height: auto; max-height: 3; padding: 0 1; }
    PatchReviewScreen #review-files { height: auto; max-height: 35%; border: round $panel; }
    PatchReviewScreen #review-files:focus { border: round $primary; }
    PatchReviewScreen #review-detail { height: auto; max-height: 6; padding: 0 1; overflow-y: auto; }
    PatchReviewScreen #review-diff { height: 1fr; min-height: 4; border: round $panel; background: $surface; }
    PatchReviewScreen #review-diff:focus { border: round $primary; }
    """

    def __init__(self, client: Any, box: BoxInfo) -> None:
        super().__init__()
        self.client = client
        self.box = box
        self.preview: ApplyReport | None = None
        """The dry run's report: the files, their preview verdicts (None until read)."""
        self.result: ApplyReport | None = None
        """The report of the last apply from this screen (None before one ends)."""
        self.excluded: set[str] = set()
        self.held: dict[str, str] = {}
        """Files of the running apply that wait for a person: path → approval id."""
        self.sections = PatchSections()
        self.side_by_side = False
        self.applying = False
        self.selected_path: str | None = None
        self.load_error = ""
        self.loads = 0
        """How many times the preview was read (tests wait on it)."""
        self.diff_shown: list[DiffLine] = []
        """The selected file's diff lines as drawn (escaped)."""

    def compose(self) -> ComposeResult:
        yield Label(self._title(), id="review-title")
        yield Static(Text("reading the patch and the policy's preview…"), id="review-summary")
        yield ReviewFileTable(id="review-files")
        yield Static(Text(""), id="review-detail")
        yield DiffView(id="review-diff")
        yield ConsoleFooter()

    def _title(self) -> Text:
        parts = [f"Patch of {safe_text(self.box.name)} ({safe_text(self.box.id)})", safe_text(self.box.state),
                 f"into {safe_text(self.box.workspace)}"]
        return Text("  ·  ".join(parts))

    def on_mount(self) -> None:
        table = self.query_one(ReviewFileTable)
        for column in REVIEW_COLUMNS:
            table.add_column(column, key=column)
        table.focus()
        self.load()

    # -- reading ----------------------------------------------------------------------------------------------

    @work(exclusive=True, group="review-load", exit_on_error=False, description="read the patch preview")
    async def load(self) -> None:
        try:
            preview = await self.client.apply_preview(self.box.id)
        except DaemonError as exc:
            if exc.code == NO_PATCH:
                self.app.review_without_patch(self, exc.message)  # type: ignore[attr-defined]
                return
            self.load_error = exc.message
            self._show_summary(f"could not read the preview: {safe_text(exc.message)}"
                               + (f" ({safe_text(exc.extra.get('hint'))})" if exc.extra.get("hint") else ""))
            self.loads += 1
            return
        try:
            patch = await self.client.diff_patch(self.box.id)
        except DaemonError as exc:
            patch = b""
            self.load_error = f"the patch's text could not be read: {exc.message}"
        self.show_preview(preview, patch)

    def show_preview(self, preview: ApplyReport, patch: bytes) -> None:
        """The dry run's files in the table (keyed by path), the first selected; the patch cut per file."""
        self.preview, self.result = preview, None
        self.excluded &= {file.path for file in preview.files}
        self.sections = split_patch(patch)
        self.loads += 1
        table = self.query_one(ReviewFileTable)
        table.clear()
        for file in preview.files:
            table.add_row(*self._cells(file), key=file.path)
        self._show_summary()
        if preview.files:
            paths = [file.path for file in preview.files]
            row = paths.index(self.selected_path) if self.selected_path in paths else 0
            table.move_cursor(row=row)
            self._select(paths[row])
        else:
            self.query_one("#review-detail", Static).update(Text(""))
            self.query_one(DiffView).clear()

    # -- what each row shows ----------------------------------------------------------------------------------

    def file(self, path: str) -> ApplyFile | None:
        """The file as last reported: the apply's outcome when there is one, else the preview."""
        for report in (self.result, self.preview):
            if report is not None:
                found = next((file for file in report.files if file.path == path), None)
                if found is not None:
                    return found
        return None

    def _cells(self, file: ApplyFile) -> list[Text]:
        tokens = self.app.tkbox_tokens  # type: ignore[attr-defined]
        cells = [Text(cell) for cell in file_cells(file, file.path not in self.excluded, self.held.get(file.path, ""))]
        verdict = file.verdict if file.verdict in ("allow", "ask", "deny") else "ask" if file.verdict else ""
        if verdict:
            cells[COLOURED_COLUMNS["verdict"]].stylize(tokens[f"verdict-{verdict}"])
        if file.sensitive:
            cells[COLOURED_COLUMNS["sensitive"]].stylize(tokens["verdict-ask"])
        outcome_colour = {"written": "verdict-allow", "refused": "verdict-deny", "rollback_failed": "verdict-deny",
                          "not_written": "verdict-ask", "rolled_back": "verdict-ask"}.get(file.outcome)
        if outcome_colour:
            cells[COLOURED_COLUMNS["result"]].stylize(tokens[outcome_colour])
        if file.path in self.excluded:
            cells[0].stylize("dim")
            cells[1].stylize("dim strike")
        return cells

    def refresh_row(self, path: str) -> None:
        file = self.file(path)
        if file is None:
            return
        table = self.query_one(ReviewFileTable)
        for column, cell in zip(REVIEW_COLUMNS, self._cells(file), strict=True):
            table.update_cell(path, column, cell, update_width=True)
        if path == self.selected_path:
            self._show_detail(file)

    def _show_summary(self, text: str | None = None) -> None:
        if text is None:
            text = self._summary_text()
        self.query_one("#review-summary", Static).update(Text(text))

    def _summary_text(self) -> str:
        preview = self.preview
        if preview is None:
            return "reading the patch and the policy's preview…"
        if self.applying:
            waiting = f"; {len(self.held)} waiting for a person (the approval prompt)" if self.held else ""
            return f"applying…{waiting}"
        if self.result is not None:
            return report_summary(self.result)
        files = preview.files
        included = [file for file in files if file.path not in self.excluded]
        verdicts: dict[str, int] = {}
        for file in included:
            verdicts[file.verdict or "-"] = verdicts.get(file.verdict or "-", 0) + 1
        said = ", ".join(f"{count} {safe_text(verdict)}" for verdict, count in verdicts.items())
        line = (f"{len(files)} files: {len(included)} in, {sum(1 for f in included if f.sensitive)} sensitive"
                + (f" · verdicts {said}" if said else ""))
        if preview.status != "dry_run" or preview.reason:
            line += "\n" + report_summary(preview)
        if self.load_error:
            line += "\n" + safe_text(self.load_error)
        return line + "\nspace in/out · a apply… · v unified/split · Enter diff · ? all keys"

    # -- the selected file and its diff -----------------------------------------------------------------------

    @on(DataTable.RowHighlighted, "#review-files")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is not None and event.row_key.value is not None:
            self._select(str(event.row_key.value))

    @on(DataTable.RowSelected, "#review-files")
    def _into_diff(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.query_one(DiffView).focus()

    def _select(self, path: str) -> None:
        self.selected_path = path
        file = self.file(path)
        if file is not None:
            self._show_detail(file)
            self.show_diff(file)

    def _show_detail(self, file: ApplyFile) -> None:
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for label, value in file_details(file, file.path not in self.excluded):
            table.add_row(label, Text(value))
        self.query_one("#review-detail", Static).update(table)

    def _colours(self) -> DiffColours:
        tokens = self.app.tkbox_tokens  # type: ignore[attr-defined]
        theme = self.app.current_theme
        return DiffColours(tokens["verdict-allow"], tokens["verdict-deny"], theme.accent or theme.primary)

    def show_diff(self, file: ApplyFile) -> None:
        """The file's sections of the patch, as the view is set (unified or side by side)."""
        sections = self.sections.for_path(file.path, file.old_path)
        lines = diff_lines(sections)
        if not sections:
            lines = [DiffLine("note", "no section of the patch's text names this file"
                              + (f" ({safe_text(self.load_error)})" if self.load_error else ""))]
        elif len(sections) > 1:
            lines.insert(0, DiffLine("note", f"the patch has {len(sections)} sections for this path; all are shown"))
        self.diff_shown = lines
        self.query_one(DiffView).show(lines, self._colours(), self.side_by_side)

    # -- keys -------------------------------------------------------------------------------------------------

    def action_toggle_file(self) -> None:
        """``space``: include or exclude the file under the cursor (an excluded file is recorded as declined)."""
        path = self.query_one(ReviewFileTable).cursor_path()
        if self.applying or path is None:
            self._busy_or_empty()
            return
        self.excluded ^= {path}
        self.refresh_row(path)
        self._show_summary()

    def action_apply(self) -> None:
        """``a``: the confirm, then the apply (in the App's worker)."""
        if self.applying or self.preview is None or not self.preview.files:
            self._busy_or_empty()
            return
        plan = apply_plan(self.preview.files, self.excluded)
        if not plan.written:
            self.notify("every file is excluded: nothing to apply (space includes one)", severity="warning")
            return
        box_id = self.box.id

        def consent_given(consent: ApplyConsent | None) -> None:
            if consent is not None:
                self.applying = True
                self.result = None
                self.held.clear()
                self._show_summary()
                self.app.start_apply(box_id, plan.only, consent.allow_sensitive)  # type: ignore[attr-defined]

        self.app.push_screen(ApplyConfirmModal(plan_text(plan, self.box.name, self.box.workspace),
                                               sensitive_text(plan) if plan.sensitive else None), consent_given)

    def _busy_or_empty(self) -> None:
        if self.applying:
            self.notify("an apply is running: its result shows here when it ends", severity="warning")
        elif self.preview is None:
            self.notify("the preview is still being read", severity="warning")
        else:
            self.notify("the patch has no file to apply", severity="warning")

    def action_toggle_view(self) -> None:
        self.side_by_side = not self.side_by_side
        if self.selected_path is not None and (file := self.file(self.selected_path)) is not None:
            self.show_diff(file)

    def action_diff_down(self) -> None:
        self.query_one(DiffView).half_page(1)

    def action_diff_up(self) -> None:
        self.query_one(DiffView).half_page(-1)

    def action_diff_top(self) -> None:
        self.query_one(DiffView).scroll_home(animate=False)

    def action_diff_bottom(self) -> None:
        self.query_one(DiffView).scroll_end(animate=False)

    def action_diff_left(self) -> None:
        self.query_one(DiffView).sideways(-1)

    def action_diff_right(self) -> None:
        self.query_one(DiffView).sideways(1)

    def action_cursor_down(self) -> None:
        if isinstance(self.focused, DiffView):
            self.focused.scroll_relative(y=1, animate=False)
        else:
            self.query_one(ReviewFileTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        if isinstance(self.focused, DiffView):
            self.focused.scroll_relative(y=-1, animate=False)
        else:
            self.query_one(ReviewFileTable).action_cursor_up()

    def action_refresh(self) -> None:
        if self.applying:
            self._busy_or_empty()
            return
        self.load()

    def action_box_page(self) -> None:
        self.app.open_box_page(self.box.id)  # type: ignore[attr-defined]

    def action_back(self) -> None:
        """Esc: from the diff back to the files; from the files back to where the review was opened."""
        if isinstance(self.focused, DiffView):
            self.query_one(ReviewFileTable).focus()
        else:
            self.dismiss(None)

    # -- what the App's apply worker says ---------------------------------------------------------------------

    def show_held(self, path: str, approval_id: str) -> None:
        self.held[path] = approval_id
        if self.file(path) is not None:
            self.refresh_row(path)
        self._show_summary()

    def show_result(self, report: ApplyReport) -> None:
        """The apply's report: each file's outcome in its row, the summary above."""
        warning = ""
        if self.preview is not None and report.patch_sha256 and self.preview.patch_sha256 and \
                report.patch_sha256 != self.preview.patch_sha256:
            warning = "\nthe daemon applied another patch than the one previewed here (r reads it again)"
        self.applying = False
        self.held.clear()
        self.result = report
        table = self.query_one(ReviewFileTable)
        for file in report.files:
            if file.path in table.rows:
                self.refresh_row(file.path)
            else:
                table.add_row(*self._cells(file), key=file.path)
        self._show_summary(report_summary(report) + warning)

    def show_failure(self, message: str, hint: str = "") -> None:
        self.applying = False
        self.held.clear()
        for path in [row.value for row in self.query_one(ReviewFileTable).rows if row.value]:
            self.refresh_row(path)
        self._show_summary(f"the apply did not run to its end: {safe_text(message)}"
                           + (f" ({safe_text(hint)})" if hint else "") + "\nnothing held was written; r reads the "
                           "preview again")
