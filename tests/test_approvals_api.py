"""Approvals through the daemon's real API (issue 10): the exec WebSocket holds an ``ask``, the approval routes
answer it with the caller's identity, the answer is in the box's signed run before the command runs, and every
other ending refuses it with why.  Real signer and guest agent in process, the test-only unisolated backend (so
the commands run on the host: each one touches only a file under the test's own directory)."""

from __future__ import annotations

import asyncio
import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_harness import make_workspace, running_daemon
from tkbox_daemon import limits
from tkbox_daemon.signer.idempotency import new_request_id
from tkbox_daemon.wire import ApprovalInfo, BoxInfo, RememberedRule
from tkbox_tui.client import DaemonClient, DaemonError

HOST_CWD = "/tmp"
WAIT = 60.0  # a safety net against hangs, never a timing assertion
ME = f"uid {os.getuid()} ({pwd.getpwuid(os.getuid()).pw_name})"


async def _create(client: DaemonClient, tmp_path: Path) -> BoxInfo:
    return await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})


def _steering_file(tmp_path: Path) -> Path:
    """A file whose creation the default pack asks about (TK-A003: a shell start-up file), in a new directory."""
    directory = tmp_path / "steered"
    directory.mkdir()
    return directory / ".bashrc"


class HeldExec:
    """One exec over the WebSocket, read message by message."""

    def __init__(self, client: DaemonClient, argv: list[str]) -> None:
        self.call = client.exec("t1")
        self.argv = argv
        self.seen: list[dict[str, Any]] = []
        self._messages: Any = None

    async def start(self) -> HeldExec:
        await self.call.start(self.argv, cwd=HOST_CWD)
        self._messages = self.call.messages()
        return self

    async def next(self) -> dict[str, Any]:
        while True:
            message = await asyncio.wait_for(anext(self._messages), WAIT)
            if isinstance(message, dict):
                self.seen.append(message)
                return message

    async def until_held(self) -> dict[str, Any]:
        decision, held = await self.next(), await self.next()
        assert decision["type"] == "decision" and decision["decision"] == "ask", decision
        assert held["type"] == "held", held
        return held

    async def end(self) -> dict[str, Any]:
        while (message := await self.next())["type"] not in ("exit", "denied", "error"):
            pass
        await self.call.close()
        return message


async def _answer(client: DaemonClient, approval_id: str, **body: Any) -> ApprovalInfo:
    return ApprovalInfo.from_json(await client._request("POST", f"/approvals/{approval_id}", json=body))


async def _approvals(client: DaemonClient, **query: str) -> list[ApprovalInfo]:
    reply = await client._request("GET", "/approvals", params=query)
    return [ApprovalInfo.from_json(item) for item in reply["approvals"]]


async def _event(client: DaemonClient, kind: str, after: int = 0, **data: Any) -> Any:
    """The first event of ``kind`` after ``after`` whose approval has the given fields, awaited without polling."""
    async for event in client.events(after=after):
        approval = event.data.get("approval", {})
        if event.kind == kind and all(approval.get(key) == value for key, value in data.items()):
            return event
    raise AssertionError(f"the stream ended before a {kind} event")


async def _run_records(daemon: Any, run_id: str) -> list[dict[str, Any]]:
    service = daemon.signer.service
    await service.store.drain()
    return [record.event for record in service.run_records(service.book.runs[run_id])]


def _approval_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["data"] for r in records if r["type"] == "input.observed" and r["data"]["source"] == "tkbox.approval"]


async def test_an_ask_is_held_then_approved_by_the_caller_and_runs_as_decided_recorded_first(tmp_path):
    target = _steering_file(tmp_path)
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        held_exec = await HeldExec(client, ["touch", str(target)]).start()
        held = await held_exec.until_held()
        decision = held_exec.seen[0]
        [pending] = await _approvals(client, state="pending")
        assert pending.id == held["approval_id"] and pending.expires_at == held["expires_at"]
        assert pending.decision_id == decision["decision_id"] and pending.rule_ids == ("TK-A003",)
        assert pending.program == "touch" and pending.asked == {"command": f"touch {target}", "cwd": HOST_CWD,
                                                                "tty": False}
        assert (await client.box("t1")).approvals_pending == 1 and not target.exists()
        [kept] = await client.execs("t1")
        assert kept.state == "running" and pending.id in kept.reason and pending.context == {"exec_id": kept.id}
        answered = await _answer(client, pending.id, answer="approve")
        assert answered.state == "approved" and answered.answered_by == ME and answered.answered_at
        approved, started = await held_exec.next(), await held_exec.next()
        assert approved == {"type": "approved", "approval_id": pending.id, "by": ME}
        assert started["type"] == "started"
        assert (await held_exec.end())["exit_code"] == 0 and target.exists()
        assert (await client.box("t1")).approvals_pending == 0
        assert (await client.execs("t1"))[0].state == "finished"
        kinds = [event.kind for event in await client.stored_events(box="t1")]
        assert kinds.index("approval.pending") < kinds.index("approval.answered") < kinds.index("exec.started")
        await client.remove_box("t1")  # closes the run: the completion is in it
        records = await _run_records(daemon, info.run_id)
        types = [r["type"] for r in records]
        [approval] = _approval_records(records)
        assert approval["decision_id"] == decision["decision_id"] and approval["answer"] == "approve"
        assert approval["approval_id"] == pending.id
        assert records.index(next(r for r in records if r["data"] is approval)) < types.index("tool.result")
        assert "capture.gap" not in types  # an approved ask that ran is not "executed against policy"


