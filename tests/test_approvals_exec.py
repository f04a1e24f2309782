"""An exec the policy answers ``ask`` is held for a person (issue 10): it starts only once its approval is recorded
and approved, exactly as decided; otherwise it is refused with why.  The box's side of approvals is the real one
(``BoxApprovals``) over a fake run recorder (tests/approvals_fakes.py); the guest is scripted
(tests/fake_guest.py), so "it did not start" is "the guest was never asked to start it"."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from tests.approvals_fakes import DECISION_ID, FakeClock, FakeRecorder
from tests.fake_guest import WAIT, StubBox, linked
from tkbox_daemon import limits
from tkbox_daemon.approvals.box_approvals import BoxApprovals
from tkbox_daemon.approvals.registry import ApprovalRegistry, RecordRefused
from tkbox_daemon.boxes.exec_session import ExecDenied, ExecSession, ExecStart
from tkbox_daemon.boxes.recorder import Decision
from tkbox_daemon.tasks import spawn
from tkbox_daemon.wire import ApprovalInfo

ROOT = "uid 0 (root)"


class AskingBox(StubBox):
    """A running box whose signer answers ``ask`` to every command, with the real approvals side."""

    class settings(StubBox.settings):  # noqa: N801 - stands in for BoxSettings
        name = "asking"

    def __init__(self, link: Any, registry: ApprovalRegistry) -> None:
        super().__init__(link)
        self.recorder = FakeRecorder()
        self.approvals = BoxApprovals(self, registry)
        self.stops: list[str] = []
        self.stopped = asyncio.Event()
        self.answered = asyncio.Event()  # an approval.answered event was emitted

    def emit(self, kind: str, data: dict[str, Any] | None = None) -> None:
        super().emit(kind, data)
        if kind == "approval.answered":
            self.answered.set()

    async def decide_exec(self, args: dict[str, Any]) -> Decision:
        self.recorder.order.append("decide")
        return Decision("ask", "ask", DECISION_ID, ("TK-A001",), "privilege escalation", "run as yourself")

    async def start_guest_exec(self, session: Any, timeout_seconds: int, *, start_deadline: float) -> Any:
        self.recorder.order.append("start")
        return await super().start_guest_exec(session, timeout_seconds, start_deadline=start_deadline)

    async def stop(self, reason: str) -> None:
        self.stops.append(reason)
        self.state = "stopping"
        await self.approvals.withdraw_all(f"box asking stopped: {reason}")
        self.state = "stopped"
        self.stopped.set()


class Client:
    """What the exec route does with ``on_held``: remembers what it was told."""

    def __init__(self) -> None:
        self.held: list[tuple[dict[str, Any], ApprovalInfo]] = []
        self.told = asyncio.Event()

    async def on_held(self, decision: dict[str, Any], approval: ApprovalInfo) -> None:
        self.held.append((decision, approval))
        self.told.set()


@pytest.fixture
async def registry():
    made = ApprovalRegistry(clock=FakeClock())
    yield made
    await asyncio.wait_for(made.lose_all("the test ended"), WAIT)


def _session(box: AskingBox, argv: tuple[str, ...] = ("sudo", "true")) -> ExecSession:
    return ExecSession(box, ExecStart(argv=argv, cwd="/tmp", timeout=60))


async def _held(box: AskingBox, argv: tuple[str, ...] = ("sudo", "true")) -> tuple[ExecSession, asyncio.Task, Client]:
    session, client = _session(box, argv), Client()
    starting = spawn(session.start(on_held=client.on_held), name="test-start")
    await asyncio.wait_for(client.told.wait(), WAIT)
    return session, starting, client


async def _nothing_started(pair: Any) -> bool:
    await pair.ping()  # a round trip: any exec request the host had sent would have come first
    return pair.guest.frames.empty()


async def _run_to_start(pair: Any, starting: asyncio.Task) -> dict[str, Any]:
    request = await pair.guest.next_request("exec")
    pair.guest.respond(request["id"], pid=7)
    await asyncio.wait_for(starting, WAIT)
    return request


async def test_an_ask_is_held_and_runs_as_decided_once_approved_and_recorded(registry):
    async with linked() as pair:
        box = AskingBox(pair.link, registry)
        session, starting, client = await _held(box)
        [(decision, approval)] = client.held
        assert decision["decision"] == "ask" and decision["decision_id"] == DECISION_ID
        assert approval.pending and approval.decision_id == DECISION_ID and approval.program == "sudo"
        assert approval.asked == {"command": "sudo true", "cwd": "/tmp", "tty": False}
        [kept] = box.exec_history.execs()
        assert approval.context == {"exec_id": kept.id} and kept.state == "running"
        assert kept.reason.startswith(f"held for a person's approval ({approval.id}")
        assert await _nothing_started(pair) and not starting.done()
        answered = await registry.answer(approval.id, "approve", by=ROOT)
        request = await _run_to_start(pair, starting)
        assert request["argv"] == ["sudo", "true"] and request["cwd"] == "/tmp"
        assert session.decision_id == DECISION_ID and session.approval == answered
        assert box.recorder.order == ["decide", "approval:approve", "start"]
        assert box.recorder.approvals == [{"approval_id": approval.id, "decision_id": DECISION_ID,
                                           "answer": "approve", "by": ROOT, "reason": ""}]
        started = dict(box.event_data)["exec.started"]
        assert started["approval_id"] == approval.id and started["decision_id"] == DECISION_ID
        assert box.exec_history.execs()[0].reason.startswith(f"approved by uid 0 (root) ({approval.id})")
        assert box.events[:2] == ["approval.pending", "approval.answered"]


async def test_a_rejected_ask_never_runs_and_says_who_rejected_it_and_why(registry):
    async with linked() as pair:
        box = AskingBox(pair.link, registry)
        _, starting, client = await _held(box)
        approval = client.held[0][1]
        await registry.answer(approval.id, "reject", by=ROOT, reason="not in this job")
        with pytest.raises(ExecDenied) as denied:
            await asyncio.wait_for(starting, WAIT)
        shown = denied.value.decision
        assert shown["reason"] == "rejected by uid 0 (root): not in this job"
        assert shown["approval_id"] == approval.id and shown["state"] == "rejected"
        assert "hint" not in shown  # the policy's hint was for the person asked, who has answered
        assert shown["rule_ids"] == ["TK-A001"] and await _nothing_started(pair)
        [kept] = box.exec_history.execs()
        assert kept.state == "denied" and "rejected by uid 0 (root): not in this job" in kept.reason
        assert box.events[-1] == "exec.denied" and dict(box.event_data)["exec.denied"]["state"] == "rejected"


async def test_an_ask_nobody_answers_is_refused_when_it_expires():
    registry = ApprovalRegistry(wait_seconds=0.05)  # a short configured wait; the test awaits the refusal
    async with linked() as pair:
        box = AskingBox(pair.link, registry)
        with pytest.raises(ExecDenied) as denied:
            await asyncio.wait_for(_session(box).start(), WAIT)
        assert denied.value.decision["state"] == "expired"
        assert "no one answered" in denied.value.decision["reason"] and await _nothing_started(pair)
        assert box.recorder.approvals[0]["answer"] == "expire"


async def test_a_client_that_goes_away_while_held_withdraws_its_approval(registry):
    async with linked() as pair:
        box = AskingBox(pair.link, registry)
        _, starting, client = await _held(box)
        starting.cancel()
        await asyncio.wait_for(box.answered.wait(), WAIT)
        assert registry.get(client.held[0][1].id).state == "withdrawn"
        assert box.recorder.approvals[0]["answer"] == "withdraw" and await _nothing_started(pair)


async def test_a_client_that_cannot_be_told_withdraws_its_approval(registry):
    async with linked() as pair:
        box = AskingBox(pair.link, registry)

        async def gone(decision: dict[str, Any], approval: ApprovalInfo) -> None:
            raise ConnectionResetError("the client went away")

        with pytest.raises(ConnectionResetError):
            await _session(box).start(on_held=gone)
        await asyncio.wait_for(box.answered.wait(), WAIT)
        [approval] = registry.list()
        assert approval.state == "withdrawn" and "its client went away" in approval.answer_reason


async def test_a_stopping_box_withdraws_its_held_execs(registry):
    async with linked() as pair:
        box = AskingBox(pair.link, registry)
        _, starting, _ = await _held(box)
        await box.stop("stopped by the operator")
        with pytest.raises(ExecDenied) as denied:
            await asyncio.wait_for(starting, WAIT)
        assert denied.value.decision["state"] == "withdrawn"
        assert denied.value.decision["reason"] == "withdrawn: box asking stopped: stopped by the operator"


async def test_past_the_pending_limit_an_ask_is_refused_at_once_naming_the_limit(registry, monkeypatch):
    monkeypatch.setattr(limits, "PENDING_APPROVALS_PER_BOX",
                        limits.Limit("pending_approvals_per_box", 1, "approvals", "test", "answer them first"))
    async with linked() as pair:
        box = AskingBox(pair.link, registry)
        await _held(box)
        with pytest.raises(ExecDenied) as denied:
            await asyncio.wait_for(_session(box).start(), WAIT)
        assert "pending_approvals_per_box" in denied.value.decision["reason"]
        assert "answer them first" in denied.value.decision["reason"] and denied.value.decision["hint"]
        assert len(registry.list()) == 1 and box.exec_history.execs()[-1].state == "denied"


async def test_a_refused_approval_record_refuses_the_exec_stops_the_box_and_counts_the_gap(registry):
    async with linked() as pair:
        box = AskingBox(pair.link, registry)
        _, starting, client = await _held(box)
        box.recorder.refuse = "run is held by the operator"
        with pytest.raises(RecordRefused, match="run is held by the operator"):
            await registry.answer(client.held[0][1].id, "approve", by=ROOT)
        with pytest.raises(ExecDenied) as denied:
            await asyncio.wait_for(starting, WAIT)
        assert denied.value.decision["state"] == "lost" and "did not keep the record" in denied.value.decision["reason"]
        await asyncio.wait_for(box.stopped.wait(), WAIT)
        assert "tkbox.approval" in box.stops[0] and "run is held by the operator" in box.stops[0]
        assert box.recorder.gaps.counts == {"approval_refused": 1}
        [(source, trust, value)] = box.recorder.observed
        assert (source, trust, value["lost"], value["counts"]) == ("tkbox.gap", "trusted", "tkbox.approval",
                                                                  {"approval_refused": 1})
        assert await _nothing_started(pair)


async def test_approve_and_remember_lets_the_same_ask_run_at_once_recorded_first(registry):
    async with linked() as pair:
        box = AskingBox(pair.link, registry)
        _, starting, client = await _held(box)
        first = await registry.answer(client.held[0][1].id, "approve", by=ROOT, remember=True)
        await _run_to_start(pair, starting)
        [rule] = box.approvals.remembered.rules()
        assert (rule.program, rule.rule_id, rule.approval_id, rule.by) == ("sudo", "TK-A001", first.id, ROOT)
        assert box.recorder.observed[0][:2] == ("tkbox.remembered_rule", "trusted")
        assert box.recorder.observed[0][2]["action"] == "add" and box.recorder.observed[0][2]["id"] == rule.id
        assert "approval.rule_added" in box.events
        box.recorder.order.clear()
        second, client = _session(box), Client()
        starting = spawn(second.start(on_held=client.on_held), name="test-start-again")
        await _run_to_start(pair, starting)
        assert client.held == [] and second.approval is not None
        assert second.approval.remembered_by == rule.id and second.approval.answered_by == f"rule {rule.id}"
        assert box.recorder.order == ["decide", "approval:approve", "start"]
        assert box.recorder.approvals[-1]["by"] == f"remembered rule {rule.id} (approved by uid 0 (root))"
        assert box.events.count("approval.pending") == 1


async def test_a_remembered_rule_covers_only_its_program_and_can_be_forgotten(registry):
    async with linked() as pair:
        box = AskingBox(pair.link, registry)
        _, starting, client = await _held(box)
        await registry.answer(client.held[0][1].id, "approve", by=ROOT, remember=True)
        await _run_to_start(pair, starting)
        other, other_task, other_client = await _held(box, ("su", "-c", "true"))  # same rule id, another program
        assert other_client.held and other.approval is None
        other_task.cancel()
        [rule] = box.approvals.remembered.rules()
        assert box.approvals.forget(rule.id, by=ROOT) == rule and box.approvals.remembered.rules() == []
        assert box.recorder.observed[-1][2]["action"] == "remove" and "approval.rule_removed" in box.events
        _, again_task, again = await _held(box)  # the same ask waits for a person again
        assert again.held
        again_task.cancel()


def test_the_fakes_stand_in_for_the_real_interfaces():
    """The fake recorder offers what BoxApprovals calls on the real one (so the tests above test real code paths)."""
    from tkbox_daemon.boxes.recorder import RunRecorder

    for name in ("record_approval", "observe_must_keep", "gaps", "closed"):
        assert hasattr(FakeRecorder(), name)
        assert name in ("gaps", "closed") or callable(getattr(RunRecorder, name))
    assert os.environ.get("XDG_STATE_HOME")  # StubBox keeps its exec history under the test's own state dir

