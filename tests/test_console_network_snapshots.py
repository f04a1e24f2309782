"""SVG snapshots of the network view and its allow confirm in every shipped theme (the ``test_console_snapshots.py``
pattern): fixed clock, ids and events; no blink, no ticks; a fixed terminal size.  Each also asserts what the view
holds.  Update with ``pytest --snapshot-update`` only after reading the snapshot report."""

from __future__ import annotations

import pytest

from tests.console_fakes import wait_until
from tests.test_console_network_view import network_app, open_view, shown_rows
from tkbox_tui.console.screens import AllowConfirmModal

THEMES = ["tkbox-dark", "tkbox-light", "tkbox-high-contrast"]
SIZE = (110, 32)


@pytest.mark.parametrize("theme", THEMES)
class TestNetworkSnapshots:
    def test_network_view(self, snap_compare, tmp_path, theme):
        _, app = network_app(tmp_path, theme=theme)

        async def run_before(pilot) -> None:
            screen = await open_view(app, pilot)
            await pilot.press("j")
            await wait_until(pilot, lambda: dict(screen.detail).get("target") == "http files.example.org port 80")
            await pilot.pause()
            assert app.theme == theme and [row[3:6] for row in shown_rows(screen)] == [
                ("3", "0", "0"), ("0", "1", "1"), ("0", "0", "1")]

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_allow_confirm(self, snap_compare, tmp_path, theme):
        _, app = network_app(tmp_path, theme=theme)

        async def run_before(pilot) -> None:
            await open_view(app, pilot)
            await pilot.press("j", "a")
            await wait_until(pilot, lambda: isinstance(app.screen, AllowConfirmModal))
            await pilot.pause()
            assert "held, then rejected" in app.screen.text

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
