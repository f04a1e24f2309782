"""The signer server's replies on one connection: every request answered once, in the order sent, even past the
pipelining bound, when a handler fails, and when the caller reads its replies only after sending everything."""

from __future__ import annotations

import asyncio
import json

from tests.signer_harness import AsyncConnection, running_signer
from tkbox_daemon.signer import server as signer_server

GUARD_SECONDS = 60  # a reply that never comes fails the test instead of hanging it (not a measure of speed)


def preview(n: int) -> bytes:
    return json.dumps({"method": "preview", "tool": f"tool{n}", "args": {"command": f"echo {n}"}}).encode() + b"\n"


async def replies(connection: AsyncConnection, count: int) -> list[dict]:
    async with asyncio.timeout(GUARD_SECONDS):
        return [await connection.reply() for _ in range(count)]


async def test_more_requests_than_the_pipelining_bound_sent_unread_are_all_answered_in_order(tmp_path):
    count = signer_server.MAX_PIPELINED * 12  # ~1 MB of replies: past the bound and past the socket's buffers
    async with running_signer(tmp_path, durable=False) as signer:
        connection = await signer.connect()
        connection.writer.write(b"".join(preview(n) for n in range(count)))  # nothing is read until all is sent
        await connection.writer.drain()
        answers = await replies(connection, count)
        assert [reply["tool"] for reply in answers] == [f"tool{n}" for n in range(count)]
        assert (await connection.call("hello"))["signer"] == "tkbox-signer"  # the connection is still served
        await connection.close()


async def test_a_failing_handler_is_answered_in_its_place_and_the_rest_still_in_order(tmp_path, monkeypatch):
    async with running_signer(tmp_path, durable=False) as signer:
        handle = signer.service.handle

        async def handle_or_fail(identity, request):
            if request.get("tool") == "tool3":
                raise RuntimeError("boom")
            return await handle(identity, request)

        monkeypatch.setattr(signer.service, "handle", handle_or_fail)
        connection = await signer.connect()
        await connection.send_line(b"".join(preview(n) for n in range(6)) + b"not json\n" + preview(6))
        answers = await replies(connection, 8)
        assert [reply.get("tool") for reply in answers] == ["tool0", "tool1", "tool2", None, "tool4", "tool5", None,
                                                            "tool6"]
        assert answers[3]["error"]["code"] == "unavailable" and "RuntimeError: boom" in answers[3]["error"]["message"]
        assert answers[6]["error"]["code"] == "invalid_request"
        await connection.close()


async def test_replies_still_owed_are_sent_before_the_server_closes_the_connection(tmp_path):
    async with running_signer(tmp_path, durable=False) as signer:
        connection = await signer.connect()
        connection.writer.write(b"".join(preview(n) for n in range(20)))
        connection.writer.write_eof()  # the caller is done sending: the server still owes 20 replies
        answers = await replies(connection, 20)
        assert [reply["tool"] for reply in answers] == [f"tool{n}" for n in range(20)]
        assert await connection.reply() is None  # then the server closes
        await connection.close()


async def test_no_more_than_the_pipelining_bound_is_taken_in_before_the_oldest_is_answered(tmp_path, monkeypatch):
    monkeypatch.setattr(signer_server, "MAX_PIPELINED", 4)
    async with running_signer(tmp_path, durable=False) as signer:
        handle, release, four_taken, taken = signer.service.handle, asyncio.Event(), asyncio.Event(), []

        async def held_handle(identity, request):
            taken.append(request["tool"])
            if len(taken) == 4:
                four_taken.set()
            await release.wait()
            return await handle(identity, request)

        monkeypatch.setattr(signer.service, "handle", held_handle)
        connection = await signer.connect()
        await connection.send_line(b"".join(preview(n) for n in range(10)))
        try:
            async with asyncio.timeout(GUARD_SECONDS):
                await four_taken.wait()
            for _ in range(100):  # every line is already in the server's buffer: unbounded, it would take them all
                await asyncio.sleep(0)
            assert taken == ["tool0", "tool1", "tool2", "tool3"]
        finally:
            release.set()
        answers = await replies(connection, 10)
        assert [reply["tool"] for reply in answers] == [f"tool{n}" for n in range(10)]
        await connection.close()


async def test_a_slow_first_request_holds_back_the_replies_after_it(tmp_path, monkeypatch):
    async with running_signer(tmp_path, durable=False) as signer:
        handle, release, later_done = signer.service.handle, asyncio.Event(), asyncio.Event()

        async def slow_first(identity, request):
            if request["tool"] == "tool0":
                await release.wait()
            reply = await handle(identity, request)
            if request["tool"] == "tool3":
                later_done.set()
            return reply

        monkeypatch.setattr(signer.service, "handle", slow_first)
        connection = await signer.connect()
        await connection.send_line(b"".join(preview(n) for n in range(4)))
        try:
            async with asyncio.timeout(GUARD_SECONDS):
                await later_done.wait()  # the three after it are answered first
            for _ in range(10):  # and their done callbacks have run
                await asyncio.sleep(0)
        finally:
            release.set()
        answers = await replies(connection, 4)
        assert [reply.get("tool") for reply in answers] == ["tool0", "tool1", "tool2", "tool3"]
        await connection.close()
