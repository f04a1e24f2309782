"""``until``: what the console's end-to-end Pilot tests wait with (their ``daemon`` fixture, a real signer and
daemon for one test, is in e2e/conftest.py)."""

from __future__ import annotations


async def until(pilot, condition, rounds: int = 20000) -> None:
    """Let the app and its real I/O run until ``condition()`` holds (pauses, never sleeps)."""
    for _ in range(rounds):
        if condition():
            return
        await pilot.pause()
    raise AssertionError("condition not reached")

