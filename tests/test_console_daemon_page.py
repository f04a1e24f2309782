"""The console's daemon page (``:daemon``) with Pilot against ``FakeDaemonClient``: the daemon's health and its host
report, each check with its fix only when it is not ok, every daemon text escaped; ``r`` asks the daemon to check
again; a refusal is shown on the page; Esc goes back."""

from __future__ import annotations

from rich.text import Text

from tests.console_fakes import FakeDaemonClient, quiet_settings, two_boxes, wait_until
from tkbox_daemon.wire_host import HostCheck, HostReport
from tkbox_tui.client import DaemonError
from tkbox_tui.console.app import make_app
from tkbox_tui.console.daemon_page_text import check_rows, copy_text, health_rows
from tkbox_tui.console.screens import DaemonScreen, MainScreen
from tkbox_tui.console.widgets import CommandBar


async def _open(app, pilot) -> DaemonScreen:
    await wait_until(pilot, lambda: app.state.connected)
    app.main_screen.query_one(CommandBar).open("command")
    await pilot.press(*"daemon", "enter")
    await wait_until(pilot, lambda: isinstance(app.screen, DaemonScreen) and app.screen.loads > 0)
    return app.screen


async def test_daemon_opens_the_page_with_health_and_every_check_then_r_checks_again(tmp_path):
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(tmp_path / "config"))
    async with app.run_test(size=(120, 36)) as pilot:
        page = await _open(app, pilot)
        assert fake.calls.count(("host_report", False)) == 1 and page.report == fake.host
        shown = copy_text(page.health, page.report)
        assert "MISSING" not in shown and "degraded  disk quota  box_disk is not enforced  (fix: none yet)" in shown
        assert "ok  backend bwrap  bubblewrap 0.8.0 at /usr/bin/bwrap" in shown and "fix: \n" not in shown
        await pilot.press("r")
        await wait_until(pilot, lambda: page.loads == 2)
        assert fake.calls.count(("host_report", True)) == 1
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen))


async def test_a_refusal_is_said_on_the_page(tmp_path):
    fake = FakeDaemonClient(two_boxes())
    fake.host = DaemonError("not_found", "no such route: this daemon has no /v1/host", 404)
    app = make_app(fake, settings=quiet_settings(tmp_path / "config"))
    async with app.run_test(size=(100, 30)) as pilot:
        page = await _open(app, pilot)
        assert page.report is None and page.error == "no such route: this daemon has no /v1/host"


def test_every_text_from_the_daemon_is_escaped():
    report = HostReport((HostCheck("cg\x1b[2J", "missing", "found \x07", "fix \x9b31m"),), "", "sum\x1b]0;x\x07",
                        "host\x1b")
    rows = check_rows(report)
    text = copy_text({"version": "\x1b[31m1"}, report)
    assert rows[0][0] == "MISSING"
    assert not any(ch in text for ch in "\x1b\x07\x9b") and not any(ch in cell for row in rows for cell in row
                                                                     for ch in "\x1b\x07\x9b")
    assert isinstance(Text(text), Text)


def test_the_boxes_started_ahead_are_shown_with_why_none_could_be():
    ready = dict(health_rows({"version": "1", "started_ahead": {"size": 2, "ready": 1, "taken": 3}}))
    assert ready["boxes started ahead"] == "1 of 2 ready"
    failing = dict(health_rows({"started_ahead": {"size": 1, "ready": 0, "failure": "no disk\x1b[2J"}}))
    assert failing["boxes started ahead"] == "0 of 1 ready; no disk\\x1b[2J"  # escaped, never raw
