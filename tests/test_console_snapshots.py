"""SVG snapshots of the main screen, help, the new-box form and the confirm dialog in every shipped theme.

Deterministic: fixed clock, box ids and events; no cursor blink; no clock ticks; a fixed terminal size.  Update
with ``pytest --snapshot-update`` only after reading the snapshot report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_event,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import ConfirmModal, HelpScreen, NewBoxScreen

THEMES = ["tkbox-dark", "tkbox-light", "tkbox-high-contrast"]
SIZE = (110, 34)


def snapshot_app(tmp_path, theme: str):
    fake = FakeDaemonClient(two_boxes())
    fake.history = [make_event(1, "b1", "box.created", name="web-api"), make_event(2, "b1", "box.started"),
                    make_event(3, "b1", "exec.started", command="make test"),
                    make_event(4, "b1", "exec.finished", command="make test", exit_code=0),
                    make_event(5, "b2", "box.stopped"),
                    make_event(6, "b1", "exec.denied", command="curl https://example.net", rule_ids=["net.deny"])]
    return make_app(fake, settings=quiet_settings(tmp_path / "config", theme=theme), clock=fixed_clock)


async def _settled(pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.state.connected and app.state.last_seq == 6)
    await wait_until(pilot, lambda: len(app.main_screen.query_one("#event-log").lines) == 6)
    await pilot.pause()


@pytest.mark.parametrize("theme", THEMES)
class TestConsoleSnapshots:
    def test_main_screen(self, snap_compare, tmp_path, theme):
        app = snapshot_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _settled(pilot)
            assert app.theme == theme and app.main_screen.query_one("BoxTable").box_ids == ["b1", "b2"]

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_help(self, snap_compare, tmp_path, theme):
        app = snapshot_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _settled(pilot)
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_new_box_form(self, snap_compare, tmp_path, theme):
        app = snapshot_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _settled(pilot)
            await pilot.press("n")
            assert isinstance(app.screen, NewBoxScreen)
            app.screen.query_one("#field-workspace").value = "/definitely/not/here"
            app.screen.query_one("#field-name").value = "Bad Name"
            await pilot.pause()

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_confirm_dialog(self, snap_compare, tmp_path, theme):
        app = snapshot_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _settled(pilot)
            await pilot.press("x")
            assert isinstance(app.screen, ConfirmModal)
            assert app.screen.focused.id == "confirm-no"

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize(("doc", "snapshot"), [("console-main.svg", "test_main_screen"),
                                               ("console-help.svg", "test_help"),
                                               ("console-confirm.svg", "test_confirm_dialog")])
def test_the_screenshots_in_the_docs_are_the_current_dark_snapshots(doc: str, snapshot: str) -> None:
    root = Path(__file__).resolve().parents[1]
    current = root / "tests" / "__snapshots__" / "test_console_snapshots" / f"TestConsoleSnapshots.{snapshot}[tkbox-dark].svg"
    assert (root / "docs" / doc).read_bytes() == current.read_bytes(), (
        f"docs/{doc} is out of date: copy {current.relative_to(root)} over it")
