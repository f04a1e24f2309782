"""Console benchmark: events/second ingested with the UI responsive, and key-press latency while 20,000 events/s
stream in, as ratios against a baseline measured in the same process (key latency with no events).

    .venv/bin/python bench/console.py [--seconds 3] [--rate 20000]

Headless (``run_test``) with the tests' ``FakeDaemonClient``: it measures the console, not the daemon.  Goal: nothing
dropped, key latency under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from textual import events

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine  # noqa: E402
from tests.console_fakes import FakeDaemonClient, fixed_clock, make_event, quiet_settings, two_boxes  # noqa: E402
from tkbox_tui.console.app import make_app  # noqa: E402


async def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.001)


async def key_latencies(*, rate: int, seconds: float, presses: int, config: Path) -> tuple[list[float], int, int]:
    """Key-press → action latencies (seconds) while ``rate`` events/s stream; returns (latencies, sent, received)."""
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(config, render_interval=0.1), clock=fixed_clock)
    handled: list[float] = []
    original = app.action_toggle_scope

    def timed_toggle() -> None:
        handled.append(time.perf_counter())
        original()

    app.action_toggle_scope = timed_toggle  # type: ignore[method-assign]
    sent = 0
    latencies: list[float] = []
    async with app.run_test(size=(120, 36)):
        await _wait(lambda: fake.stream_opened.is_set())

        async def produce() -> None:
            nonlocal sent
            tick = 0.01
            per_tick = max(1, int(rate * tick))
            end = time.perf_counter() + seconds
            while rate and time.perf_counter() < end:
                for _ in range(per_tick):
                    sent += 1
                    fake.live.put_nowait(make_event(sent, "b1" if sent % 2 else "b2", "exec.finished", exit_code=0))
                await asyncio.sleep(tick)

        async def press() -> None:
            interval = seconds / (presses + 1)
            for _ in range(presses):
                await asyncio.sleep(interval)
                before = len(handled)
                start = time.perf_counter()
                app.post_message(events.Key("a", "a"))
                await _wait(lambda before=before: len(handled) > before)
                latencies.append(handled[-1] - start)

        async with asyncio.TaskGroup() as group:
            group.create_task(produce())
            group.create_task(press())
        await _wait(lambda: app.state.last_seq == sent)
        received = app.state.events_seen
    return latencies, sent, received


async def ingest_rate(count: int, config: Path) -> float:
    """Events/second from the fake's queue into the console's model, the UI rendering as it goes."""
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(config), clock=fixed_clock)
    async with app.run_test(size=(120, 36)):
        await _wait(lambda: fake.stream_opened.is_set())
        start = time.perf_counter()
        for seq in range(1, count + 1):
            fake.live.put_nowait(make_event(seq, "b1", "exec.finished", exit_code=0))
        await _wait(lambda: app.state.last_seq == count)
        elapsed = time.perf_counter() - start
        assert app.state.events_seen == count
    return count / elapsed


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--presses", type=int, default=20)
    args = parser.parse_args()
    config = Path("/nonexistent-tkbox-bench-config")
    print(f"machine: {machine()}")
    baseline, _, _ = await key_latencies(rate=0, seconds=args.seconds, presses=args.presses, config=config)
    loaded, sent, received = await key_latencies(rate=args.rate, seconds=args.seconds, presses=args.presses,
                                                 config=config)
    rate = await ingest_rate(100_000, config)
    base_ms = statistics.median(baseline) * 1000
    load_ms = statistics.median(loaded) * 1000
    worst_ms = max(loaded) * 1000
    print(f"key latency, no events:         median {base_ms:6.2f} ms")
    print(f"key latency, {args.rate} events/s: median {load_ms:6.2f} ms, max {worst_ms:6.2f} ms "
          f"(x{load_ms / base_ms:.1f} the baseline)")
    print(f"stream: {sent / args.seconds:,.0f} events/s actually offered over {args.seconds:.0f} s")
    print(f"events sent {sent}, in the console's model {received}: {'nothing dropped' if sent == received else 'DROPPED'}")
    print(f"ingest: {rate:,.0f} events/s (x{rate / max(args.rate, 1):.1f} the {args.rate} events/s target)")
    ok = sent == received and worst_ms < 50
    print("goal (nothing dropped, key latency < 50 ms):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
