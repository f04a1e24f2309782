"""``VerifyReportScreen``: a bundle verified as ``tkbox verify`` does it — each check, Integrity, the first failure,
Assurance and the counts (decisions by verdict, approvals, execs, writes).

Opened two ways: after ``E`` on a box (the run is exported first, with a progress bar, into the files the form
named: ``export_files``), or by ``:verify PATH [--trust PATH]`` for any bundle. The verifier runs as its own
process (``verify_run``) in a worker that dies with this screen; what it prints is read strictly and drawn
escaped, as ``Text``. ``r`` verifies again, ``y`` copies the report, Esc goes back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Label, ProgressBar, Static

from tkbox_daemon.wire import BoxInfo

from ...client import DaemonError
from ...terminal_text import safe_text
from ..keymap import bindings_for
from ..page_text import format_bytes
from ..verify_result import VerifyResult
from ..verify_run import VERIFY_TIMEOUT, VerifierFailed, run_verifier
from ..verify_text import check_lines, report_copy_text, shown_path, verdict_lines
from ..widgets.console_footer import ConsoleFooter
from .clipboard import copy_escaped

STATUS_TOKENS = {"PASS": "verdict-allow", "FAIL": "verdict-deny", "SKIP": "verdict-ask"}


class VerifyReportScreen(Screen[None]):
    """The report on ``bundle`` against ``trust``; with ``box`` and ``client``, the box's run is exported there
    first (``replace``: files that exist may be replaced)."""

    BINDINGS = bindings_for("verify")
    DEFAULT_CSS = """
    VerifyReportScreen #verify-title { height: 1; padding: 0 1; background: $primary 20%; text-style: bold; }
    VerifyReportScreen #verify-stage { height: auto; padding: 0 1; }
    VerifyReportScreen #export-progress { margin: 0 1; }
    VerifyReportScreen .-hidden { display: none; }
    VerifyReportScreen #verify-body { height: 1fr; border: round $panel; padding: 0 1; }
    VerifyReportScreen #verify-integrity { height: auto; text-style: bold; padding: 0 1; }
    VerifyReportScreen #verify-integrity.-verified { background: $success 30%; }
    VerifyReportScreen #verify-integrity.-failed { background: $error 30%; }
    """

    def __init__(self, bundle: Path, trust: Path, *, client: Any = None, box: BoxInfo | None = None,
                 replace: bool = False, timeout: float = VERIFY_TIMEOUT) -> None:
        super().__init__()
        self.bundle, self.trust = bundle, trust
        self.client, self.box, self.replace = client, box, replace
        self.timeout = timeout
        self.stage = "exporting" if box is not None else "verifying"
        """``exporting``, ``verifying``, then ``done`` (a report) or ``failed`` (none: ``problem`` says why)."""
        self.result: VerifyResult | None = None
        self.problem = ""

    def compose(self) -> ComposeResult:
        what = f"Export and verify: {safe_text(self.box.name)}" if self.box is not None else "Verify a bundle"
        yield Label(Text(what), id="verify-title")
        yield Static(Text(self._stage_text()), id="verify-stage")
        yield ProgressBar(id="export-progress", show_eta=False, classes="" if self.box else "-hidden")
        yield Static(Text(""), id="verify-integrity")
        with VerticalScroll(id="verify-body"):
            yield Static(Text(""), id="verify-report")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.run_flow()

    def _stage_text(self, extra: str = "") -> str:
        files = f"bundle {shown_path(self.bundle)}\ntrust  {shown_path(self.trust)}"
        words = {"exporting": "exporting the box's run…", "verifying": "verifying (tkbox verify, offline)…",
                 "done": "the report of tkbox verify BUNDLE --trust TRUST   (r: again, y: copy)",
                 "failed": "no report"}[self.stage]
        return f"{words}{extra}\n{files}"

    def _show_stage(self, extra: str = "") -> None:
        self.query_one("#verify-stage", Static).update(Text(self._stage_text(extra)))

    @work(exclusive=True, group="verify-run", exit_on_error=False, description="export and verify a bundle")
    async def run_flow(self) -> None:
        if self.stage == "exporting":
            if not await self._export():
                return
        self.stage = "verifying"
        self._show_stage()
        try:
            result = await run_verifier(self.bundle, self.trust, self.timeout)
        except VerifierFailed as exc:
            self._fail(str(exc))
            return
        self.show_result(result)

    async def _export(self) -> bool:
        from ..export_files import export_to_files

        assert self.box is not None
        bar = self.query_one("#export-progress", ProgressBar)

        def progress(received: int, total: int) -> None:
            bar.update(total=max(total, 1), progress=received)
            self._show_stage(f" {format_bytes(received)} of {format_bytes(total)}")

        try:
            exported = await export_to_files(self.client, self.box.id, self.bundle, trust=self.trust,
                                             replace=self.replace, progress=progress)
        except DaemonError as exc:
            hint = exc.extra.get("hint")
            self._fail(f"the export failed: {exc.message}" + (f" ({hint})" if hint else ""))
            return False
        except OSError as exc:
            self._fail(f"the files could not be written: {exc.strerror or exc}")
            return False
        bar.add_class("-hidden")
        self.notify(f"exported run {safe_text(exported.run_id)}: {exported.size:,} bytes, {exported.sha256}",
                    title="export", markup=False)
        return True

    def _fail(self, problem: str) -> None:
        self.stage, self.problem = "failed", problem
        self._show_stage()
        self.query_one("#export-progress", ProgressBar).add_class("-hidden")
        integrity = self.query_one("#verify-integrity", Static)
        integrity.set_classes("-failed")
        integrity.update(Text(safe_text(problem)))

    def show_result(self, result: VerifyResult) -> None:
        """Each check (coloured by status), then Integrity, the first failure, Assurance and the counts."""
        self.stage, self.result = "done", result
        self._show_stage()
        tokens = self.app.tkbox_tokens  # type: ignore[attr-defined]
        integrity = self.query_one("#verify-integrity", Static)
        integrity.set_classes("-verified" if result.verified else "-failed")
        integrity.update(Text(f"Integrity: {safe_text(result.integrity)}"))
        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True, style="bold")
        table.add_column(overflow="fold")
        for status, name, detail in check_lines(result):
            table.add_row(Text(f"[{status}]", style=tokens[STATUS_TOKENS[status]]), Text(name), Text(detail))
        table.add_row("", "", "")
        for label, value in verdict_lines(result):
            table.add_row("", Text(label), Text(value))
        self.query_one("#verify-report", Static).update(table)

    # -- keys -------------------------------------------------------------------------------------------------

    def action_back(self) -> None:
        self.dismiss(None)

    def action_again(self) -> None:
        """``r``: verify the files again (never export again)."""
        if self.stage in ("exporting", "verifying"):
            self.notify("still working: the report shows here when it is done", severity="warning")
            return
        if self.box is not None and self.stage == "failed" and not self.bundle.exists():
            self.notify("nothing was exported: E on the box exports again", severity="warning")
            return
        self.box = None if self.bundle.exists() else self.box
        self.stage = "verifying"
        self.run_flow()

    def action_copy(self) -> None:
        if self.result is None:
            self.notify("no report yet", severity="warning")
            return
        copy_escaped(self, report_copy_text(self.result, self.bundle, self.trust), "the verify report")
