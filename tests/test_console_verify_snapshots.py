"""SVG snapshots of the verify report in every shipped theme (the ``test_console_snapshots.py`` pattern), for the
corpus's good bundle and a tampered one, verified by the real verifier: fixed bundles, paths shown relative to the
console's working directory (the corpus), no blink, a fixed terminal size. Each also asserts what the report says.
Update with ``pytest --snapshot-update`` only after reading the snapshot report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.console_fakes import FakeDaemonClient, fixed_clock, quiet_settings, wait_until
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import VerifyReportScreen

THEMES = ["tkbox-dark", "tkbox-light", "tkbox-high-contrast"]
SIZE = (130, 34)
CORPUS = Path(__file__).parent / "corpus"


def _app(tmp_path, theme: str):
    return make_app(FakeDaemonClient([]), settings=quiet_settings(tmp_path / "config", theme=theme),
                    clock=fixed_clock)


async def _verified(pilot, bundle: str):
    app = pilot.app
    await wait_until(pilot, lambda: app.state.connected)
    await pilot.press("colon", *f"verify {bundle} --trust good.trust.json", "enter")
    await wait_until(pilot, lambda: isinstance(app.screen, VerifyReportScreen) and app.screen.stage == "done")
    await pilot.pause()
    return app.screen


@pytest.mark.parametrize("theme", THEMES)
class TestVerifySnapshots:
    def test_verify_report_good(self, snap_compare, tmp_path, theme, monkeypatch):
        monkeypatch.chdir(CORPUS)
        app = _app(tmp_path, theme)

        async def run_before(pilot) -> None:
            screen = await _verified(pilot, "good.tkb")
            assert screen.result.verified and screen.result.counts.execs == 8

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

    def test_verify_report_tampered(self, snap_compare, tmp_path, theme, monkeypatch):
        monkeypatch.chdir(CORPUS)
        app = _app(tmp_path, theme)

        async def run_before(pilot) -> None:
            screen = await _verified(pilot, "edited_record_field.tkb")
            assert screen.result.integrity == "FAILED" and screen.result.counts is None

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
