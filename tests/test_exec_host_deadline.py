"""The host keeps its own deadline on every exec and records whose word each end is (issue 8).

A guest that never reports an exec's end, or never says it started, gets its whole box ended once the command's
time limit plus a grace has passed; the completion is then the host's (``reported_by: host``, outcome
``host_time_limit``), and an exit the guest did report is recorded as the guest's. A held box stops the clock.
The guest here is scripted (tests/fake_guest.py); the time limits are the smallest the API accepts (1 s) with a
short grace, and nothing is asserted about how long anything took.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.fake_guest import WAIT, StubBox, linked
from tkbox_daemon.boxes import exec_session
from tkbox_daemon.boxes.exec_session import ExecSession, ExecStart
from tkbox_daemon.boxes.guest_link import GuestFailure
from tkbox_daemon.tasks import spawn


@pytest.fixture(autouse=True)
def short_grace(monkeypatch):
    monkeypatch.setattr(exec_session, "END_GRACE", 0.2)


async def _started(pair, box: StubBox, **start) -> ExecSession:
    session = ExecSession(box, ExecStart(argv=("sleep", "100"), cwd="/tmp", timeout=1, **start))
    starting = spawn(session.start(), name="test-start")
    request = await pair.guest.next_request("exec")
    pair.guest.respond(request["id"], pid=42)
    await asyncio.wait_for(starting, WAIT)
    return session


async def _exit_of(session: ExecSession) -> dict:
    async for item in session.outputs():
        if isinstance(item, dict):
            return item
    raise AssertionError("no exit")


async def test_a_guest_that_never_reports_the_end_gets_its_box_ended_and_the_end_is_the_hosts_word():
    async with linked() as pair:
        box = StubBox(pair.link)
        session = await _started(pair, box)
        end = await asyncio.wait_for(_exit_of(session), WAIT)  # the guest stays silent
        assert end["reported_by"] == "host" and end["exit_code"] is None and end["timed_out"] is True
        assert "did not report the end of exec request" in end["error"] and "1 s time limit" in end["error"]
        await asyncio.wait_for(box.failed.wait(), WAIT)
        assert "the host ended the box" in box.failures[0] and "sleep 100" in box.failures[0]
        [completion] = box.completions
        assert completion["status"] == "error" and completion["exit_code"] is None
        assert completion["reported_by"] == "host"
        assert completion["host"]["outcome"] == "host_time_limit" and completion["host"]["time_limit_ms"] == 1000
        assert "did not report the end" in completion["host"]["reason"]


async def test_a_held_box_stops_the_hosts_clock_until_it_runs_again():
    async with linked() as pair:
        box = StubBox(pair.link)
        box.state = "held"
        box.not_held.clear()
        waiting = asyncio.Event()
        original = box.wait_until_not_held

        async def wait_until_not_held() -> None:
            waiting.set()
            await original()

        box.wait_until_not_held = wait_until_not_held
        session = await _started(pair, box)
        await asyncio.wait_for(waiting.wait(), WAIT)  # the limit passed while the box was held
        assert box.failures == [] and box.completions == []
        box.state = "running"
        box.not_held.set()
        await asyncio.wait_for(box.failed.wait(), WAIT)  # one more grace, then the host ends it
        assert box.completions[0]["host"]["outcome"] == "host_time_limit"
        end = await asyncio.wait_for(_exit_of(session), WAIT)
        assert end["reported_by"] == "host"


async def test_a_guest_that_never_says_the_command_started_is_refused_and_recorded():
    async with linked() as pair:
        box = StubBox(pair.link)
        session = ExecSession(box, ExecStart(argv=("true",), cwd="/tmp", timeout=1))
        starting = spawn(session.start(), name="test-start")
        await pair.guest.next_request("exec")  # never answered
        with pytest.raises(GuestFailure, match=r"did not start: the guest did not answer exec \(request \d+\)"):
            await asyncio.wait_for(starting, WAIT)
        await asyncio.wait_for(box.failed.wait(), WAIT)
        [completion] = box.completions
        assert completion["reported_by"] == "host" and completion["host"]["outcome"] == "host_time_limit"


async def test_an_exit_the_guest_reports_in_time_is_recorded_as_the_guests_word():
    async with linked() as pair:
        box = StubBox(pair.link)
        session = await _started(pair, box)
        pair.guest.exit(session.guest.id, 7)
        end = await asyncio.wait_for(_exit_of(session), WAIT)
        assert end == {"exit_code": 7, "signal": None, "timed_out": False, "reported_by": "guest"}
        await asyncio.wait_for(session.done.wait(), WAIT)
        [completion] = box.completions
        assert completion["exit_code"] == 7 and completion["status"] == "error"
        assert completion["reported_by"] == "guest" and completion["host"] == {"outcome": "reported",
                                                                              "time_limit_ms": 1000}
        assert box.failures == []


async def test_a_channel_that_ends_before_the_exit_records_the_box_ending():
    async with linked() as pair:
        box = StubBox(pair.link)
        session = await _started(pair, box)
        await pair.guest.close()
        end = await asyncio.wait_for(_exit_of(session), WAIT)
        assert end["reported_by"] == "host" and end["timed_out"] is False
        [completion] = box.completions
        assert completion["host"]["outcome"] == "box_ended" and completion["reported_by"] == "host"
