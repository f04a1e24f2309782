"""The daemon's approval registry (issue 10): one answer per approval, recorded before it counts, the host's own
expiry, the per-box limits, and what stays listed.  A fake box side (tests/approvals_fakes.py) stands behind the
``ApprovalHost`` interface; time is a clock the test moves, so nothing here waits on the wall clock."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tests.approvals_fakes import FakeClock, FakeHost, asked
from tkbox_daemon import limits
from tkbox_daemon.approvals.registry import (
    HOST_ANSWERER,
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalRegistry,
    LimitReached,
    RecordRefused,
    refusal_reason,
)
from tkbox_daemon.tasks import spawn
from tkbox_daemon.wire import ApprovalInfo, RememberedRule

WAIT = 30.0  # a safety net against hangs, never a timing assertion
ROOT = "uid 0 (root)"


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
async def registry(clock):
    made = ApprovalRegistry(clock=clock)
    yield made
    with contextlib.suppress(TimeoutError):  # no expiry timer outlives its test (a failed one may hold a record)
        await asyncio.wait_for(made.lose_all("the test ended"), 5)


async def test_an_approval_opens_pending_with_the_asked_action_and_its_expiry(registry):
    host = FakeHost()
    approval = registry.open(host, **asked())
    info = approval.info
    assert info.pending and info.id.startswith("apr-") and len(info.id) == 20
    assert (info.box_id, info.box_name, info.kind, info.program) == ("box-1", "b1", "exec", "sudo")
    assert info.asked == {"command": "sudo true", "cwd": "/workspace", "tty": False}
    assert info.rule_ids == ("TK-A001",) and info.context == {"exec_id": 1}
    assert info.created_at < info.expires_at
    assert host.kinds() == ["approval.pending"]
    assert ApprovalInfo.from_json(host.events[0][1]["approval"]) == info
    assert registry.list() == [info] and registry.pending_count("box-1") == 1 and host.records == []


async def test_an_answer_is_recorded_before_the_approval_changes_and_the_waiter_sees_it(registry):
    host = FakeHost()
    host.gate = asyncio.Event()
    approval = registry.open(host, **asked())
    waiter = spawn(registry.wait(approval), name="test-wait")
    answering = spawn(registry.answer(approval.info.id, "approve", by=ROOT), name="test-answer")
    await asyncio.wait_for(host.recording.wait(), WAIT)
    assert registry.get(approval.info.id).pending and not waiter.done()  # the record is not kept yet
    host.gate.set()
    answered = await asyncio.wait_for(answering, WAIT)
    assert answered.state == "approved" and answered.answered_by == ROOT and answered.answered_at
    assert (await asyncio.wait_for(waiter, WAIT)) == answered
    assert host.records == [{"approval_id": approval.info.id, "state_when_recorded": "pending", "answer": "approve",
                             "by": ROOT, "reason": ""}]
    assert host.kinds() == ["approval.pending", "approval.answered"]


async def test_a_rejection_carries_who_and_why(registry):
    host = FakeHost()
    approval = registry.open(host, **asked())
    info = await registry.answer(approval.info.id, "reject", by=ROOT, reason="not in this job")
    assert info.state == "rejected" and info.answer_reason == "not in this job"
    assert refusal_reason(info) == "rejected by uid 0 (root): not in this job"
    assert host.records[0]["answer"] == "reject" and host.records[0]["reason"] == "not in this job"


async def test_a_second_answer_is_refused_and_changes_and_records_nothing(registry):
    host = FakeHost()
    approval = registry.open(host, **asked())
    first = await registry.answer(approval.info.id, "approve", by=ROOT)
    with pytest.raises(ApprovalConflict) as conflict:
        await registry.answer(approval.info.id, "reject", by="uid 1000 (alice)", reason="no")
    assert conflict.value.code == "approval_answered"
    assert str(conflict.value) == (f"approval {first.id} was already approved by uid 0 (root) at {first.answered_at}; "
                                   "nothing changed")
    assert registry.get(first.id) == first and len(host.records) == 1


async def test_two_answers_racing_cannot_both_win(registry):
    host = FakeHost()
    host.gate = asyncio.Event()
    approval = registry.open(host, **asked())
    approve = spawn(registry.answer(approval.info.id, "approve", by=ROOT), name="test-approve")
    await asyncio.wait_for(host.recording.wait(), WAIT)
    reject = spawn(registry.answer(approval.info.id, "reject", by="uid 1000 (alice)"), name="test-reject")
    host.gate.set()
    results = await asyncio.gather(approve, reject, return_exceptions=True)
    assert results[0].state == "approved" and isinstance(results[1], ApprovalConflict)
    assert [record["answer"] for record in host.records] == ["approve"]


async def test_at_its_deadline_the_host_records_the_expiry_and_a_late_answer_changes_nothing(registry, clock):
    host = FakeHost()
    approval = registry.open(host, **asked())
    clock.advance(limits.APPROVAL_WAIT.default - 1)
    await registry.expire_due()
    assert approval.info.pending
    clock.advance(1)
    await registry.expire_due()
    info = await asyncio.wait_for(registry.wait(approval), WAIT)
    assert info.state == "expired" and info.answered_by == ""
    assert "no one answered" in info.answer_reason and "within 120 s" in info.answer_reason
    assert "tkbox approve ID" in info.answer_reason and refusal_reason(info) == info.answer_reason
    assert host.records == [{"approval_id": info.id, "state_when_recorded": "pending", "answer": "expire",
                             "by": HOST_ANSWERER, "reason": info.answer_reason}]
    assert host.kinds()[-1] == "approval.expired"
    with pytest.raises(ApprovalConflict) as conflict:
        await registry.answer(info.id, "approve", by=ROOT)
    assert conflict.value.code == "approval_expired"
    assert str(conflict.value) == f"approval {info.id} expired at {info.answered_at}; nothing changed"
    assert len(host.records) == 1


async def test_an_answer_after_the_deadline_is_an_expiry_even_before_the_timer_runs(registry, clock):
    host = FakeHost()
    approval = registry.open(host, **asked())
    clock.advance(limits.APPROVAL_WAIT.default)
    with pytest.raises(ApprovalConflict, match="expired"):
        await registry.answer(approval.info.id, "approve", by=ROOT)
    assert approval.info.state == "expired" and [r["answer"] for r in host.records] == ["expire"]


async def test_the_hosts_own_timer_expires_an_approval_nobody_answers():
    registry = ApprovalRegistry(wait_seconds=0.05)  # a short configured wait; the test awaits the outcome, not the clock
    host = FakeHost()
    approval = registry.open(host, **asked())
    info = await asyncio.wait_for(registry.wait(approval), WAIT)
    assert info.state == "expired" and host.records[0]["answer"] == "expire" and "0.05 s" in info.answer_reason


async def test_past_the_pending_limit_the_box_is_refused_at_once_naming_the_limit(registry, clock):
    host, other = FakeHost(), FakeHost("box-2", "b2")
    opened = [registry.open(host, **asked()) for _ in range(limits.PENDING_APPROVALS_PER_BOX.default)]
    with pytest.raises(LimitReached) as refused:
        registry.open(host, **asked())
    message = str(refused.value)
    assert "pending_approvals_per_box" in message and "16 approvals of box b1" in message
    assert "tkbox approvals" in message and refused.value.hint
    assert registry.pending_count("box-1") == 16 and host.kinds().count("approval.pending") == 16
    registry.open(other, **asked())  # another box has its own limit
    await registry.answer(opened[0].info.id, "reject", by=ROOT)
    registry.open(host, **asked())  # one answered: room for one more


async def test_past_the_per_minute_limit_the_box_is_refused_until_the_minute_has_passed(registry, clock):
    host = FakeHost()
    for _ in range(limits.APPROVALS_PER_MINUTE.default):
        opened = registry.open(host, **asked())
        await registry.answer(opened.info.id, "reject", by=ROOT)  # answered at once: the pending limit stays far
        clock.advance(1)
    with pytest.raises(LimitReached) as refused:
        registry.open(host, **asked())
    assert "approvals_per_minute" in str(refused.value) and "box b1 opened 30 approvals" in str(refused.value)
    assert registry.pending_count("box-1") == 0
    clock.advance(limits.APPROVALS_PER_MINUTE.default)  # the first of them is a minute old now
    assert registry.open(host, **asked()).info.pending


async def test_a_refused_record_loses_the_approval_and_the_host_stops_the_box(registry):
    host = FakeHost()
    approval = registry.open(host, **asked())
    host.refuse = "run_contained: run is held"
    with pytest.raises(RecordRefused):
        await registry.answer(approval.info.id, "approve", by=ROOT)
    info = await asyncio.wait_for(registry.wait(approval), WAIT)
    assert info.state == "lost" and "did not keep the record of this answer (approve" in info.answer_reason
    assert "the action was refused and box b1 stopped" in refusal_reason(info)
    assert host.lost == [f"approval {info.id}: the record of its answer (approve) was refused: "
                         "run_contained: run is held"]
    assert host.records == [] and host.remembered == []
    with pytest.raises(ApprovalConflict):  # lost is an answer too: nothing more changes it
        await registry.answer(info.id, "approve", by=ROOT)


async def test_a_refused_expiry_record_also_loses_it_and_stops_the_box(registry, clock):
    host = FakeHost()
    approval = registry.open(host, **asked())
    host.refuse = "unreachable: the signer is gone"
    clock.advance(limits.APPROVAL_WAIT.default)
    await registry.expire_due()
    assert approval.info.state == "lost" and len(host.lost) == 1 and "(expire)" in host.lost[0]


async def test_withdrawals_are_recorded_and_only_touch_their_box(registry):
    host, other = FakeHost(), FakeHost("box-2", "b2")
    mine, theirs = registry.open(host, **asked()), registry.open(other, **asked())
    await registry.withdraw_box("box-1", "box b1 stopped: stopped by the operator")
    assert mine.info.state == "withdrawn" and theirs.info.pending
    assert refusal_reason(mine.info) == "withdrawn: box b1 stopped: stopped by the operator"
    assert host.records[0]["answer"] == "withdraw" and other.records == []
    assert host.kinds()[-1] == "approval.answered"
    await registry.withdraw(mine, "again")  # already answered: nothing more is recorded
    assert len(host.records) == 1


async def test_a_daemon_stop_records_every_pending_approval_lost(registry):
    hosts = [FakeHost(f"box-{n}", f"b{n}") for n in range(3)]
    approvals = [registry.open(host, **asked()) for host in hosts]
    answered = await registry.answer(approvals[0].info.id, "approve", by=ROOT)
    await registry.lose_all("the daemon stopped before anyone answered")
    assert answered.state == "approved"
    assert [a.info.state for a in approvals[1:]] == ["lost", "lost"]
    assert [host.records[-1]["answer"] for host in hosts] == ["approve", "lost", "lost"]


async def test_remembered_rules_approve_at_once_recorded_first_without_a_pending_event(registry):
    host = FakeHost()
    rule = RememberedRule("rem-0123456789ab", "sudo", "TK-A001", "apr-" + "1" * 16, ROOT, "2026-01-01T00:00:00Z")
    approval = await registry.approve_by_rule(host, [rule], **asked())
    info = approval.info
    assert info.state == "approved" and info.remembered_by == rule.id and info.answered_by == f"rule {rule.id}"
    assert host.records == [{"approval_id": info.id, "state_when_recorded": "pending", "answer": "approve",
                             "by": f"remembered rule {rule.id} (approved by uid 0 (root))", "reason": ""}]
    assert host.kinds() == ["approval.answered"] and registry.list() == [info]
    host.refuse = "unreachable: gone"
    lost = (await registry.approve_by_rule(host, [rule], **asked())).info
    assert lost.state == "lost" and host.lost and registry.pending_count("box-1") == 0


async def test_remember_adds_rules_only_after_the_approval_is_recorded(registry):
    host = FakeHost()
    approval = registry.open(host, **asked())
    host.refuse = "refused"
    with pytest.raises(RecordRefused):
        await registry.answer(approval.info.id, "approve", by=ROOT, remember=True)
    assert host.remembered == []
    host.refuse = None
    second = registry.open(host, **asked())
    info = await registry.answer(second.info.id, "approve", by=ROOT, remember=True)
    assert info.remember and host.remembered == [(info.id, ROOT)]
    third = registry.open(host, **asked())
    assert not (await registry.answer(third.info.id, "reject", by=ROOT, remember=True)).remember


async def test_answered_approvals_stay_listed_for_a_while_and_at_most_the_newest(registry, clock, monkeypatch):
    monkeypatch.setattr(limits, "APPROVALS_KEPT", limits.Limit("approvals_kept", 2, "approvals", "test", "test"))
    host = FakeHost()
    pending = registry.open(host, **asked())
    answered = []
    for _ in range(3):
        approval = registry.open(host, **asked())
        answered.append(await registry.answer(approval.info.id, "reject", by=ROOT))
    assert [info.id for info in registry.list()] == [pending.info.id, answered[1].id, answered[2].id]
    with pytest.raises(ApprovalNotFound, match="tkbox approvals"):
        registry.get(answered[0].id)
    clock.advance(limits.APPROVAL_KEPT_TIME.default + 1)
    await registry.expire_due()  # the pending one expires too, and is listed from its answer on
    assert [info.id for info in registry.list()] == [pending.info.id]
    assert registry.list(state="pending") == [] and registry.list(box_id="box-2") == []
