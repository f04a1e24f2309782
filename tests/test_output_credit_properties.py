"""Output credit, stated as properties: whatever the interleaving of output frames, reads and acks, the host never
holds more than the window for one exec and never counts below zero, and the guest never sends more than it was
granted, yet delivers everything once credit comes."""

from __future__ import annotations

import asyncio
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon.boxes.guest_exec import STDERR, STDOUT, ExecOutput
from tkbox_daemon.tasks import spawn
from tkbox_guest import protocol as P
from tkbox_guest.execs import Exec

WAIT = 30.0  # a safety net against hangs, never a timing assertion

# -- the host: ExecOutput ----------------------------------------------------------------------------------------

_host_steps = st.lists(st.one_of(
    st.tuples(st.just("frame"), st.sampled_from([STDOUT, STDERR]), st.integers(1, 400)),
    st.tuples(st.just("take"), st.integers(1, 300)),
    st.tuples(st.just("release"), st.integers(0, 400)),
    st.tuples(st.just("ack"), st.just(0)),
    st.tuples(st.just("drop"), st.just(0)),
), max_size=60)


@given(window=st.integers(1, 500), steps=_host_steps)
def test_the_host_never_holds_more_than_the_window_and_never_counts_below_zero(window, steps):
    output = ExecOutput(window)
    sent = {STDOUT: bytearray(), STDERR: bytearray()}  # accepted frames, per stream
    read = {STDOUT: bytearray(), STDERR: bytearray()}  # what the reader took
    taken = 0  # taken by the reader, not yet released
    counter = 0
    for step in steps:
        kind, *args = step
        if kind == "frame":
            stream, size = args
            chunk = bytes((counter + i) % 251 for i in range(size))
            counter += size
            before = (output.window.outstanding, output.queued, output.credit_due)
            if size > window - output.window.outstanding:
                with pytest.raises(P.ProtocolError):
                    output.received(stream, chunk)
                assert (output.window.outstanding, output.queued, output.credit_due) == before
            else:
                output.received(stream, chunk)
                if not output.dropping:
                    sent[stream] += chunk
        elif kind == "take":
            got = output.take_chunk(args[0])
            if got is None:
                assert output.queued == 0
            else:
                assert 1 <= len(got[1]) <= args[0]
                read[got[0]] += got[1]
                taken += len(got[1])
        elif kind == "release":
            count = min(args[0], taken)
            output.release(count)
            taken -= count
        elif kind == "ack":
            count = output.acknowledge()
            assert 0 <= count <= window
        else:
            output.drop()
        assert 0 <= output.window.outstanding <= window
        assert output.window.outstanding == output.queued + taken + output.credit_due
    while (got := output.take_chunk()) is not None:
        read[got[0]] += got[1]
    if not output.dropping:
        assert read == sent  # each stream in order, nothing lost or repeated


def test_a_release_of_more_than_was_taken_is_refused():
    output = ExecOutput(10)
    output.received(STDOUT, b"abc")
    output.take_chunk(2)
    with pytest.raises(ValueError):
        output.release(3)


# -- the guest: the output pumps of an Exec ------------------------------------------------------------------------


