"""SVG snapshots of the patch review in every shipped theme (the ``test_console_snapshots.py`` pattern): fixed
clock, box and patch; no blink, no ticks; a fixed terminal size. The review shows every kind of row: allowed, an
``ask``, a sensitive file, a denied one excluded, and the selected file's diff (with a hostile escape byte shown
escaped), unified and side by side. Each also asserts what the screen holds. Update with ``pytest
--snapshot-update`` only after reading the snapshot report."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.console_fakes import wait_until
from tests.review_fixtures import APP_PY, CI, NOTES, OLD, review_app
from tkbox_tui.console.screens import PatchReviewScreen
from tkbox_tui.console.widgets import BoxTable

THEMES = ["tkbox-dark", "tkbox-light", "tkbox-high-contrast"]
SIZE = (110, 34)
FILES = [APP_PY, replace(NOTES, verdict="ask", rule_ids=("TK-W010",), reason="a new file outside src/"), CI,
         replace(OLD, verdict="deny", rule_ids=("TK-W020",), reason="deletes a tracked file")]


async def _review(pilot, *keys: str) -> PatchReviewScreen:
    app = pilot.app
    await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
    table = app.main_screen.query_one(BoxTable)
    await wait_until(pilot, lambda: table.box_ids and app.focused is table and table.cursor_row == 0)
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, PatchReviewScreen) and app.screen.loads > 0)
    await pilot.press("down", "down", "down", "space", "up", "up", "up", *keys)
    await pilot.pause()
    return app.screen


@pytest.mark.parametrize("theme", THEMES)
class TestReviewSnapshots:
    def test_review_unified(self, snap_compare, tmp_path, theme):
        fake, app = review_app(tmp_path, FILES, theme=theme)

        async def run_before(pilot) -> None:
            screen = await _review(pilot)
            assert app.theme == theme and screen.excluded == {"old.txt"} and screen.selected_path == "src/app.py"
            assert not screen.side_by_side

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_review_side_by_side(self, snap_compare, tmp_path, theme):
        fake, app = review_app(tmp_path, FILES, theme=theme)

        async def run_before(pilot) -> None:
            screen = await _review(pilot, "v")
            assert screen.side_by_side and screen.selected_path == "src/app.py"

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
