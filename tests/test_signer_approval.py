"""The signer's side of approvals over a real Unix socket: a trusted ``tkbox.approval`` observation answers one ask
decision of its run once, before it completes; anything else is refused and records nothing; a completed ask that was
approved is not flagged ``executed_against_policy``, any other completed ask still is."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.signer_harness import AsyncConnection, register, request_id, running_signer

ASK_COMMAND = "sudo ls /root"  # TK-A001 in the default pack: ask


def error_code(reply: dict) -> str | None:
    return reply.get("error", {}).get("code")


def approval_id() -> str:
    return "apr-" + os.urandom(8).hex()


def answer_value(decision_id: str, answer: str = "approve", **changes: Any) -> dict[str, Any]:
    return {"approval_id": approval_id(), "decision_id": decision_id, "answer": answer, "by": "uid 1000 (alice)",
            "reason": "", **changes}


async def decide(connection: AsyncConnection, run: dict[str, str], command: str = ASK_COMMAND) -> dict:
    reply = await connection.call("decide", request_id=request_id(), **run, tool="Bash", args={"command": command})
    assert "error" not in reply, reply
    return reply


async def answer(connection: AsyncConnection, run: dict[str, str], value: Any, *, trust: str = "trusted",
                 rid: str | None = None) -> dict:
    return await connection.call("observe", request_id=rid or request_id(), **run, source="tkbox.approval",
                                 trust=trust, value=value, must_keep=True)


async def complete(connection: AsyncConnection, run: dict[str, str], decision_id: str) -> dict:
    return await connection.call("complete", request_id=request_id(), **run, decision_id=decision_id, status="ok",
                                 exit_code=0)


async def run_records(connection: AsyncConnection, run: dict[str, str]) -> list[dict]:
    return (await connection.call("read", **run))["records"]


async def test_an_approved_ask_is_recorded_with_its_decision_and_answer_and_completes_without_a_gap(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        asked = await decide(connection, run)
        assert asked["decision"] == "ask"
        value = answer_value(asked["decision_id"], by="uid 1000 (alice-the-operator)", reason="needed-for-the-build")
        recorded = await answer(connection, run, value)
        assert "error" not in recorded, recorded
        await complete(connection, run, asked["decision_id"])
        records = await run_records(connection, run)
        assert [item["type"] for item in records[-3:]] == ["policy.decision", "input.observed", "tool.result"]
        data = records[-2]["event"]["data"]
        assert {name: data[name] for name in ("source", "trust", "must_keep", "approval_id", "decision_id", "answer")} == {
            "source": "tkbox.approval", "trust": "trusted", "must_keep": True, "approval_id": value["approval_id"],
            "decision_id": asked["decision_id"], "answer": "approve"}
        assert data["output"]["hash"].startswith("hmac-sha256:")  # the value itself is committed, as any observation
        log_bytes = (signer.paths.store_dir / "log.jsonl").read_bytes()
        assert b"alice-the-operator" not in log_bytes and b"needed-for-the-build" not in log_bytes
        await connection.close()


@pytest.mark.parametrize("given", ["reject", "expire", "withdraw", "lost", None])
async def test_a_completed_ask_that_was_not_approved_is_still_flagged(tmp_path, given):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        asked = await decide(connection, run)
        if given is not None:
            assert "error" not in await answer(connection, run, answer_value(asked["decision_id"], given))
        await complete(connection, run, asked["decision_id"])
        records = await run_records(connection, run)
        assert [item["type"] for item in records[-2:]] == ["tool.result", "capture.gap"]
        assert records[-1]["event"]["data"] == {"kind": "executed_against_policy", "decision_id": asked["decision_id"]}
        await connection.close()


async def _refused(signer, connection, run, value, code, *, trust="trusted", words=()):  # type: ignore[no-untyped-def]
    before = signer.service.store.size
    reply = await answer(connection, run, value, trust=trust)
    assert error_code(reply) == code, reply
    for word in words:
        assert word in reply["error"]["message"]
    assert signer.service.store.size == before  # a refusal records nothing


@pytest.mark.parametrize(("change", "words"), [
    (lambda v: {k: x for k, x in v.items() if k != "reason"}, ["lacks reason"]),
    (lambda v: {**v, "extra": 1}, ["unknown field", "'extra'"]),
    (lambda v: {**v, "answer": "maybe"}, ["answer must be one of"]),
    (lambda v: {**v, "approval_id": "apr-" + "A" * 16}, ["approval_id"]),
    (lambda v: {**v, "approval_id": "apr-0123456789abcdef\n"}, ["approval_id"]),
    (lambda v: {**v, "decision_id": v["decision_id"].upper()}, ["decision_id"]),
    (lambda v: {**v, "by": "x" * 257}, ["by", "256"]),
    (lambda v: {**v, "reason": "x" * 1025}, ["reason", "1024"]),
    (lambda v: {**v, "by": 1000}, ["by"]),
    (lambda v: [v], ["must be an object"]),
])
async def test_a_value_not_of_its_one_shape_is_an_invalid_request(tmp_path, change, words):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        asked = await decide(connection, run)
        await _refused(signer, connection, run, change(answer_value(asked["decision_id"])), "invalid_request",
                       words=words)
        await connection.close()


async def test_an_untrusted_approval_is_refused(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        asked = await decide(connection, run)
        await _refused(signer, connection, run, answer_value(asked["decision_id"]), "invalid_request",
                       trust="untrusted", words=["must be trusted"])
        await connection.close()


async def test_an_answer_needs_an_ask_decision_of_its_own_run(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run, other = await register(connection), await register(connection)
        elsewhere = await decide(connection, other)
        await _refused(signer, connection, run, answer_value(elsewhere["decision_id"]), "unknown_decision")
        await _refused(signer, connection, run, answer_value("dec-" + "0" * 32), "unknown_decision")
        allowed = await decide(connection, run, "ls -la")
        denied = await decide(connection, run, "rm -rf /")
        assert (allowed["decision"], denied["decision"]) == ("allow", "deny")
        for decision in (allowed, denied):
            await _refused(signer, connection, run, answer_value(decision["decision_id"]), "decision_not_ask",
                           words=[decision["verdict"]])
        await connection.close()


async def test_a_completed_ask_cannot_be_answered_afterwards(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        asked = await decide(connection, run)
        await complete(connection, run, asked["decision_id"])
        await _refused(signer, connection, run, answer_value(asked["decision_id"]), "decision_consumed")
        await connection.close()


async def test_a_decision_and_an_approval_id_are_answered_once(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        first, second = await decide(connection, run), await decide(connection, run)
        value = answer_value(first["decision_id"], "reject")
        assert "error" not in await answer(connection, run, value)
        await _refused(signer, connection, run, answer_value(first["decision_id"]), "approval_answered",
                       words=["answered reject already"])
        await _refused(signer, connection, run, {**value, "decision_id": second["decision_id"], "answer": "approve"},
                       "approval_answered", words=[value["approval_id"]])
        await connection.close()


async def test_a_retried_answer_gets_its_first_reply_and_records_nothing_more(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        asked = await decide(connection, run)
        value, rid = answer_value(asked["decision_id"]), request_id()
        first = await answer(connection, run, value, rid=rid)
        size = signer.service.store.size
        assert await answer(connection, run, value, rid=rid) == first
        assert signer.service.store.size == size
        await connection.close()


async def test_a_held_run_records_refusals_but_no_approve(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        first, second = await decide(connection, run), await decide(connection, run)
        await connection.call("hold", request_id=request_id(), run_id=run["run_id"], reason="looking")
        await _refused(signer, connection, run, answer_value(first["decision_id"]), "run_contained", words=["held"])
        assert "error" not in await answer(connection, run, answer_value(second["decision_id"], "reject"))
        await connection.call("release", request_id=request_id(), run_id=run["run_id"])
        assert "error" not in await answer(connection, run, answer_value(first["decision_id"]))
        await connection.close()


async def test_a_closed_run_takes_no_answer(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        asked = await decide(connection, run)
        await connection.call("close_run", request_id=request_id(), **run)
        await _refused(signer, connection, run, answer_value(asked["decision_id"]), "run_closed")
        await connection.close()


async def test_answers_survive_a_signer_restart(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        approved, rejected, fresh = [await decide(connection, run) for _ in range(3)]
        used = answer_value(approved["decision_id"])
        assert "error" not in await answer(connection, run, used)
        assert "error" not in await answer(connection, run, answer_value(rejected["decision_id"], "reject"))
        await connection.close()
    async with running_signer(tmp_path) as signer:  # the same store, replayed
        connection = await signer.connect()
        await _refused(signer, connection, run, answer_value(approved["decision_id"], "reject"), "approval_answered")
        await _refused(signer, connection, run, {**used, "decision_id": fresh["decision_id"]}, "approval_answered")
        for decision, gaps in ((approved, 0), (rejected, 1)):
            await complete(connection, run, decision["decision_id"])
            tail = [item["type"] for item in (await run_records(connection, run))[-2:]]
            assert tail.count("capture.gap") == gaps
        await connection.close()
