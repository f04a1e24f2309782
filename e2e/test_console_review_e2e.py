"""The console's patch review and export + verify end to end: the real signer, the real ``tkbox daemon``, a real box
(bubblewrap), real git, and the console driven with Pilot — a review that leaves one file out and applies the rest
(only the chosen files reach the checkout; the record shows the one left out as declined), then one key exports the
box's run and the console's verifier says VERIFIED."""

from __future__ import annotations

import pytest
from textual import events

from e2e.console_pilot import until
from e2e.daemon_process import make_checkout
from e2e.signer_process import tkbox
from tests.bundle_records import record_events
from tests.console_fakes import quiet_settings
from tkbox_tui.client import DaemonClient
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import (
    ApplyConfirmModal,
    ExportFormModal,
    PatchReviewScreen,
    VerifyReportScreen,
)
from tkbox_tui.console.widgets import BoxTable
from tkbox_tui.console.widgets.review_file_table import ReviewFileTable

pytestmark = pytest.mark.e2e
JOB = "echo one > one.txt; echo two > two.txt; echo more >> tracked.txt"


def _keys(recorded) -> int:
    return len({id(message) for message in recorded if isinstance(message, events.Key)})


async def test_review_leaves_one_file_out_applies_the_rest_then_export_and_verify(daemon, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkout = make_checkout(tmp_path)
    tkbox("run", "--name", "work", "--workspace", str(checkout))
    tkbox("exec", "work", "--", "sh", "-c", JOB)
    tkbox("stop", "work")
    client = DaemonClient(daemon.paths.api_socket)
    app = make_app(client, settings=quiet_settings(tmp_path / "config", prompt_arm_delay=0))
    app.bell = lambda: None  # type: ignore[method-assign]
    recorded: list = []
    async with client, app.run_test(size=(140, 44), message_hook=recorded.append) as pilot:
        table = app.main_screen.query_one(BoxTable)
        await until(pilot, lambda: app.state.connected and table.box_ids and app.focused is table
                    and app.state.selected_box is not None and app.state.boxes[table.box_ids[0]].state == "stopped")
        before = _keys(recorded)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, PatchReviewScreen) and app.screen.loads > 0)
        review = app.screen
        files = review.query_one(ReviewFileTable)
        assert sorted(row.value for row in files.rows) == ["one.txt", "tracked.txt", "two.txt"]
        while files.cursor_path() != "two.txt":  # choosing what to leave out is not counted as applying
            await pilot.press("down")
        await pilot.press("space")
        choosing = _keys(recorded) - before - 1
        await pilot.press("a")
        assert isinstance(app.screen, ApplyConfirmModal)
        await pilot.press("y")
        await until(pilot, lambda: review.result is not None)
        assert _keys(recorded) - before - choosing == 3  # Enter, a, y
        assert review.result.status == "applied", review.result.reason
        assert {f.path: f.outcome for f in review.result.files} == {
            "one.txt": "written", "tracked.txt": "written", "two.txt": "declined"}
        assert (checkout / "one.txt").read_text() == "one\n" and not (checkout / "two.txt").exists()
        assert (checkout / "tracked.txt").read_text() == "tracked\nmore\n"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, PatchReviewScreen))

        before = _keys(recorded)
        await pilot.press("E")
        await until(pilot, lambda: isinstance(app.screen, ExportFormModal))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, VerifyReportScreen)
                    and app.screen.stage in ("done", "failed"), rounds=200000)
        assert _keys(recorded) - before == 2
        report = app.screen
        assert report.stage == "done" and report.result is not None and report.result.verified, report.problem
    bundles = list(tmp_path.glob("work-*.tkb"))
    assert len(bundles) == 1
    records = record_events(bundles[0])
    writes = [r["data"] for r in records if r["type"] == "policy.decision" and r["data"]["tool"] == "Write"]
    assert len(writes) == 2  # the declined file is not decided: it is in the apply's record as declined
    assert any(r["type"] == "input.observed" and r["data"].get("source") == "tkbox.apply" for r in records)
