"""The daemon's signer connection (``signer_link.AsyncSignerClient``) against a scripted peer on a real Unix
socket: replies go to calls in order, and anything that breaks the pairing (a lost connection, an answer nobody
asked for, a line over the limit, a line that is not a JSON object) fails every call in flight as
``SignerUnreachable``; the next call connects again."""

from __future__ import annotations

import asyncio
import json

import pytest

from tkbox_daemon.signer_link import (
    MAX_REPLY_BYTES,
    AsyncSignerClient,
    SignerCallError,
    SignerUnreachable,
)


class ScriptedSigner:
    """Reads request lines; ``answer(request)`` gives the bytes to send back (or None: say nothing)."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.requests: list[dict] = []
        self.got_request = asyncio.Event()
        self.connections = 0
        self.server: asyncio.AbstractServer | None = None

    async def start(self, path) -> ScriptedSigner:
        self.server = await asyncio.start_unix_server(self._serve, path=str(path))
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while line := await reader.readline():
                request = json.loads(line)
                self.requests.append(request)
                self.got_request.set()
                reply = self.answer(request)
                if reply == b"close":
                    break
                if reply is not None:
                    writer.write(reply)
                    await writer.drain()
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def _echo(request: dict) -> bytes:
    return json.dumps({"echo": request["n"]}).encode() + b"\n"


async def test_pipelined_calls_get_their_own_replies_in_order(tmp_path):
    held: list[dict] = []

    def answer_in_twos(request: dict) -> bytes | None:  # two replies in one write, the second request's first
        held.append(request)
        if len(held) < 2:
            return None
        return b"".join(_echo(r) for r in held[:2])

    signer = await ScriptedSigner(answer_in_twos).start(tmp_path / "s.sock")
    client = AsyncSignerClient(tmp_path / "s.sock")
    replies = await asyncio.gather(client.call("decide", n=1), client.call("decide", n=2))
    assert replies == [{"echo": 1}, {"echo": 2}]
    assert [r["method"] for r in signer.requests] == ["decide", "decide"]
    await client.close()
    await signer.stop()


async def test_an_error_answer_is_a_call_error_and_the_connection_stays(tmp_path):
    def answer(request: dict) -> bytes:
        if request["n"] == 1:
            return b'{"error":{"code":"quota_exceeded","message":"too many"}}\n'
        return _echo(request)

    signer = await ScriptedSigner(answer).start(tmp_path / "s.sock")
    client = AsyncSignerClient(tmp_path / "s.sock")
    with pytest.raises(SignerCallError) as raised:
        await client.call("decide", n=1)
    assert raised.value.code == "quota_exceeded" and not isinstance(raised.value, SignerUnreachable)
    assert await client.call("decide", n=2) == {"echo": 2}
    assert signer.connections == 1
    await client.close()
    await signer.stop()


@pytest.mark.parametrize(("reply", "reason"), [
    (b"close", "closed the connection"),
    (b"[1,2]\n", "expected a JSON object"),
    (b'{"a":1,"a":2}\n', "the signer connection failed"),
    (b"x" * (MAX_REPLY_BYTES + 10), "over"),
    (b'{"a":"' + b"x" * MAX_REPLY_BYTES + b'"}\n', "over"),
])
async def test_a_broken_reply_fails_every_call_in_flight_and_the_next_call_reconnects(tmp_path, reply, reason):
    state = {"broken": False}

    def answer(request: dict) -> bytes | None:
        if request["n"] == 2 and not state["broken"]:
            state["broken"] = True
            return reply
        return _echo(request) if request["n"] >= 3 else None

    signer = await ScriptedSigner(answer).start(tmp_path / "s.sock")
    client = AsyncSignerClient(tmp_path / "s.sock")
    first = asyncio.ensure_future(client.call("decide", n=1))  # never answered before the break
    second = asyncio.ensure_future(client.call("decide", n=2))
    for call in (first, second):
        with pytest.raises(SignerUnreachable) as raised:
            await call
        assert reason in raised.value.message
    assert await client.call("decide", n=3) == {"echo": 3}
    assert signer.connections == 2
    await client.close()
    await signer.stop()


async def test_an_answer_nobody_asked_for_ends_the_connection(tmp_path):
    def answer(request: dict) -> bytes | None:
        if request["n"] == 2:
            return _echo({"n": 1}) + _echo(request) + b'{"extra":true}\n'
        return _echo(request) if request["n"] >= 3 else None

    signer = await ScriptedSigner(answer).start(tmp_path / "s.sock")
    client = AsyncSignerClient(tmp_path / "s.sock")
    assert await asyncio.gather(client.call("decide", n=1), client.call("decide", n=2)) == [{"echo": 1}, {"echo": 2}]
    connection = client._connection
    assert connection is not None
    await asyncio.wait_for(asyncio.shield(connection.closed), 5)
    assert "nobody asked for" in connection.lost_because
    assert await client.call("decide", n=3) == {"echo": 3}
    assert signer.connections == 2
    await client.close()
    await signer.stop()


async def test_no_signer_is_unreachable_with_the_fix(tmp_path):
    client = AsyncSignerClient(tmp_path / "absent.sock")
    with pytest.raises(SignerUnreachable) as raised:
        await client.call("hello")
    assert "tkbox signer up" in raised.value.message


async def test_close_fails_the_calls_still_waiting(tmp_path):
    signer = await ScriptedSigner(lambda request: None).start(tmp_path / "s.sock")
    client = AsyncSignerClient(tmp_path / "s.sock")
    waiting = asyncio.ensure_future(client.call("decide", n=1))
    await asyncio.wait_for(signer.got_request.wait(), 10)
    await client.close()
    with pytest.raises(SignerUnreachable):
        await waiting
    await signer.stop()
