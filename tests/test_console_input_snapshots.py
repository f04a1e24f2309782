"""SVG snapshots of the focused one-row inputs in every shipped theme (the ``test_console_snapshots.py`` pattern):
the New box form as it opens and takes typed keys, the ``:`` line and the ``/`` line, each with text typed in.

Textual's ``Input:focus`` draws a tall border; in a one-row input it left no row for the text, so these showed a
bar instead of what was typed, and the form opened with no field focused.  Each test also asserts what the
snapshot must show: the focused input, one row high, and the typed text in it.  Update with
``pytest --snapshot-update`` only after reading the snapshot report.
"""

from __future__ import annotations

import pytest
from textual.widgets import Input

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_event,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import NewBoxScreen
from tkbox_tui.console.widgets import CommandBar, EventLog

THEMES = ["tkbox-dark", "tkbox-light", "tkbox-high-contrast"]
SIZE = (110, 34)


def input_app(tmp_path, theme: str):
    fake = FakeDaemonClient(two_boxes())
    fake.history = [make_event(1, "b1", "box.created", name="web-api"), make_event(2, "b1", "box.started"),
                    make_event(3, "b1", "exec.finished", command="make test", exit_code=0)]
    return make_app(fake, settings=quiet_settings(tmp_path / "config", theme=theme), clock=fixed_clock)


async def _settled(pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.state.connected and app.state.last_seq == 3)
    await wait_until(pilot, lambda: len(app.main_screen.query_one(EventLog).lines) == 3)
    await pilot.pause()


def assert_shows_its_text(field: Input, text: str) -> None:
    """The focused input is one row, with no border eating it, and that row shows ``text``."""
    assert field.has_focus and field.value == text
    assert field.region.height == 1 and field.content_region.height == 1
    assert text in field.render_line(0).text


@pytest.mark.parametrize("theme", THEMES)
class TestFocusedInputSnapshots:
    def test_new_box_form_focused(self, snap_compare, tmp_path, theme):
        app = input_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _settled(pilot)
            await pilot.press("n")
            assert isinstance(app.screen, NewBoxScreen)
            await pilot.press(*"my-box")  # straight away: the first field has the focus
            await pilot.pause()
            assert_shows_its_text(app.screen.query_one("#field-name", Input), "my-box")

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_command_line_focused(self, snap_compare, tmp_path, theme):
        app = input_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _settled(pilot)
            await pilot.press("colon", *"box web-api")
            await pilot.pause()
            assert_shows_its_text(app.main_screen.query_one(CommandBar), "box web-api")

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_filter_line_focused(self, snap_compare, tmp_path, theme):
        app = input_app(tmp_path, theme)

        async def run_before(pilot) -> None:
            await _settled(pilot)
            await pilot.press("slash", *"kind:exec make")
            await pilot.pause()
            assert_shows_its_text(app.main_screen.query_one(CommandBar), "kind:exec make")

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
