"""Export and verify from the console, driven with Pilot against ``FakeDaemonClient`` and the real verifier (a
process): ``E`` then Enter exports a box's run into the form's files and verifies them; ``:verify PATH`` opens any
bundle; the report shows each check, Integrity, Assurance and the counts, for a good and a tampered bundle."""

from __future__ import annotations

import json
from pathlib import Path

from textual import events
from textual.widgets import Checkbox, Input

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_box,
    quiet_settings,
    record_notifications,
    wait_until,
)
from tkbox_tui.client import DaemonError
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import ExportFormModal, MainScreen, VerifyReportScreen

CORPUS = Path(__file__).parent / "corpus"
GOOD, TAMPERED, TRUST = CORPUS / "good.tkb", CORPUS / "edited_record_field.tkb", CORPUS / "good.trust.json"
SIZE = (120, 36)


def _app(tmp_path, state: str = "stopped"):
    box = make_box("b1", "web-api", state, run_id="run-a")
    fake = FakeDaemonClient([box])
    fake.bundles["b1"] = GOOD.read_bytes()
    fake.trust_document = json.loads(TRUST.read_text())
    app = make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)
    app.notes = record_notifications(app)  # type: ignore[attr-defined]
    return fake, app


def _keys(recorded) -> int:
    return len({id(message) for message in recorded if isinstance(message, events.Key)})


def _plain(screen: VerifyReportScreen) -> str:
    from tkbox_tui.console.verify_text import check_lines, verdict_lines

    assert screen.result is not None
    return "\n".join([*(f"[{s}] {n} {d}" for s, n, d in check_lines(screen.result)),
                      *(f"{label}: {value}" for label, value in verdict_lines(screen.result))])


async def _done(app, pilot) -> VerifyReportScreen:
    await wait_until(pilot, lambda: isinstance(app.screen, VerifyReportScreen)
                     and app.screen.stage in ("done", "failed"))
    return app.screen


async def test_export_and_verify_in_two_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake, app = _app(tmp_path)
    recorded: list = []
    async with app.run_test(size=SIZE, message_hook=recorded.append) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
        before = _keys(recorded)
        await pilot.press("E")
        assert isinstance(app.screen, ExportFormModal)
        assert app.screen.query_one("#export-path", Input).value == "./web-api-run-a.tkb"
        await pilot.press("enter")
        screen = await _done(app, pilot)
        assert _keys(recorded) - before == 2
        assert screen.stage == "done", screen.problem
        assert (tmp_path / "web-api-run-a.tkb").read_bytes() == GOOD.read_bytes()
        assert json.loads((tmp_path / "web-api-run-a.trust.json").read_text()) == fake.trust_document
        assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # no temporary left
        assert screen.result is not None and screen.result.verified
        shown = _plain(screen)
        assert shown.count("[PASS]") == 11 and "integrity: VERIFIED" in shown
        assert "assurance: dev; records ed25519" in shown
        assert "decisions: 8 decisions (8 allow)" in shown and "execs: 8 (Bash decisions)" in shown
        assert "approvals: 0 approvals" in shown and "writes: 0 (Write decisions)" in shown
        assert ("export_bundle", "b1") in fake.calls


async def test_colon_verify_shows_a_tampered_bundle_failed_without_counts(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        await pilot.press("colon", *f"verify {TAMPERED} --trust {TRUST}", "enter")
        screen = await _done(app, pilot)
        assert screen.result is not None and not screen.result.verified
        shown = _plain(screen)
        assert "integrity: FAILED" in shown and "[FAIL] signatures" in shown
        assert "first failure: signatures — record seq" in shown
        assert "assurance: none (integrity not verified)" in shown and "counts: none (integrity not verified)" in shown
        assert screen.query_one("#verify-integrity").has_class("-failed")
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_colon_verify_finds_the_trust_file_beside_the_bundle(tmp_path):
    (tmp_path / "run.tkb").write_bytes(GOOD.read_bytes())
    (tmp_path / "run.trust.json").write_bytes(TRUST.read_bytes())
    fake, app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        await pilot.press("colon", *f"verify '{tmp_path / 'run.tkb'}'", "enter")
        screen = await _done(app, pilot)
        assert screen.trust == tmp_path / "run.trust.json" and screen.result is not None and screen.result.verified
        (tmp_path / "run.trust.json").write_text("{}")
        await pilot.press("r")
        await wait_until(pilot, lambda: screen.stage == "done" and screen.result is not None
                         and screen.result.integrity == "UNUSABLE TRUST FILE")


async def test_the_form_refuses_an_existing_file_unless_replace_is_ticked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "web-api-run-a.tkb").write_text("mine")
    fake, app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
        await pilot.press("E", "enter")
        assert isinstance(app.screen, ExportFormModal)
        assert "exists already" in str(app.screen.query_one("#export-problem").render())
        app.screen.query_one("#export-replace", Checkbox).value = True
        await pilot.press("enter")
        screen = await _done(app, pilot)
        assert screen.stage == "done" and (tmp_path / "web-api-run-a.tkb").read_bytes() == GOOD.read_bytes()


async def test_a_broken_export_leaves_no_file_and_says_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake, app = _app(tmp_path)
    fake.export_error = DaemonError("export_broken", "the daemon broke the bundle off before its end",
                                    hint="nothing was kept; export again")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
        await pilot.press("E", "enter")
        screen = await _done(app, pilot)
        assert screen.stage == "failed" and "broke the bundle off" in screen.problem
        assert list(tmp_path.glob("*.tkb")) == [] and list(tmp_path.glob(".*")) == [] \
            and list(tmp_path.glob("*.json")) == []


async def test_a_running_box_is_told_to_stop_first(tmp_path):
    fake, app = _app(tmp_path, state="running")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
        await pilot.press("E")
        assert isinstance(app.screen, MainScreen)
        assert any("exported once the box is stopped" in note.message for note in app.notes)
        await pilot.press("colon", *"verify", "enter")
        assert any(":verify needs an argument" in note.message for note in app.notes)
