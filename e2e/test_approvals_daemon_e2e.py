"""Approvals end to end, the daemon's side (issue 10): the real signer process, the real ``tkbox daemon``, a real
bubblewrap box, ``tkbox exec`` as an agent runs it, and the answers through the daemon's API as the operator.

An exec the default pack answers ``ask`` is held; approved, it runs; rejected, it exits 126 with the operator's
reason; unanswered, it expires (a daemon started with ``--approval-wait 2``); approved and remembered, the same ask
runs next time with no person asked; the exported bundle has the answer before the command's result; and an answer
the signer refuses to record (the operator holds the run) refuses the command and stops the box."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.daemon_process import daemon_process, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tests.bundle_records import record_lines
from tkbox_daemon import strictjson
from tkbox_daemon.wire import ApprovalInfo, Event
from tkbox_tui.client import DaemonClient, DaemonError

pytestmark = pytest.mark.e2e

WAIT = 120.0  # a safety net against hangs, never a timing assertion
ROOT_OPERATOR = "uid 0 (root)"
STEERING = ["sh", "-c", "echo ran > /workspace/.bashrc; cat /workspace/.bashrc"]  # ask: TK-A003
SUDO = ["sudo", "true"]  # ask: TK-A001


@contextlib.contextmanager
def running_box(tmp_path: Path, *daemon_args: str) -> Iterator[dict[str, Any]]:
    tkbox("signer", "up")
    try:
        with daemon_process(*daemon_args, backend="bwrap") as daemon:
            info = tkbox_json("run", "--name", "e2e", "--workspace", str(make_checkout(tmp_path)))
            assert info["state"] == "running" and info["run_id"]
            yield {"daemon": daemon, "info": info}
    finally:
        tkbox("signer", "down", check=False)


@pytest.fixture
def box(tmp_path):
    with running_box(tmp_path) as running:
        yield running


async def _exec(argv: list[str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(TKBOX, "exec", "--stdin", "none", "e2e", "--", *argv,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _ended(process: asyncio.subprocess.Process) -> tuple[int, bytes, bytes]:
    stdout, stderr = await asyncio.wait_for(process.communicate(), WAIT)
    assert process.returncode is not None
    return process.returncode, stdout, stderr


async def _next(client: DaemonClient, after: int, *kinds: str) -> Event:
    """The first event of one of ``kinds`` of the box after sequence ``after``, awaited without polling."""
    async def first() -> Event:
        async for event in client.events(after=after, box="e2e"):
            if event.kind in kinds:
                return event
        raise AssertionError(f"the event stream ended before {kinds}")

    return await asyncio.wait_for(first(), WAIT)


async def _last_seq(client: DaemonClient) -> int:
    return (await client.health())["last_seq"]


async def _held(client: DaemonClient, argv: list[str]) -> tuple[asyncio.subprocess.Process, ApprovalInfo]:
    after = await _last_seq(client)
    process = await _exec(argv)
    pending = await _next(client, after, "approval.pending")
    return process, ApprovalInfo.from_json(pending.data["approval"])


async def _answer(client: DaemonClient, approval_id: str, **body: Any) -> ApprovalInfo:
    return ApprovalInfo.from_json(await client._request("POST", f"/approvals/{approval_id}", json=body))


def _exported(run_id: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Export the (closed) run, check it verifies offline, and return its records' events in order."""
    bundle, trust = tmp_path / "run.tkb", tmp_path / "run.trust.json"
    tkbox("signer", "export", "--run", run_id, "-o", str(bundle))
    tkbox("signer", "trust", "-o", str(trust))
    assert "Integrity: VERIFIED." in tkbox("verify", str(bundle), "--trust", str(trust)).stdout
    lines = record_lines(bundle)
    return [strictjson.loads_object(line, max_bytes=1 << 20)["event"] for line in lines]


def _observed(records: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == "input.observed" and r["data"]["source"] == source]


