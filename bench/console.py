"""Console benchmark: events/second ingested with the UI responsive, key-press latency while 20,000 events/s
stream in, and daemon event → approval prompt on screen with that traffic, as ratios against baselines measured in
the same process (the same with no other events).

    .venv/bin/python bench/console.py [--seconds 3] [--rate 20000] [--prompts 100]

Headless (``run_test``) with the tests' ``FakeDaemonClient``: it measures the console, not the daemon (nor the
client's parsing of the stream: the fake hands over ``Event`` objects).  The console runs as ``run_console`` runs it
(``gc_tuning``).  Goals: nothing dropped, key latency under 50 ms, the prompt on screen within 100 ms of its event
at the 95th percentile.  It prints the load average before and after: on a shared machine, compare a run with its
own baselines and with runs at a similar load (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from textual import events

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine  # noqa: E402
from tests.console_fakes import (  # noqa: E402
    FakeDaemonClient,
    fixed_clock,
    make_approval,
    make_event,
    quiet_settings,
    two_boxes,
)
from tkbox_tui.console.app import make_app  # noqa: E402
from tkbox_tui.console.gc_tuning import tune_garbage_collector  # noqa: E402
from tkbox_tui.console.screens import ApprovalPrompt  # noqa: E402


async def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.001)


def console_settings(config: Path) -> Any:
    """The tests' quiet settings, with the renders and the heap of the console as ``run_console`` runs it."""
    return quiet_settings(config, render_interval=0.1, freeze_startup_heap=True)


async def key_latencies(*, rate: int, seconds: float, presses: int, config: Path) -> tuple[list[float], int, int]:
    """Key-press → action latencies (seconds) while ``rate`` events/s stream; returns (latencies, sent, received)."""
    fake = FakeDaemonClient(two_boxes())
    fake.history = collections.deque(maxlen=1000)  # type: ignore[assignment]  # see prompt_latencies
    app = make_app(fake, settings=console_settings(config), clock=fixed_clock)
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
            """``rate`` events/s for ``seconds``, caught up every 10 ms (as ``prompt_latencies`` offers them)."""
            nonlocal sent
            began = time.perf_counter()
            while rate and (elapsed := time.perf_counter() - began) < seconds:
                for _ in range(int(rate * elapsed) - sent):
                    sent += 1
                    fake.live.put_nowait(make_event(sent, "b1" if sent % 2 else "b2", "exec.finished", exit_code=0))
                await asyncio.sleep(0.01)

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


PROMPT_SPACING = 0.25
"""Seconds from one prompt closing to the next approval event: the screen behind has settled by then (an
approval arriving while the prompt is open joins its queue instead: it is drawn as "1 of 2", not a new prompt)."""