class _RecordingChannel:
    """Stands in for the guest's channel: checks every output frame against the credit the test granted."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.outstanding = 0  # sent and not acknowledged, as the host would count it
        self.received = {P.STDOUT: bytearray(), P.STDERR: bytearray()}
        self.changed = asyncio.Event()

    async def send(self, frame: bytes) -> None:
        decoded = P.FrameDecoder(accept=P.GUEST_TO_HOST).feed(frame)
        assert len(decoded) == 1 and decoded[0].type in self.received
        ident, data = P.split_id(decoded[0].payload)
        assert ident == 7 and 1 <= len(data) <= P.MAX_OUTPUT_CHUNK
        self.outstanding += len(data)
        assert self.outstanding <= self.window, "the guest sent more output than it was granted"
        self.received[decoded[0].type] += data
        self.changed.set()

    def send_nowait(self, frame: bytes) -> None:
        raise AssertionError("no control frame is expected")


PIPE_ROOM = 60_000  # unread bytes a test keeps in a pipe, below its 64 KiB, so that its writes never block

_guest_steps = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from([P.STDOUT, P.STDERR]), st.integers(1, 3000)),
    st.tuples(st.just("ack"), st.just(0), st.integers(1, 6000)),
    st.tuples(st.just("run"), st.just(0), st.integers(1, 6)),
), max_size=30)


async def _pump_scenario(window: int, steps: list[tuple[str, int, int]]) -> None:
    channel = _RecordingChannel(window)
    running = Exec(7, {"argv": ["none"], "cwd": "/"}, env={}, timeout_ms=0, channel=channel,  # type: ignore[arg-type]
                   reaper=None, drain_s=0)  # type: ignore[arg-type]
    running.output_window = P.OutputWindow(window)
    ends = {kind: os.pipe2(os.O_CLOEXEC) for kind in (P.STDOUT, P.STDERR)}
    for read_end, _ in ends.values():
        os.set_blocking(read_end, False)
    pumps = [spawn(running._pump(read_end, kind), name="test-pump") for kind, (read_end, _) in ends.items()]
    written = {P.STDOUT: bytearray(), P.STDERR: bytearray()}
    try:
        for kind, stream, size in steps:
            if kind == "write":
                size = min(size, PIPE_ROOM - (len(written[stream]) - len(channel.received[stream])))
                if size > 0:
                    data = bytes((len(written[stream]) + i) % 253 for i in range(size))
                    written[stream] += data
                    os.write(ends[stream][1], data)
            elif kind == "ack":
                count = min(size, channel.outstanding)
                if count:
                    channel.outstanding -= count
                    running.give_output_credit(count)
            else:
                for _ in range(size):
                    await asyncio.sleep(0)  # let the pumps run (an event-loop turn, not a wait for time)
        for _, write_end in ends.values():
            os.close(write_end)
        while not all(pump.done() for pump in pumps):  # then credit for everything: every byte arrives
            if channel.outstanding:
                running.give_output_credit(channel.outstanding)
                channel.outstanding = 0
            channel.changed.clear()
            changed = spawn(channel.changed.wait(), name="test-changed")
            done, _ = await asyncio.wait([*pumps, changed], timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
            assert done, "the pumps stalled with credit available"
        assert channel.received == written
    finally:
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


@settings(max_examples=40, deadline=None)
@given(window=st.integers(1, 5000), steps=_guest_steps)
def test_the_guest_never_sends_more_than_it_was_granted_and_sends_everything_once_credit_comes(window, steps):
    asyncio.run(_pump_scenario(window, steps))


def test_an_ack_beyond_what_the_guest_sent_is_a_protocol_error():
    running = Exec(7, {"argv": ["none"], "cwd": "/"}, env={}, timeout_ms=0, channel=None,  # type: ignore[arg-type]
                   reaper=None, drain_s=0)  # type: ignore[arg-type]
    running.output_window.take(10)
    running.give_output_credit(10)
    with pytest.raises(P.ProtocolError, match="OUTPUT_ACK for exec 7"):
        running.give_output_credit(1)


@given(ident=st.integers(0, P.MAX_U32), count=st.integers(-5, P.OUTPUT_WINDOW + 5))
def test_output_ack_frames_carry_credit_of_one_byte_to_the_window(ident, count):
    if 1 <= count <= P.OUTPUT_WINDOW:
        frame = P.encode_output_ack(ident, count)
        decoded = P.FrameDecoder(accept=P.HOST_TO_GUEST).feed(frame)
        assert [P.decode_output_ack(f.payload) for f in decoded] == [(ident, count)]
    else:
        with pytest.raises(P.ProtocolError):
            P.encode_output_ack(ident, count)
        with pytest.raises(P.ProtocolError):
            P.decode_output_ack(ident.to_bytes(4, "big") + (count % 2**32).to_bytes(4, "big"))


def test_output_acks_go_host_to_guest_only():
    with pytest.raises(P.ProtocolError, match="not allowed in this direction"):
        P.FrameDecoder(accept=P.GUEST_TO_HOST).feed(P.encode_output_ack(1, 1))
