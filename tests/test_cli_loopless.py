"""Daemon commands run without an event loop (``tkbox_tui.cli.loopless``): a coroutine that never suspends gives
its result or its exception as it is; one that waits for a loop is refused and closed, never left half-run; Ctrl+C
stops a following command at once while it waits and only after the item it is showing otherwise."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from tkbox_tui.cli.loopless import InterruptPoints, NeedsEventLoop, finish
from tkbox_tui.client import DaemonClient, DaemonUnreachable


async def _value(value: int) -> int:
    return value


async def _fails() -> int:
    raise ValueError("as it is")


def test_a_coroutine_that_never_suspends_gives_its_result_or_its_exception():
    assert finish(_value(7)) == 7
    with pytest.raises(ValueError, match="as it is"):
        finish(_fails())


def test_a_coroutine_that_waits_for_a_loop_is_refused_and_closed():
    cleaned = []

    async def waits() -> int:
        try:
            await asyncio.sleep(0)
            return 1
        finally:
            cleaned.append(True)

    with pytest.raises(NeedsEventLoop):
        finish(waits())
    assert cleaned == [True]


def test_the_client_needs_no_loop_to_find_no_daemon(tmp_path):
    with pytest.raises(DaemonUnreachable) as raised:
        finish(DaemonClient(tmp_path / "api.sock").boxes())
    assert str(tmp_path / "api.sock") in raised.value.message


def test_ctrl_c_while_showing_waits_for_the_check_and_while_waiting_stops_at_once():
    with InterruptPoints() as points:
        os.kill(os.getpid(), signal.SIGINT)  # delivered now, in the main thread: held
        with pytest.raises(KeyboardInterrupt):
            points.check()
        points.check()  # once only
        with pytest.raises(KeyboardInterrupt), points.waiting():
            os.kill(os.getpid(), signal.SIGINT)
            signal.pause()  # never returns: the interrupt ends the wait
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
