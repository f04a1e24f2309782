"""``DaemonScreen``: the daemon's page (``:daemon``): its health and what its host gives a box (``tkbox doctor``'s
report as the daemon checked it), each check with its fix. ``r`` runs the host checks again, ``y`` copies the page
(escaped), Esc goes back. Both calls run in a worker; a refusal is shown on the page, never raised.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Label, Static

from tkbox_daemon.wire_host import HostReport

from ...terminal_text import safe_text
from ..daemon_page_text import check_rows, copy_text, health_rows
from ..keymap import bindings_for
from ..widgets.console_footer import ConsoleFooter
from .clipboard import copy_escaped

STATUS_STYLES = {"ok": "green", "degraded": "yellow", "MISSING": "bold red"}


class DaemonScreen(Screen[None]):
    BINDINGS = bindings_for("daemon_page")
    DEFAULT_CSS = """
    DaemonScreen #daemon-page-title { height: 1; padding: 0 1; background: $primary 20%; text-style: bold; }
    DaemonScreen VerticalScroll { border: round $primary; background: $surface; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__(id="daemon-page")
        self.health: dict[str, Any] = {}
        self.report: HostReport | None = None
        self.error = ""
        self.loads = 0
        """How many times both answers (or a refusal) have been shown: what tests wait on."""

    def compose(self) -> ComposeResult:
        yield Label("Daemon  ·  its host", id="daemon-page-title")
        with VerticalScroll(id="daemon-page-body"):
            yield Static(Text("asking the daemon…"), id="daemon-health")
            yield Static("", id="daemon-host")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()
        self.load(refresh=False)

    @work(group="daemon-page", exclusive=True)
    async def load(self, *, refresh: bool) -> None:
        client: Any = self.app.client  # type: ignore[attr-defined]
        try:
            self.health = await client.health()
            self.report = await client.host_report(refresh=refresh)
            self.error = ""
        except Exception as error:  # DaemonError and a lost connection alike: said on the page
            self.error = safe_text(getattr(error, "message", None) or error)
        self.show()

    def show(self) -> None:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for label, value in health_rows(self.health):
            grid.add_row(Text(label), Text(value))
        if self.error:
            grid.add_row(Text("error", style="bold red"), Text(self.error))
        self.query_one("#daemon-health", Static).update(grid)
        self.query_one("#daemon-host", Static).update(self._host_table())
        self.loads += 1

    def _host_table(self) -> Table | Text:
        report = self.report
        if report is None:
            return Text("")
        title = Text(f"\nHost: {safe_text(report.host)}\n{safe_text(report.summary)}")
        table = Table(title=title, title_justify="left", expand=True, show_edge=False)
        for column in ("status", "check", "found", "fix"):
            table.add_column(column, overflow="fold", no_wrap=column in ("status", "check"))
        for status, name, found, fix in check_rows(report):
            table.add_row(Text(status, style=STATUS_STYLES.get(status, "")), Text(name), Text(found), Text(fix))
        return table

    def action_back(self) -> None:
        self.dismiss(None)

    def action_refresh(self) -> None:
        """``r``: the daemon runs its host checks again."""
        self.load(refresh=True)

    def action_copy(self) -> None:
        copy_escaped(self, copy_text(self.health, self.report), "the daemon page")
