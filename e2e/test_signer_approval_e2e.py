"""Approvals against the real signer process: the daemon's recorder answers an ask, the exported run shows the
answer before the action, and the bundle verifies offline with ``tkbox verify``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from e2e.signer_process import tkbox, tkbox_json
from tests.bundle_records import record_lines
from tkbox_daemon import strictjson
from tkbox_daemon.boxes.recorder import RunRecorder
from tkbox_daemon.signer.paths import SignerPaths
from tkbox_daemon.signer_link import AsyncSignerClient, SignerCallError

pytestmark = pytest.mark.e2e


@pytest.fixture
def signer():  # type: ignore[no-untyped-def]
    """A dev signer started with ``tkbox signer up`` in this test's own directories; stopped afterwards."""
    assert tkbox_json("signer", "up")["started"] is True
    yield SignerPaths.from_env()
    tkbox("signer", "down", check=False)


class Recorded:
    """A RunRecorder on the real signer, with what it asked of the box."""

    def __init__(self, socket: Path) -> None:
        self.client = AsyncSignerClient(socket)
        self.stops: list[str] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.recorder = RunRecorder(self.client, "box-e2e", stop_box=self._stop,
                                    on_event=lambda kind, data: self.events.append((kind, data)))

    async def _stop(self, reason: str) -> None:
        self.stops.append(reason)

    async def ran(self, decision_id: str) -> None:
        await self.recorder.complete(decision_id, status="ok", exit_code=0, reported_by="guest",
                                     host={"outcome": "reported"})


def approval_id() -> str:
    return "apr-" + os.urandom(8).hex()


def export_and_verify(run_id: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Export the run with ``tkbox signer export``, check that ``tkbox verify`` passes, and return its records."""
    bundle, trust = tmp_path / "run.tkb", tmp_path / "run.trust.json"
    tkbox("signer", "export", "--run", run_id, "-o", str(bundle))
    tkbox("signer", "trust", "-o", str(trust))
    verified = tkbox("verify", str(bundle), "--trust", str(trust))
    assert "Integrity: VERIFIED." in verified.stdout
    assert "[PASS] approvals" in verified.stdout
    lines = record_lines(bundle)
    return [strictjson.loads_object(line, max_bytes=1 << 20)["event"] for line in lines]


async def test_an_approved_ask_is_recorded_before_it_runs_and_the_bundle_verifies(signer, tmp_path):  # type: ignore[no-untyped-def]
    box = Recorded(signer.socket)
    run_id = await box.recorder.register({"name": "approvals-e2e"}, "run one sudo, approved")
    asked = await box.recorder.decide("Bash", {"command": "sudo ls /root"})
    assert (asked.decision, asked.verdict) == ("ask", "ask") and asked.decision_id
    answered = approval_id()
    await box.recorder.record_approval(approval_id=answered, decision_id=asked.decision_id, answer="approve",
                                       by="uid 0 (root)", reason="the build needs it")
    await box.ran(asked.decision_id)
    with pytest.raises(SignerCallError) as again:  # one answer per decision, and none once it ran
        await box.recorder.record_approval(approval_id=approval_id(), decision_id=asked.decision_id, answer="reject",
                                           by="uid 0 (root)", reason="")
    assert again.value.code == "decision_consumed"
    await box.recorder.close("done")
    await box.client.close()
    assert box.stops == [] and box.events == []

    events = export_and_verify(run_id, tmp_path)
    kinds = [event["type"] for event in events]
    approval = next(i for i, event in enumerate(events) if event["data"].get("source") == "tkbox.approval")
    result = kinds.index("tool.result")
    assert kinds.index("policy.decision") < approval < result
    assert {name: events[approval]["data"][name] for name in ("approval_id", "decision_id", "answer", "trust",
                                                               "must_keep")} == {
        "approval_id": answered, "decision_id": asked.decision_id, "answer": "approve", "trust": "trusted",
        "must_keep": True}
    assert events[result]["data"]["decision_id"] == asked.decision_id
    assert "capture.gap" not in kinds  # an approved ask that ran is not executed against policy


async def test_a_rejected_ask_that_runs_anyway_is_flagged_and_an_unreachable_signer_refuses(signer, tmp_path):  # type: ignore[no-untyped-def]
    box = Recorded(signer.socket)
    run_id = await box.recorder.register({"name": "approvals-e2e"}, "run one sudo, rejected")
    asked = await box.recorder.decide("Bash", {"command": "sudo ls /root"})
    await box.recorder.record_approval(approval_id=approval_id(), decision_id=asked.decision_id, answer="reject",
                                       by="uid 0 (root)", reason="not today")
    await box.ran(asked.decision_id)  # it must never run; if it did, the record says so
    await box.recorder.close("done")
    events = export_and_verify(run_id, tmp_path)
    kinds = [event["type"] for event in events]
    assert kinds[kinds.index("tool.result") + 1] == "capture.gap"
    assert events[kinds.index("capture.gap")]["data"] == {"kind": "executed_against_policy",
                                                          "decision_id": asked.decision_id}

    other = Recorded(signer.socket)
    await other.recorder.register({"name": "approvals-e2e"}, "the signer goes away")
    pending = await other.recorder.decide("Bash", {"command": "sudo ls /root"})
    tkbox("signer", "down")
    with pytest.raises(SignerCallError) as unreachable:
        await other.recorder.record_approval(approval_id=approval_id(), decision_id=pending.decision_id or "",
                                             answer="approve", by="uid 0 (root)", reason="")
    assert unreachable.value.code == "unreachable"
    await other.client.close()
