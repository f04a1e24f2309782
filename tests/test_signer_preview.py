"""The signer's ``preview``: the policy's verdict for a tool call, with nothing recorded (what a dry run shows)."""

from __future__ import annotations

from tests.signer_harness import running_signer


async def test_preview_answers_as_decide_would_and_records_nothing(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        before = (await connection.call("status"))["records"]
        steering = await connection.call("preview", tool="Write", args={"file_path": ".github/workflows/ci.yml"})
        plain = await connection.call("preview", tool="Write", args={"file_path": "src/app.py"})
        build = await connection.call("preview", tool="Write", args={"file_path": "sub/Makefile"})
        assert steering["verdict"] == "ask" and "TK-A002" in steering["rule_ids"] and steering["recorded"] is False
        assert steering["hint"] and steering["tool_class"] == "fs"
        assert plain["verdict"] == "allow" and plain["rule_ids"] == []
        assert build["verdict"] == "flag" and build["rule_ids"] == ["TK-F008"]
        assert (await connection.call("status"))["records"] == before
        await connection.close()


async def test_preview_keeps_the_closed_schema(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        reply = await connection.call("preview", tool="Write", args={"file_path": "x"}, request_id="r1")
        assert reply["error"]["code"] == "invalid_request" and "request_id" in reply["error"]["message"]
        reply = await connection.call("preview", tool="Write", args=["x"])
        assert reply["error"]["code"] == "invalid_request" and "'args'" in reply["error"]["message"]
        await connection.close()
