"""``RunRecorder.record_approval`` on an in-process signer: the answer is kept when the call returns (not queued),
and a refusal or a closed run raises ``SignerCallError`` without stopping the box (that is the caller's)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.signer_harness import running_signer
from tkbox_daemon.boxes.recorder import RunRecorder
from tkbox_daemon.signer_link import AsyncSignerClient, SignerCallError


class Box:
    def __init__(self, socket: str) -> None:
        self.client = AsyncSignerClient(socket)
        self.stops: list[str] = []
        self.recorder = RunRecorder(self.client, "box-unit", stop_box=self._stop, on_event=lambda *_: None)

    async def _stop(self, reason: str) -> None:
        self.stops.append(reason)


def answer(decision_id: str, answer: str = "approve", approval_id: str = "apr-00000000000000a1") -> dict[str, Any]:
    return {"approval_id": approval_id, "decision_id": decision_id, "answer": answer, "by": "uid 0 (root)",
            "reason": ""}


async def test_the_answer_is_in_the_run_when_record_approval_returns(tmp_path):
    async with running_signer(tmp_path) as signer:
        box = Box(str(signer.paths.socket))
        await box.recorder.register({"name": "unit"}, "task")
        asked = await box.recorder.decide("Bash", {"command": "sudo true"})
        size = signer.service.store.size
        await box.recorder.record_approval(**answer(asked.decision_id or ""))
        assert signer.service.store.size == size + 1  # recorded by the call itself, nothing left in a queue
        run = signer.service.book.runs[box.recorder.run_id or ""]
        assert run.pending[asked.decision_id or ""].answer == "approve"
        await box.recorder.close("done")
        await box.client.close()


async def test_a_refused_answer_raises_and_does_not_stop_the_box(tmp_path):
    async with running_signer(tmp_path) as signer:
        box = Box(str(signer.paths.socket))
        await box.recorder.register({"name": "unit"}, "task")
        allowed = await box.recorder.decide("Bash", {"command": "ls"})
        with pytest.raises(SignerCallError) as refused:
            await box.recorder.record_approval(**answer(allowed.decision_id or ""))
        assert refused.value.code == "decision_not_ask" and box.stops == []
        await box.recorder.close("done")
        with pytest.raises(SignerCallError) as closed:
            await box.recorder.record_approval(**answer(allowed.decision_id or ""))
        assert closed.value.code == "run_closed"
        await box.client.close()
