"""The host's agent channel under a slow reader and a slow guest: output credit per exec, a deadline on every
request, and late answers to abandoned requests (issue 8: a slow client once got an honest box accused of a
protocol error and failed)."""

from __future__ import annotations

import asyncio
import contextlib
import struct

import pytest

from tests.fake_guest import WAIT, StubBox, linked, start_exec
from tkbox_daemon import limits
from tkbox_daemon.boxes.exec_session import ExecSession, ExecStart
from tkbox_daemon.boxes.guest_link import CREDIT_BATCH, STDERR, STDOUT, GuestFailure, GuestTimeout
from tkbox_daemon.tasks import spawn
from tkbox_guest import protocol as P

WINDOW = P.OUTPUT_WINDOW


# -- output credit ---------------------------------------------------------------------------------------------


async def test_a_reader_that_does_not_read_holds_back_only_its_own_exec():
    async with linked() as pair:
        slow = await start_exec(pair)
        other = await start_exec(pair)
        # The slow exec's whole window, in far more frames than any per-frame queue would hold: nobody reads them.
        for _ in range(WINDOW // 512):
            pair.guest.output(slow.id, b"s" * 512)
        await pair.ping()
        pair.guest.output(other.id, b"hello", P.STDERR)
        pair.guest.exit(other.id, 3)
        assert await asyncio.wait_for(other.next_output(), WAIT) == (STDERR, b"hello")
        assert (await asyncio.wait_for(other.next_output(), WAIT))["exit_code"] == 3
        assert slow.output.queued == WINDOW and pair.link.failure is None


async def test_credit_goes_back_as_the_reader_takes_output_and_more_than_the_window_is_a_protocol_error():
    async with linked() as pair:
        handle = await start_exec(pair)
        pair.guest.output(handle.id, b"a" * WINDOW)
        released = 0
        while released < CREDIT_BATCH:  # credit goes back a quarter of the window at a time
            await pair.ping()
            assert pair.guest.output_acks.get(handle.id, 0) == 0
            stream, chunk = await asyncio.wait_for(handle.next_output(), WAIT)
            assert (stream, len(chunk)) == (STDOUT, P.MAX_OUTPUT_CHUNK)
            handle.release_output(len(chunk))
            released += len(chunk)
        assert await pair.guest.acked_at_least(handle.id, released) == released
        pair.guest.output(handle.id, b"b" * released)  # exactly the credit given back: fine
        await pair.ping()
        assert pair.link.failure is None
        pair.guest.output(handle.id, b"c")  # one byte more than granted: a hostile guest
        reason = await pair.failure()
        assert "beyond its window" in reason and f"exec {handle.id}" in reason


async def test_output_keeps_its_order_across_streams_and_chunks():
    async with linked() as pair:
        handle = await start_exec(pair)
        sent = [(P.STDOUT, b"o1"), (P.STDOUT, b"o2"), (P.STDERR, b"e1"), (P.STDOUT, b"o3" * 40_000)]
        for kind, data in sent:
            pair.guest.output(handle.id, data, kind)
        pair.guest.exit(handle.id)
        seen: list[tuple[int, bytes]] = []
        while isinstance(item := await asyncio.wait_for(handle.next_output(), WAIT), tuple):
            seen.append(item)
            handle.release_output(len(item[1]))
        assert seen[:2] == [(STDOUT, b"o1o2"), (STDERR, b"e1")]  # same-stream frames merged, order kept
        assert b"".join(chunk for _, chunk in seen[2:]) == b"o3" * 40_000
        assert all(len(chunk) <= P.MAX_OUTPUT_CHUNK for _, chunk in seen)
        assert item["exit_code"] == 0 and pair.link.failure is None


async def test_an_empty_output_frame_is_a_protocol_error():
    async with linked() as pair:
        handle = await start_exec(pair)
        pair.guest.write(struct.pack(">BI", P.STDOUT, 4) + P.pack_id(handle.id))
        assert "shorter than 5" in await pair.failure()


async def test_an_exec_session_gives_credit_as_its_client_reads_and_all_of_it_once_the_client_is_gone():
    async with linked() as pair:
        session = ExecSession(StubBox(pair.link), ExecStart(argv=("yes",), cwd="/tmp"))
        starting = spawn(session.start(), name="test-session")
        request = await pair.guest.next_request("exec")
        pair.guest.respond(request["id"], pid=99)
        await asyncio.wait_for(starting, WAIT)
        ident = request["id"]
        pair.guest.output(ident, b"y\n" * (WINDOW // 2))  # the whole window
        outputs = session.outputs()
        read = 0
        while read < CREDIT_BATCH:  # the client reads a quarter of the window
            stream, chunk = await asyncio.wait_for(anext(outputs), WAIT)
            read += len(chunk)
        assert await pair.guest.acked_at_least(ident, read) == read
        await pair.ping()
        assert pair.guest.output_acks[ident] == read  # and only that: the rest waits for the client
        aborting = spawn(session.abort(), name="test-abort")  # the client goes away
        kill = await pair.guest.next_request("signal")
        assert kill["target"] == ident and kill["signal"] == 9
        assert await pair.guest.acked_at_least(ident, WINDOW) == WINDOW  # everything dropped is credit again
        pair.guest.respond(kill["id"])
        await asyncio.wait_for(aborting, WAIT)
        pair.guest.exit(ident, 137)
        await asyncio.wait_for(session.done.wait(), WAIT)
        assert "exec.finished" in session.box.events and pair.link.failure is None


# -- deadlines and abandoned requests ---------------------------------------------------------------------------


async def test_a_cancelled_signal_whose_answer_comes_late_does_not_fail_the_link_and_is_counted():
    async with linked() as pair:
        handle = await start_exec(pair)
        signalling = spawn(handle.signal(9), name="test-signal")
        request = await pair.guest.next_request("signal")
        signalling.cancel()  # what ExecSession.abort's bounded wait did when the read loop was stalled
        with contextlib.suppress(asyncio.CancelledError):
            await signalling
        pair.guest.respond(request["id"])
        await pair.ping()
        assert pair.link.failure is None and pair.link.late_replies == 1


async def test_a_request_past_its_deadline_raises_guest_timeout_naming_op_id_and_limit_and_its_late_data_is_dropped():
    async with linked() as pair:
        diff = spawn(pair.link.request("diff", data_limit=1000, timeout=0.05), name="test-diff")
        request = await pair.guest.next_request("diff")
        with pytest.raises(GuestTimeout) as timed_out:
            await asyncio.wait_for(diff, WAIT)
        error = timed_out.value
        assert str(error) == f"the guest did not answer diff (request {request['id']}) within 0.05 s"
        assert isinstance(error, GuestFailure) and isinstance(error, TimeoutError)
        assert (error.op, error.ident, error.limit) == ("diff", request["id"], 0.05)
        pair.guest.write(P.encode_id_frame(P.DATA, request["id"], b"x" * 5000))  # even past its data limit
        pair.guest.respond(request["id"], size=5000, sha256="sha256:" + "0" * 64, files=[], files_truncated=False)
        await pair.ping()
        assert pair.link.failure is None and pair.link.late_replies == 2 and pair.link.timeouts == 1


async def test_every_op_has_its_deadline_from_the_limits_table(monkeypatch):
    assert set(limits.GUEST_REQUEST_DEADLINES) == set(P.OPS)
    monkeypatch.setitem(limits.GUEST_REQUEST_DEADLINES, "ping",
                        limits.Limit("guest_ping_deadline", 0.02, "seconds", "test", "fixed"))  # type: ignore[arg-type]
    async with linked() as pair:
        with pytest.raises(GuestTimeout, match=r"did not answer ping \(request 1\) within 0.02 s"):
            await pair.link.request("ping")


async def test_an_id_never_issued_is_still_a_protocol_error():
    async with linked() as pair:
        pair.guest.respond(999)
        assert await pair.failure() == "the guest broke the protocol: RESPONSE for id 999, which has no request waiting"


async def test_a_second_answer_to_an_abandoned_request_is_a_protocol_error():
    async with linked() as pair:
        with pytest.raises(GuestTimeout):
            await pair.link.request("ping", timeout=0)
        request = await pair.guest.next_request("ping")
        pair.guest.respond(request["id"])
        pair.guest.respond(request["id"])
        assert "RESPONSE for id 1" in await pair.failure()


async def test_abandoned_ids_are_remembered_within_a_bound_and_never_reused_meanwhile():
    async with linked(abandoned_memory=2) as pair:
        for _ in range(3):
            with pytest.raises(GuestTimeout):
                await pair.link.request("ping", timeout=0)
        first, second, third = [(await pair.guest.next_request("ping"))["id"] for _ in range(3)]
        pair.link._next_id = second  # as after the ids wrapped around: the abandoned ones are skipped
        fresh = spawn(pair.link.request("ping"), name="test-ping")
        request = await pair.guest.next_request("ping")
        assert request["id"] not in (second, third)
        pair.guest.respond(request["id"])
        await asyncio.wait_for(fresh, WAIT)
        pair.guest.respond(third)  # still remembered: dropped
        await pair.ping()
        assert pair.link.failure is None and pair.link.late_replies == 1
        pair.guest.respond(first)  # forgotten (the memory holds two): a reply to nothing
        assert f"RESPONSE for id {first}" in await pair.failure()


async def test_an_exec_that_starts_after_its_caller_gave_up_is_killed_and_its_output_credited():
    async with linked() as pair:
        with pytest.raises(GuestTimeout, match=r"did not answer exec \(request 1\) within 0 s"):
            await pair.link.exec(["sleep", "9"], "/", {}, 0, timeout=0)
        request = await pair.guest.next_request("exec")
        pair.guest.respond(request["id"], pid=77)
        kill = await pair.guest.next_request("signal")
        assert (kill["target"], kill["signal"]) == (request["id"], 9)
        pair.guest.output(request["id"], b"late" * (CREDIT_BATCH // 4))
        assert await pair.guest.acked_at_least(request["id"], CREDIT_BATCH) == CREDIT_BATCH  # it may reach EXIT
        pair.guest.respond(kill["id"])
        pair.guest.exit(request["id"], 137)
        await pair.ping()
        output_frames = CREDIT_BATCH // P.MAX_OUTPUT_CHUNK
        assert pair.link.failure is None and pair.link.late_replies == 1 + output_frames + 1  # RESPONSE, output, EXIT


async def test_requests_on_a_failed_link_fail_at_once():
    async with linked() as pair:
        pair.guest.respond(5)
        await pair.failure()
        with pytest.raises(GuestFailure, match="RESPONSE for id 5"):
            await pair.link.request("ping")