async def prompt_latencies(*, rate: int, prompts: int, config: Path) -> tuple[list[float], float]:
    """Daemon event → prompt on screen (seconds), ``prompts`` times while ``rate`` events/s of other traffic
    stream all along; returns (latencies, the rate of events actually offered).  The approval event joins the
    stream behind the traffic already queued, as it would from the daemon; the prompt is closed (Esc, "later")
    before the next one.

    "On screen": the first frame with the prompt and its text that the App hands to its driver (``App._display``;
    headless, the driver does not write it to a terminal, which takes a millisecond or two more)."""
    gc.collect()  # what the measures before left behind is not this one's to collect
    fake = FakeDaemonClient(two_boxes())
    # The fake keeps every event it streamed (a reconnect replays them); the daemon does that, not the console,
    # and a few hundred thousand events kept in this process would make its garbage collections the measure.
    fake.history = collections.deque(maxlen=1000)  # type: ignore[assignment]
    app = make_app(fake, settings=console_settings(config), clock=fixed_clock)
    app.bell = lambda: None  # type: ignore[method-assign]
    drawn: list[float] = []
    shown: set[Any] = set()
    display = app._display

    def timed_display(screen: Any, update: Any) -> None:
        if isinstance(screen, ApprovalPrompt) and screen.body and update is not None and screen not in shown:
            shown.add(screen)
            drawn.append(time.perf_counter())
        display(screen, update)

    app._display = timed_display  # type: ignore[method-assign]
    latencies: list[float] = []
    sent = 0
    asking = True
    async with app.run_test(size=(120, 36)):
        await _wait(lambda: fake.stream_opened.is_set())
        began = time.perf_counter()

        async def produce() -> None:
            """``rate`` events/s, caught up every 10 ms (a fixed number per sleep falls short: the sleeps overrun)."""
            nonlocal sent
            traffic = 0
            while rate and asking:
                due = int(rate * (time.perf_counter() - began)) - traffic
                for _ in range(due):
                    sent += 1
                    traffic += 1
                    fake.live.put_nowait(make_event(sent, "b1" if sent % 2 else "b2", "exec.finished",
                                                    exit_code=0))
                await asyncio.sleep(0.01)

        async def ask() -> None:
            nonlocal sent, asking
            for index in range(prompts):
                await asyncio.sleep(PROMPT_SPACING)
                before = len(drawn)
                sent += 1
                approval = make_approval(f"apr-{index + 1:016x}")
                start = time.perf_counter()
                fake.live.put_nowait(make_event(sent, "b1", "approval.pending", approval=approval.to_json()))
                await _wait(lambda before=before: len(drawn) > before)
                latencies.append(drawn[-1] - start)
                app.defer_prompt()
                await _wait(lambda: not isinstance(app.screen, ApprovalPrompt))
            asking = False

        async with asyncio.TaskGroup() as group:
            group.create_task(produce())
            group.create_task(ask())
        offered = (sent - prompts) / (time.perf_counter() - began)
        await _wait(lambda: app.state.last_seq == sent)
    return latencies, offered


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages (the machine may be shared: docs/performance.md gives them)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.95: the 95th)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


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
    parser.add_argument("--prompts", type=int, default=100)
    args = parser.parse_args()
    config = Path("/nonexistent-tkbox-bench-config")
    tune_garbage_collector()  # as run_console runs the console
    print(f"machine: {machine()}")
    print(f"load average before: {load_average()}")
    baseline, _, _ = await key_latencies(rate=0, seconds=args.seconds, presses=args.presses, config=config)
    loaded, sent, received = await key_latencies(rate=args.rate, seconds=args.seconds, presses=args.presses,
                                                 config=config)
    rate = await ingest_rate(100_000, config)
    prompt_base, _ = await prompt_latencies(rate=0, prompts=args.prompts, config=config)
    prompt_load, offered = await prompt_latencies(rate=args.rate, prompts=args.prompts, config=config)
    base_ms = statistics.median(baseline) * 1000
    load_ms = statistics.median(loaded) * 1000
    worst_ms = max(loaded) * 1000
    print(f"load average after: {load_average()}")
    print(f"key latency, no events:         median {base_ms:6.2f} ms, max {max(baseline) * 1000:6.2f} ms")
    print(f"key latency, {args.rate} events/s: median {load_ms:6.2f} ms, max {worst_ms:6.2f} ms "
          f"(x{load_ms / base_ms:.1f} the baseline)")
    print(f"stream: {sent / args.seconds:,.0f} events/s actually offered over {args.seconds:.0f} s")
    print(f"events sent {sent}, in the console's model {received}: {'nothing dropped' if sent == received else 'DROPPED'}")
    print(f"ingest: {rate:,.0f} events/s (x{rate / max(args.rate, 1):.1f} the {args.rate} events/s target)")
    prompt_ok = percentile(prompt_load, 0.95) * 1000 <= 100
    base_p95 = percentile(prompt_base, 0.95) * 1000
    load_p50, load_p95 = statistics.median(prompt_load) * 1000, percentile(prompt_load, 0.95) * 1000
    print(f"event → prompt on screen, no other events: median {statistics.median(prompt_base) * 1000:6.2f} ms, "
          f"p95 {base_p95:6.2f} ms ({len(prompt_base)} prompts)")
    print(f"event → prompt on screen, {args.rate} events/s: median {load_p50:6.2f} ms, p95 {load_p95:6.2f} ms, "
          f"max {max(prompt_load) * 1000:6.2f} ms (p95 x{load_p95 / base_p95:.1f} the baseline; "
          f"{offered:,.0f} events/s offered)")
    print("goal, nothing dropped:", "met" if sent == received else "NOT met")
    print("goal, key latency < 50 ms:", "met" if worst_ms < 50 else "NOT met")
    print("goal, event → prompt on screen <= 100 ms at the 95th percentile:", "met" if prompt_ok else "NOT met")
    return 0 if sent == received and worst_ms < 50 and prompt_ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
