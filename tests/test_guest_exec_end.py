"""The guest's wait for an exec's output pumps before its EXIT (``execs._ended``): no turn of the event loop when
every pump has already ended (the usual case: the pipes reach EOF before the exit status comes), a real wait
bounded by the drain time otherwise, and a pump's own error never left unretrieved."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from tkbox_daemon.tasks import spawn
from tkbox_guest.execs import _ended


async def _fails() -> None:
    raise OSError("a pump's own error")


async def test_ended_pumps_are_settled_without_a_turn_of_the_loop_and_their_errors_are_retrieved():
    unretrieved: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: unretrieved.append(context))
    tasks = [spawn(asyncio.sleep(0), name="test-pump"), spawn(_fails(), name="test-pump")]
    await asyncio.wait(tasks)
    waiting = _ended(tasks, timeout=3600)
    try:
        waiting.send(None)
        raise AssertionError("_ended waited although every task had ended")
    except StopIteration:
        pass
    del tasks
    gc.collect()
    assert unretrieved == []


async def test_a_pump_still_running_is_waited_for_until_it_ends():
    release = asyncio.Event()
    pump = spawn(release.wait(), name="test-pump")
    waiting = spawn(_ended([pump], timeout=3600), name="test-ended")
    await asyncio.sleep(0)
    assert not waiting.done()
    release.set()
    await asyncio.wait_for(waiting, 30)
    assert pump.done()


async def test_the_drain_time_bounds_the_wait_for_a_pump_that_never_ends():
    never = asyncio.Event()
    pump = spawn(never.wait(), name="test-pump")
    await _ended([pump], timeout=0)
    assert not pump.done()
    pump.cancel()
    await _ended([pump])
    assert pump.cancelled()
