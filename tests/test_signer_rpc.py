"""The signer's RPC contract over a real Unix socket: framing, schemas, tokens, idempotency, ordering, containment."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from tests.signer_harness import register, request_id, running_signer
from tkbox_daemon import strictjson
from tkbox_daemon.signer.rpc_schema import MAX_LINE_BYTES


def error_code(reply: dict) -> str | None:
    return reply.get("error", {}).get("code")


async def test_hello_and_status_name_the_caller_from_the_socket(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        hello = await connection.call("hello")
        assert hello["identity"] == "uid:0" and hello["proto"] == [1, 1]
        status = await connection.call("status")
        assert status["store"]["state"] == "ok"
        assert status["records"] == 2  # signer.epoch and signer.started
        assert status["assurance"] == "dev" and status["isolation"] == "same-user"
        await connection.close()


@pytest.mark.parametrize(
    "line, code",
    [
        (b'{"method":"hello","method":"status"}\n', "invalid_request"),  # duplicate key
        (b'{"method":"status","x":NaN}\n', "invalid_request"),
        (b"[1,2]\n", "invalid_request"),
        (b"not json\n", "invalid_request"),
        (b'{"method":"status","extra":1}\n', "invalid_request"),  # closed schema
        (b'{"method":"nope"}\n', "invalid_request"),
        (b'{"method":"decide","request_id":"r1"}\n', "invalid_request"),  # missing fields
        (b'{"method":"status","n":1.5}\n', "invalid_request"),
    ],
)
async def test_a_bad_line_gets_an_error_and_the_connection_stays_open(tmp_path, line, code):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        await connection.send_line(line)
        reply = await connection.reply()
        assert error_code(reply) == code and reply["error"]["message"]
        assert "pid" in await connection.call("hello")
        await connection.close()


async def test_an_oversize_line_is_refused_with_a_word_then_closed(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        await connection.send_line(b'{"method":"status","pad":"' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n')
        reply = await connection.reply()
        assert error_code(reply) == "quota_exceeded"
        assert await connection.reply() is None
        await connection.close()


async def test_a_refused_uid_gets_unauthenticated_and_a_close(tmp_path):
    async with running_signer(tmp_path, allowed_uids={12345}) as signer:
        connection = await signer.connect()
        reply = await connection.reply()
        assert error_code(reply) == "unauthenticated"
        assert await connection.reply() is None


async def test_decisions_follow_the_default_pack(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        allowed = await connection.call("decide", request_id=request_id(), **run, tool="Bash",
                                        args={"command": "ls -la"})
        assert allowed["decision"] == "allow" and allowed["decision_id"].startswith("dec-")
        denied = await connection.call("decide", request_id=request_id(), **run, tool="Bash",
                                       args={"command": f"kill -9 {__import__('os').getpid()}"})
        assert denied["decision"] == "deny" and "TK-D007" in denied["rule_ids"] and denied["incident"] is True
        flagged = await connection.call("decide", request_id=request_id(), **run, tool="WebFetch",
                                        args={"url": "https://example.com:443"})
        assert flagged["decision"] == "allow" and flagged["verdict"] == "flag" and "TK-F002" in flagged["rule_ids"]
        await connection.close()


async def test_requests_are_answered_in_the_order_sent_and_logged_in_that_order(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        ids = [request_id() for _ in range(50)]
        lines = b"".join(
            json.dumps({"method": "decide", "request_id": rid, **run, "tool": "Bash",
                        "args": {"command": f"echo {n}"}}).encode() + b"\n"
            for n, rid in enumerate(ids)
        )
        await connection.send_line(lines)
        replies = [await connection.reply() for _ in ids]
        run_seqs = [reply["run_seq"] for reply in replies]
        assert run_seqs == sorted(run_seqs) and len(set(run_seqs)) == 50
        await connection.close()


async def test_a_retried_request_id_gets_the_original_reply_and_another_payload_a_conflict(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        rid = request_id()
        first = await connection.call("decide", request_id=rid, **run, tool="Bash", args={"command": "ls"})
        again = await connection.call("decide", request_id=rid, **run, tool="Bash", args={"command": "ls"})
        assert again == first
        other = await connection.call("decide", request_id=rid, **run, tool="Bash", args={"command": "pwd"})
        assert error_code(other) == "conflict"
        records_before = signer.service.store.size
        await connection.call("decide", request_id=rid, **run, tool="Bash", args={"command": "ls"})
        assert signer.service.store.size == records_before  # a retry records nothing new
        await connection.close()


async def test_run_tokens_are_bound_to_run_and_expire(tmp_path):
    now = [1_800_000_000.0]
    async with running_signer(tmp_path, clock=lambda: now[0]) as signer:
        connection = await signer.connect()
        run_a = await register(connection)
        run_b = await register(connection)
        crossed = await connection.call("decide", request_id=request_id(), run_id=run_a["run_id"],
                                        run_token=run_b["run_token"], tool="Bash", args={"command": "ls"})
        assert error_code(crossed) == "run_token_invalid"
        forged = run_a["run_token"][:-2] + ("AA" if not run_a["run_token"].endswith("AA") else "BB")
        bad = await connection.call("decide", request_id=request_id(), run_id=run_a["run_id"], run_token=forged,
                                    tool="Bash", args={"command": "ls"})
        assert error_code(bad) == "run_token_invalid"
        now[0] += 24 * 3600 + 1
        expired = await connection.call("decide", request_id=request_id(), **run_a, tool="Bash",
                                        args={"command": "ls"})
        assert error_code(expired) == "run_token_invalid" and "expired" in expired["error"]["message"]
        await connection.close()


async def test_complete_checks_the_decision_and_its_args(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        args = {"command": "make test"}
        decision = await connection.call("decide", request_id=request_id(), **run, tool="Bash", args=args)
        wrong = "sha256:" + hashlib.sha256(b"other").hexdigest()
        mismatch = await connection.call("complete", request_id=request_id(), **run,
                                         decision_id=decision["decision_id"], status="ok", args_digest=wrong)
        assert error_code(mismatch) == "args_mismatch"
        right = "sha256:" + hashlib.sha256(strictjson.canonical({"tool": "Bash", "args": args})).hexdigest()
        done = await connection.call("complete", request_id=request_id(), **run, decision_id=decision["decision_id"],
                                     status="ok", exit_code=0, args_digest=right)
        assert "run_seq" in done
        twice = await connection.call("complete", request_id=request_id(), **run,
                                      decision_id=decision["decision_id"], status="ok")
        assert error_code(twice) == "decision_consumed"
        unknown = await connection.call("complete", request_id=request_id(), **run,
                                        decision_id="dec-" + "0" * 32, status="ok")
        assert error_code(unknown) == "unknown_decision"
        await connection.close()


async def test_completing_a_denied_call_is_recorded_as_a_gap(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        denied = await connection.call("decide", request_id=request_id(), **run, tool="Bash",
                                       args={"command": "rm -rf /"})
        assert denied["decision"] == "deny"
        await connection.call("complete", request_id=request_id(), **run, decision_id=denied["decision_id"],
                              status="ok", exit_code=0)
        records = await connection.call("read", **run)
        kinds = [item["type"] for item in records["records"]]
        assert kinds[-2:] == ["tool.result", "capture.gap"]
        assert records["records"][-1]["event"]["data"]["kind"] == "executed_against_policy"
        await connection.close()


async def test_hold_denies_decisions_release_restores_and_quarantine_is_final(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        held = await connection.call("hold", request_id=request_id(), run_id=run["run_id"], reason="looking")
        assert held["state"] == "held"
        assert (await connection.call("containment", **run))["state"] == "held"
        denied = await connection.call("decide", request_id=request_id(), **run, tool="Bash", args={"command": "ls"})
        assert denied["decision"] == "deny" and denied["rule_ids"][0] == "TK-CONTAINED"
        await connection.call("release", request_id=request_id(), run_id=run["run_id"])
        allowed = await connection.call("decide", request_id=request_id(), **run, tool="Bash", args={"command": "ls"})
        assert allowed["decision"] == "allow"
        await connection.call("quarantine", request_id=request_id(), run_id=run["run_id"], reason="incident")
        refused = await connection.call("release", request_id=request_id(), run_id=run["run_id"])
        assert error_code(refused) == "invalid_request"
        assert (await connection.call("containment", run_id=run["run_id"]))["state"] == "quarantined"
        await connection.close()


@pytest.mark.parametrize(("reason", "said"), [
    ("", "run is held by the operator"),
    (":", "run is held by the operator: :"),
    ("wait for: ", "run is held by the operator: wait for: "),
])
async def test_a_held_runs_denials_carry_the_operators_reason_whole(tmp_path, reason, said):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        await connection.call("hold", request_id=request_id(), run_id=run["run_id"], reason=reason)
        denied = await connection.call("decide", request_id=request_id(), **run, tool="Bash", args={"command": "ls"})
        assert denied["reason"] == said
        await connection.close()


async def test_observations_store_a_commitment_never_the_value(tmp_path):
    secret_text = "the-value-must-not-be-stored-4242"
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        await connection.call("observe", request_id=request_id(), **run, source="tkbox.task", trust="trusted",
                              value={"task": secret_text})
        await connection.call("decide", request_id=request_id(), **run, tool="Bash",
                              args={"command": f"echo {secret_text}"})
        closed = await connection.call("close_run", request_id=request_id(), **run)
        assert closed["state"] == "closed" and closed["checkpoint_size"] == signer.service.store.size
        log_bytes = (signer.paths.store_dir / "log.jsonl").read_bytes()
        assert secret_text.encode() not in log_bytes
        after = await connection.call("decide", request_id=request_id(), **run, tool="Bash", args={"command": "ls"})
        assert error_code(after) == "run_closed"
        await connection.close()


async def test_two_clients_at_once_share_one_consistent_log(tmp_path):
    async with running_signer(tmp_path) as signer:
        async def client(tag: str) -> list[int]:
            connection = await signer.connect()
            run = await register(connection)
            seqs = []
            for n in range(30):
                reply = await connection.call("decide", request_id=request_id(), **run, tool="Bash",
                                              args={"command": f"echo {tag}{n}"})
                seqs.append(reply["run_seq"])
            await connection.close()
            return seqs

        first, second = await asyncio.gather(client("a"), client("b"))
        assert first == list(range(1, 31)) and second == list(range(1, 31))
        assert signer.service.store.size == 2 + 2 * 31


@pytest.mark.parametrize("field, value", [("request_id", "req-1\n"), ("request_id", "req\u0661")])
async def test_identifiers_with_a_trailing_newline_or_non_ascii_digits_are_refused(tmp_path, field, value):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        reply = await connection.call("register_run", agent={"name": "x"}, **{field: value})
        assert error_code(reply) == "invalid_request" and field in reply["error"]["message"]
        await connection.close()
