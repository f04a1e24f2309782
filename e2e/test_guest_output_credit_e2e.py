"""Output flow control in the real guest agent (``guest_host.GuestHost``): an exec sends at most its output window
before the host acknowledges, its process then blocks on its pipe, and it resumes when credit comes; what a process
left in its pipes when it ended is sent in full before its EXIT; a bad ack ends the guest.  No box is needed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from guest_host import WAIT, GuestHost, gone_or_zombie, shutdown_guest

from tkbox_guest import protocol as P

pytestmark = pytest.mark.e2e

WINDOW = P.OUTPUT_WINDOW
POLL = 0.02  # seconds between looks at /proc: a process's kernel wait has no event to await


async def _until(condition, what: str) -> None:
    """Poll ``condition`` (a kernel state, which nothing signals) until it holds; WAIT is only a safety net."""
    async with asyncio.timeout(WAIT):
        while not condition():
            await asyncio.sleep(POLL)


def _blocked_writing_a_pipe(pid: int) -> bool:
    try:
        return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


@pytest.fixture
async def slow_host(tmp_path):
    """A guest whose host acknowledges no output until the test says so."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    host = await GuestHost(workspace, ack_output=False).start()
    try:
        yield host
    finally:
        await host.aclose()


async def test_unacknowledged_output_stops_at_the_window_and_resumes_when_credit_comes(slow_host):
    total = 3 * WINDOW + 12345
    ident, response = await slow_host.exec(["head", "-c", str(total), "/dev/zero"], stdin=None)
    assert await slow_host.output_outstanding(ident, WINDOW) == WINDOW
    await _until(lambda: _blocked_writing_a_pipe(response["pid"]), "head blocked on its pipe")
    assert (await slow_host.call("ping"))["ok"] is True  # the channel serves requests meanwhile
    assert slow_host.output_windows[ident].outstanding == WINDOW  # and the guest sent not a byte more
    slow_host.auto_ack_output = True
    await slow_host.ack_output(ident)
    result = await slow_host.outcome(ident)
    assert result["stdout"] == b"\0" * total and result["exit_code"] == 0
    assert slow_host.host_errors == []


async def test_what_an_ended_process_left_in_its_pipe_is_sent_before_its_exit_however_late_the_credit(tmp_path):
    host = await GuestHost(tmp_path, ack_output=False, drain_ms=0).start()
    try:
        total = WINDOW + 40_000  # the window, then less than a pipe's worth that waits in the pipe for credit
        ident, response = await host.exec(["head", "-c", str(total), "/dev/zero"], stdin=None)
        await host.output_outstanding(ident, WINDOW)
        await _until(lambda: gone_or_zombie(response["pid"]), "head has ended")  # long before any credit
        assert (await host.call("ping"))["ok"] is True
        host.auto_ack_output = True
        await host.ack_output(ident)
        result = await host.outcome(ident)
        assert len(result["stdout"]) == total and result["exit_code"] == 0
    finally:
        await host.aclose()


async def test_a_background_writer_cannot_hold_exit_back_once_the_owed_output_is_sent(slow_host):
    ident, _ = await slow_host.exec(["sh", "-c", "yes & exit 0"], stdin=None)
    await slow_host.output_outstanding(ident, WINDOW)
    slow_host.auto_ack_output = True
    await slow_host.ack_output(ident)
    result = await slow_host.outcome(ident)  # after the owed bytes and the drain, whatever `yes` still writes
    assert result["exit_code"] == 0 and result["stdout"].startswith(b"y\ny\n")
    status, err = await shutdown_guest(slow_host)
    assert status == 0, err


async def test_credit_for_an_ended_exec_is_ignored_and_for_a_never_started_one_is_a_protocol_error(slow_host):
    slow_host.auto_ack_output = True
    result = await slow_host.run(["echo", "hi"])
    assert result["stdout"] == b"hi\n"
    await slow_host.send_raw(P.encode_output_ack(1, 1))  # exec 1 has ended: sent before the host saw its EXIT
    assert (await slow_host.call("ping"))["ok"] is True
    await slow_host.send_raw(P.encode_output_ack(999, 1))
    status, err = await slow_host.stop()
    assert status == 2 and "OUTPUT_ACK for id 999, which is not a running exec" in err


async def test_an_ack_beyond_what_was_sent_is_a_protocol_error_that_ends_the_guest(slow_host):
    ident, response = await slow_host.exec(["sh", "-c", "echo 12345; exec sleep 1000"], stdin=None)
    assert await slow_host.output_outstanding(ident, 6) == 6
    await slow_host.send_raw(P.encode_output_ack(ident, 7))
    status, err = await slow_host.stop()
    assert status == 2 and f"OUTPUT_ACK for exec {ident}" in err and "exceeds the 6 bytes outstanding" in err
    assert gone_or_zombie(response["pid"])
