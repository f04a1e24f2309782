"""SVG snapshots of the box page and the event page in every shipped theme (the ``test_console_snapshots.py``
pattern): fixed clock, ids, execs and events; no blink, no ticks; a fixed terminal size.  Each also asserts what the
page holds.  Update with ``pytest --snapshot-update`` only after reading the snapshot report."""

from __future__ import annotations

import pytest

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_event,
    make_exec,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_daemon.wire import OutputTail
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import BoxScreen, EventScreen
from tkbox_tui.console.widgets import EventLog

THEMES = ["tkbox-dark", "tkbox-light", "tkbox-high-contrast"]
SIZE = (110, 34)


def page_app(tmp_path, theme: str):
    fake = FakeDaemonClient(two_boxes())
    fake.exec_outputs["b1"] = [
        make_exec(1, "ls /workspace", stdout=b"README.md\nsrc\ntests\n"),
        make_exec(2, "curl https://example.net", state="denied", verdict="deny", rule_ids=("TK-D001",),
                  reason="no network door yet", hint="ask for an egress rule", duration_ms=0, exit_code=None),
        make_exec(3, "seq 1 100000", stdout=b"99998\n99999\n100000\n", stdout_tail=OutputTail(262_144, 588_895)),
        make_exec(4, "make test", stdout=b"ok \x1b[32mgreen\x1b[0m\n", stderr=b"warning: \xff\n", exit_code=2),
    ]
    fake.history = [make_event(1, "b1", "box.created", name="web-api", workspace="/home/op/web-api", image="host"),
                    make_event(2, "b1", "box.started"),
                    make_event(3, "b1", "exec.finished", command="make test " + "-k unit " * 20, exit_code=2,
                               signal=None, timed_out=False, reported_by="guest",
                               host={"outcome": "reported", "time_limit_ms": 1_800_000})]
    return make_app(fake, settings=quiet_settings(tmp_path / "config", theme=theme), clock=fixed_clock)


async def _settled(pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.state.connected and app.state.last_seq == 3)
    await wait_until(pilot, lambda: len(app.main_screen.query_one(EventLog).lines) == 3)
    await pilot.pause()


@pytest.mark.parametrize("theme", THEMES)
class TestPageSnapshots:
    def test_box_page(self, snap_compare, tmp_path, theme):
        app = page_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _settled(pilot)
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen) and app.screen.output is not None)
            await pilot.pause()
            assert app.theme == theme and app.screen.selected_exec == 4 and len(app.screen.execs) == 4

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_event_page(self, snap_compare, tmp_path, theme):
        app = page_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _settled(pilot)
            app.main_screen.query_one(EventLog).focus()
            await pilot.press("enter")
            assert isinstance(app.screen, EventScreen) and app.screen.event.seq == 3
            await pilot.pause()

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