async def test_an_approved_ask_runs_and_the_bundle_has_the_answer_before_the_result(box, tmp_path):
    async with DaemonClient() as client:
        process, approval = await _held(client, STEERING)
        assert approval.program == "sh" and approval.rule_ids == ("TK-A003",)
        assert (await client.box("e2e")).approvals_pending == 1
        assert ".bashrc" not in tkbox("diff", "e2e").stdout  # held: nothing of it has run
        answered = await _answer(client, approval.id, answer="approve")
        assert answered.state == "approved" and answered.answered_by == ROOT_OPERATOR
        code, stdout, stderr = await _ended(process)
        assert code == 0 and stdout == b"ran\n", stderr
        assert f"approve with: tkbox approve {approval.id}".encode() in stderr
    tkbox("rm", "e2e")
    records = _exported(box["info"]["run_id"], tmp_path)
    [answer] = _observed(records, "tkbox.approval")
    assert answer["data"]["answer"] == "approve" and answer["data"]["decision_id"] == approval.decision_id
    [result] = [r for r in records if r["type"] == "tool.result" and r["data"]["decision_id"] == approval.decision_id]
    assert records.index(answer) < records.index(result)
    assert not [r for r in records if r["type"] == "capture.gap"]


async def test_a_rejected_ask_exits_126_with_the_operators_reason(box):
    async with DaemonClient() as client:
        process, approval = await _held(client, SUDO)
        await _answer(client, approval.id, answer="reject", reason="not in this job")
        code, _, stderr = await _ended(process)
        assert code == 126 and f"rejected by {ROOT_OPERATOR}: not in this job".encode() in stderr
        with pytest.raises(DaemonError) as again:
            await _answer(client, approval.id, answer="approve")
        assert again.value.status == 409 and again.value.code == "approval_answered"


async def test_an_ask_nobody_answers_expires_and_exits_126(tmp_path):
    with running_box(tmp_path, "--approval-wait", "2"):
        async with DaemonClient() as client:
            process, approval = await _held(client, SUDO)
            code, _, stderr = await _ended(process)
            assert code == 126 and b"no one answered" in stderr
            assert (await client._request("GET", f"/approvals/{approval.id}"))["state"] == "expired"
            with pytest.raises(DaemonError) as late:
                await _answer(client, approval.id, answer="approve")
            assert late.value.code == "approval_expired"


async def test_approve_and_remember_lets_the_next_identical_ask_run_with_no_person(box, tmp_path):
    async with DaemonClient() as client:
        process, approval = await _held(client, STEERING)
        await _answer(client, approval.id, answer="approve", remember=True)
        assert (await _ended(process))[0] == 0
        [rule] = (await client.box("e2e")).remembered
        assert (rule["program"], rule["rule_id"]) == ("sh", "TK-A003")
        after = await _last_seq(client)
        code, stdout, _ = await _ended(await _exec(STEERING))
        assert code == 0 and stdout == b"ran\n"
        kinds = [event.kind for event in await client.stored_events(after=after, box="e2e")]
        assert "approval.pending" not in kinds and "approval.answered" in kinds
        auto = [ApprovalInfo.from_json(e.data["approval"]) for e in await client.stored_events(after=after, box="e2e")
                if e.kind == "approval.answered"][0]
        assert auto.remembered_by == rule["id"] and auto.state == "approved"
    tkbox("rm", "e2e")
    records = _exported(box["info"]["run_id"], tmp_path)
    assert [r["data"]["answer"] for r in _observed(records, "tkbox.approval")] == ["approve", "approve"]
    assert len(_observed(records, "tkbox.remembered_rule")) == 1


async def test_an_answer_the_signer_refuses_to_record_refuses_the_command_and_stops_the_box(box, tmp_path):
    from tkbox_daemon.signer.client import SignerClient, new_request_id
    from tkbox_daemon.signer.paths import SignerPaths

    async with DaemonClient() as client:
        process, approval = await _held(client, STEERING)
        with SignerClient(SignerPaths.from_env().socket) as signer:  # the operator holds the run: no approve
            signer.call("hold", request_id=new_request_id(), run_id=box["info"]["run_id"], reason="operator looks")
        after = await _last_seq(client)
        with pytest.raises(DaemonError) as refused:
            await _answer(client, approval.id, answer="approve")
        assert refused.value.status == 503 and refused.value.code == "record_refused"
        code, stdout, stderr = await _ended(process)
        assert code == 126 and stdout == b"" and b"did not keep the record" in stderr
        stopped = await _next(client, after, "box.stopped", "box.failed")
        assert "tkbox.approval" in stopped.data["reason"]
        assert (await client.box("e2e")).state in ("stopped", "failed")
    assert ".bashrc" not in tkbox("diff", "e2e").stdout  # it never ran
    tkbox("rm", "e2e")
    records = _exported(box["info"]["run_id"], tmp_path)
    assert _observed(records, "tkbox.approval") == [] and _observed(records, "tkbox.gap")
