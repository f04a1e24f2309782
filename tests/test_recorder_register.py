"""``RunRecorder.register`` on the real signer (in process): the must-keep ``tkbox.box`` and ``tkbox.task`` are sent
without waiting for each other, the run keeps them in that order, and a refusal of either fails the registration."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.signer_harness import RunningSigner, running_signer
from tkbox_daemon.boxes.recorder import RunRecorder
from tkbox_daemon.signer_link import AsyncSignerClient, SignerCallError


class WatchedClient(AsyncSignerClient):
    """The real signer link, noting when each observation is sent and when it is answered."""

    def __init__(self, socket: str) -> None:
        super().__init__(socket)
        self.seen: list[tuple[str, str]] = []

    async def call(self, method: str, **fields: Any) -> dict[str, Any]:
        source = fields.get("source", method)
        self.seen.append(("sent", source))
        try:
            return await super().call(method, **fields)
        finally:
            self.seen.append(("answered", source))


async def _stop(reason: str) -> None:
    raise AssertionError(f"register must not stop the box ({reason})")


def _recorder(signer: RunningSigner) -> tuple[RunRecorder, WatchedClient]:
    client = WatchedClient(str(signer.paths.socket))
    return RunRecorder(client, "box-unit", stop_box=_stop, on_event=lambda *_: None), client


def _run_records(signer: RunningSigner, run_id: str) -> list[tuple[str, str | None]]:
    """The run's records in log order, as (type, observation source)."""
    events = [json.loads(line)["event"] for _, line in signer.service.store.durable_lines(0)]
    return [(event["type"], event["data"].get("source")) for event in events if event["run_id"] == run_id]


async def test_the_two_observations_go_out_together_and_the_run_keeps_box_before_task(tmp_path):
    async with running_signer(tmp_path) as signer:
        recorder, client = _recorder(signer)
        run_id = await recorder.register({"name": "unit"}, "the task")
        # The task observation left before the box observation was answered: one wait, not two.
        assert client.seen[2:] == [("sent", "tkbox.box"), ("sent", "tkbox.task"),
                                   ("answered", "tkbox.box"), ("answered", "tkbox.task")]
        assert [source for _, source in _run_records(signer, run_id)][1:] == ["tkbox.box", "tkbox.task"]
        await recorder.close("done")
        await client.close()


async def test_the_order_holds_over_many_registrations_on_one_connection(tmp_path):
    async with running_signer(tmp_path) as signer:
        client = WatchedClient(str(signer.paths.socket))
        for n in range(20):
            recorder = RunRecorder(client, f"box-{n}", stop_box=_stop, on_event=lambda *_: None)
            run_id = await recorder.register({"name": f"unit-{n}"}, f"task {n}")
            records = _run_records(signer, run_id)
            assert [kind for kind, _ in records][0] != "input.observed"
            assert [source for _, source in records][1:] == ["tkbox.box", "tkbox.task"]
        await client.close()


@pytest.mark.parametrize("refused", ["box", "task"])
async def test_a_refusal_of_either_observation_fails_the_registration(tmp_path, refused):
    async with running_signer(tmp_path) as signer:
        recorder, client = _recorder(signer)
        # Values the signer's strict JSON refuses (NaN; a lone surrogate), one observation at a time.
        settings = {"name": "unit", "weight": float("nan")} if refused == "box" else {"name": "unit"}
        task = "the task \ud800" if refused == "task" else "the task"
        with pytest.raises(SignerCallError) as failed:
            await recorder.register(settings, task)
        assert failed.value.code == "invalid_request"
        assert ("answered", "tkbox.box") in client.seen and ("answered", "tkbox.task") in client.seen
        kept = [source for _, source in _run_records(signer, recorder.run_id or "")][1:]
        assert kept == (["tkbox.task"] if refused == "box" else ["tkbox.box"])
        await client.close()