async def test_a_rejection_ends_the_exec_126_with_who_and_why_and_nothing_runs(tmp_path):
    target = _steering_file(tmp_path)
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        held_exec = await HeldExec(client, ["touch", str(target)]).start()
        held = await held_exec.until_held()
        await _answer(client, held["approval_id"], answer="reject", reason="not in this job")
        end = await held_exec.end()
        assert end["type"] == "denied" and end["exit_code"] == 126
        assert end["reason"] == f"rejected by {ME}: not in this job"
        assert end["approval_id"] == held["approval_id"] and end["state"] == "rejected"
        assert not target.exists() and (await client.execs("t1"))[0].state == "denied"
        with pytest.raises(DaemonError) as again:  # a second answer: refused, nothing changes or is recorded
            await _answer(client, held["approval_id"], answer="approve")
        assert again.value.status == 409 and again.value.code == "approval_answered"
        assert f"was already rejected by {ME}" in str(again.value) and "nothing changed" in str(again.value)
        info = await client.box("t1")
        assert len(_approval_records(await _run_records(daemon, info.run_id))) == 1


async def test_an_ask_nobody_answers_expires_is_refused_and_cannot_be_answered_after(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        daemon.manager.approvals.wait_seconds = 0.5  # a short configured wait; the test awaits the refusal
        held_exec = await HeldExec(client, ["sudo", "true"]).start()
        held = await held_exec.until_held()
        end = await held_exec.end()
        assert end["type"] == "denied" and end["exit_code"] == 126 and end["state"] == "expired"
        assert "no one answered" in end["reason"] and "tkbox approve ID" in end["reason"]
        expired = await _event(client, "approval.expired", id=held["approval_id"])
        assert expired.data["approval"]["state"] == "expired"
        with pytest.raises(DaemonError) as late:
            await _answer(client, held["approval_id"], answer="approve")
        assert late.value.status == 409 and late.value.code == "approval_expired"
        records = _approval_records(await _run_records(daemon, (await client.box("t1")).run_id))
        assert [record["answer"] for record in records] == ["expire"]


async def test_a_client_that_goes_away_while_held_withdraws_the_approval(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        held_exec = await HeldExec(client, ["sudo", "true"]).start()
        held = await held_exec.until_held()
        await held_exec.call.close()
        withdrawn = await _event(client, "approval.answered", id=held["approval_id"], state="withdrawn")
        assert "its client went away" in withdrawn.data["approval"]["answer_reason"]
        records = _approval_records(await _run_records(daemon, (await client.box("t1")).run_id))
        assert [record["answer"] for record in records] == ["withdraw"]


async def test_a_refused_approval_record_refuses_the_exec_and_stops_the_box_counting_the_gap(tmp_path):
    target = _steering_file(tmp_path)
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        held_exec = await HeldExec(client, ["touch", str(target)]).start()
        held = await held_exec.until_held()
        connection = await daemon.signer.connect()  # the operator holds the run: the signer refuses an approve
        await connection.call("hold", request_id=new_request_id(), run_id=info.run_id, reason="operator looks")
        await connection.close()
        with pytest.raises(DaemonError) as refused:
            await _answer(client, held["approval_id"], answer="approve")
        assert refused.value.status == 503 and refused.value.code == "record_refused"
        assert "did not keep the record" in str(refused.value)
        end = await held_exec.end()
        assert end["type"] == "denied" and end["exit_code"] == 126 and end["state"] == "lost"
        assert "did not keep the record of this answer" in end["reason"] and not target.exists()
        stopped = await _box_stopped(client)
        assert "tkbox.approval" in stopped.data["reason"] and held["approval_id"] in stopped.data["reason"]
        assert daemon.manager.get("t1").recorder.gaps.counts == {"approval_refused": 1}
        await client.remove_box("t1")
        records = await _run_records(daemon, info.run_id)
        assert _approval_records(records) == []
        gaps = [r for r in records if r["type"] == "input.observed" and r["data"]["source"] == "tkbox.gap"]
        assert gaps, "the loss is recorded as tkbox.gap"


async def _box_stopped(client: DaemonClient) -> Any:
    async for event in client.events(after=0):
        if event.kind in ("box.stopped", "box.failed"):
            return event
    raise AssertionError("the stream ended before the box stopped")


async def test_approve_and_remember_lets_the_same_ask_through_at_once_until_the_rule_is_removed(tmp_path):
    target = _steering_file(tmp_path)
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        first = await HeldExec(client, ["touch", str(target)]).start()
        held = await first.until_held()
        answered = await _answer(client, held["approval_id"], answer="approve", remember=True)
        assert answered.remember and (await first.end())["exit_code"] == 0
        [rule] = [RememberedRule.from_json(item) for item in (await client.box("t1")).remembered]
        assert (rule.program, rule.rule_id, rule.approval_id, rule.by) == ("touch", "TK-A003", answered.id, ME)
        after = (await client.stored_events())[-1].seq
        target.unlink()
        second = await HeldExec(client, ["touch", str(target)]).start()
        decision, approved = await second.next(), await second.next()
        assert decision["type"] == "decision" and approved["type"] == "approved"
        assert approved["by"] == f"rule {rule.id}"
        assert (await second.end())["exit_code"] == 0 and target.exists()
        auto = ApprovalInfo.from_json((await _event(client, "approval.answered", after, state="approved")
                                       ).data["approval"])
        assert auto.remembered_by == rule.id and auto.id == approved["approval_id"]
        assert "approval.pending" not in [e.kind for e in await client.stored_events(after=after)]
        records = _approval_records(await _run_records(daemon, info.run_id))
        assert [r["answer"] for r in records] == ["approve", "approve"]
        removed = await client._request("DELETE", f"/boxes/t1/remembered/{rule.id}")
        assert RememberedRule.from_json(removed["removed"]) == rule and (await client.box("t1")).remembered == []
        with pytest.raises(DaemonError) as missing:
            await client._request("DELETE", f"/boxes/t1/remembered/{rule.id}")
        assert missing.value.status == 404 and missing.value.code == "not_found"
        third = await HeldExec(client, ["touch", str(target)]).start()
        await third.until_held()  # a person is asked again
        await third.call.close()
        kinds = [event.kind for event in await client.stored_events(box="t1")]
        assert "approval.rule_added" in kinds and "approval.rule_removed" in kinds
        observed = [r["data"]["source"] for r in await _run_records(daemon, info.run_id)
                    if r["type"] == "input.observed"]
        assert observed.count("tkbox.remembered_rule") == 2


async def test_stopping_the_box_withdraws_its_held_exec_and_records_it(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        held_exec = await HeldExec(client, ["sudo", "true"]).start()
        await held_exec.until_held()
        await client.stop_box("t1")
        end = await held_exec.end()
        assert end["type"] == "denied" and end["state"] == "withdrawn" and "box t1 stopped" in end["reason"]
        records = _approval_records(await _run_records(daemon, (await client.box("t1")).run_id))
        assert [record["answer"] for record in records] == ["withdraw"]


async def test_past_the_pending_limit_an_ask_is_refused_at_once_with_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "PENDING_APPROVALS_PER_BOX",
                        limits.Limit("pending_approvals_per_box", 1, "approvals", "test", "answer them first"))
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        first = await HeldExec(client, ["sudo", "true"]).start()
        await first.until_held()
        second = await HeldExec(client, ["sudo", "true"]).start()
        end = await second.end()
        assert end["type"] == "denied" and end["exit_code"] == 126
        assert "pending_approvals_per_box" in end["reason"] and "approval_id" not in end
        assert len(await _approvals(client)) == 1
        await first.call.close()


async def test_bad_requests_get_clear_errors_and_change_nothing(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        held_exec = await HeldExec(client, ["sudo", "true"]).start()
        held = await held_exec.until_held()
        for body in ({"answer": "maybe"}, {"answer": "reject", "remember": True}, {"answer": "approve", "by": "x"},
                     {"answer": "approve", "reason": "r" * 1025}):
            with pytest.raises(DaemonError) as bad:
                await _answer(client, held["approval_id"], **body)
            assert bad.value.status == 400 and bad.value.code == "invalid_request"
        with pytest.raises(DaemonError) as not_json:
            await client._request("POST", f"/approvals/{held['approval_id']}", data=b"approve")
        assert not_json.value.status == 400
        with pytest.raises(DaemonError) as unknown:
            await _answer(client, "apr-0000000000000000", answer="approve")
        assert unknown.value.status == 404 and "tkbox approvals" in str(unknown.value)
        with pytest.raises(DaemonError) as state:
            await _approvals(client, state="waiting")
        assert state.value.status == 400
        with pytest.raises(DaemonError) as box:
            await _approvals(client, box="nope")
        assert box.value.status == 404
        [still] = await _approvals(client, box="t1")
        assert still.pending and _approval_records(await _run_records(daemon, (await client.box("t1")).run_id)) == []
        shown = ApprovalInfo.from_json(await client._request("GET", f"/approvals/{held['approval_id']}"))
        assert shown == still
        await held_exec.call.close()
