"""A burst of 20,000 events: none is dropped from the console's model, and keys are handled during the burst."""

from __future__ import annotations

from textual import events

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_event,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.console.app import make_app

BURST = 20_000


async def test_burst_of_20000_events_drops_nothing_and_stays_responsive(tmp_path):
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", event_ring=5_000), clock=fixed_clock)
    seen_by_seq: set[int] = set()
    original_apply = app.state.apply

    def counting_apply(event):
        fresh = original_apply(event)
        if fresh:
            seen_by_seq.add(event.seq)
        return fresh

    app.state.apply = counting_apply  # type: ignore[method-assign]
    seq_when_key_handled: list[int] = []

    def hook(message) -> None:
        if isinstance(message, events.Key) and message.key == "a":
            seq_when_key_handled.append(app.inbox.after)

    async with app.run_test(size=(120, 36), message_hook=hook) as pilot:
        await wait_until(pilot, lambda: fake.stream_opened.is_set())
        for seq in range(1, BURST + 1):
            fake.live.put_nowait(make_event(seq, "b1" if seq % 2 else "b2", "exec.finished", exit_code=0))
        await pilot.press("a")  # toggle the log's scope while the burst is being ingested
        assert app.state.scope_to_selected
        await wait_until(pilot, lambda: app.state.last_seq == BURST, rounds=5_000)
    assert seen_by_seq == set(range(1, BURST + 1))  # counted by seq: nothing dropped, nothing twice
    assert app.state.events_seen == BURST
    assert len(app.state.events) == 5_000  # memory stays bounded
    assert seq_when_key_handled and seq_when_key_handled[0] < BURST
