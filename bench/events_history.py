"""Bench: the daemon's event history on a long history (109,000 events by default) and its memory over many events.

    .venv/bin/python bench/events_history.py [--events 109000] [--runs 3]
    .venv/bin/python bench/events_history.py --rss 300000

For each run, against a server process holding the events routes over a Unix socket (the daemon's own routes and
event bus, on a history written by an earlier bus: every event on disk only, as after a restart): the time to the
first event and to the last of ``GET /v1/events?after=0``, the latency of ``/v1/health`` calls made one after
another while that stream runs (the daemon's loop must keep answering), the time to a tail page (``/v1/events/page``),
and the baseline in the same run: reading and parsing the same file in this process.  ``--rss N`` emits N events
into a bus in a fresh process and prints its resident memory every N/10 events.

``--old DIR`` serves ``DIR/old_events.py`` and ``DIR/old_routes_events.py`` instead (an earlier implementation,
for a before/after comparison on the same machine and history).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _event_data(index: int) -> dict:
    """An exec's event as a box's daemon emits it, about 300 bytes a line."""
    return {"exec_id": index, "command": f"python -m pytest tests/test_{index % 97}.py -q",
            "decision_id": f"dec-{index:016x}", "rule_ids": ["dev.test"], "outcome": "allow", "tty": False}


def _modules(old: str | None):
    if old:
        sys.path.insert(0, old)
        import old_events  # type: ignore[import-not-found]
        import old_routes_events  # type: ignore[import-not-found]
        return old_events.EventBus, old_routes_events.routes
    from tkbox_daemon.api.routes_events import routes
    from tkbox_daemon.events import EventBus
    return EventBus, routes


def write_history(state: Path, count: int) -> None:
    from tkbox_daemon.events import EventBus
    bus = EventBus(state)
    bus.open()
    for index in range(count):
        bus.emit("aaaaaaaaaaaa" if index % 2 else "", "exec.finished" if index % 2 else "exec.started",
                 _event_data(index))
    bus.close()


def serve(state: Path, socket: Path, old: str | None) -> None:
    bus_class, routes = _modules(old)

    class Boxes:
        def resolve_id(self, ref: str) -> str:
            return ref

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"last_seq": bus.last_seq})

    from tkbox_daemon.api.keys import EVENTS, MANAGER
    bus = bus_class(state)
    bus.open()
    app = web.Application()
    app.add_routes(routes)
    app.router.add_get("/v1/health", health)
    app[EVENTS] = bus
    app[MANAGER] = Boxes()  # type: ignore[assignment]
    web.run_app(app, path=str(socket), print=lambda *_: print("ready", flush=True))


async def one_run(socket: Path, count: int, stop_file: Path) -> dict[str, float]:
    """One read of the whole history, with ``/v1/health`` pinged meanwhile from another process (so that this
    process's own work on the stream does not count against the daemon)."""
    pinger = subprocess.Popen([sys.executable, __file__, "--ping", str(socket), str(stop_file)],
                              stdout=subprocess.PIPE, text=True)
    assert pinger.stdout is not None and pinger.stdout.readline().strip() == "pinging"
    connector = aiohttp.UnixConnector(path=str(socket))
    async with aiohttp.ClientSession(connector=connector, base_url="http://tkbox",
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        started = time.perf_counter()
        first = 0.0
        seen = 0
        carry = b""
        async with session.get("/v1/events", params={"after": "0"}) as stream:
            async for chunk in stream.content.iter_any():
                seen += (carry + chunk).count(b"\n\n")  # an SSE event ends with an empty line
                carry = chunk[-1:]
                if seen and not first:
                    first = time.perf_counter() - started
                if seen >= count:
                    break
        total = time.perf_counter() - started
        stop_file.touch()
        latencies = json.loads(pinger.communicate()[0])
        started = time.perf_counter()
        async with session.get("/v1/events/page", params={"limit": "1000"}) as reply:
            page_ok = reply.status == 200
            await reply.read()
        page = time.perf_counter() - started if page_ok else float("nan")
        started = time.perf_counter()
        async with session.get("/v1/events", params={"after": "0", "follow": "0"}) as reply:
            stored = len(json.loads(await reply.read())["events"])
        whole = time.perf_counter() - started
        assert stored == count, stored
    return {"stored_s": whole, "first_ms": first * 1e3, "total_s": total, "health_median_ms": statistics.median(latencies) * 1e3,
            "health_max_ms": max(latencies) * 1e3, "health_calls": len(latencies), "page_ms": page * 1e3}


def ping(socket: Path, stop_file: Path) -> None:
    """``/v1/health`` one call after another until ``stop_file`` exists; prints the latencies (seconds) as JSON."""
    import http.client
    import socket as sockets

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
            self.sock.connect(str(socket))

    connection = UnixConnection("tkbox")
    latencies = []
    print("pinging", flush=True)
    while not stop_file.exists():
        started = time.perf_counter()
        connection.request("GET", "/v1/health")
        connection.getresponse().read()
        latencies.append(time.perf_counter() - started)
    print(json.dumps(latencies))


def local_parse(path: Path) -> float:
    """The baseline: events per second reading and parsing the history file in this process."""
    started = time.perf_counter()
    count = 0
    with open(path, "rb") as handle:
        for line in handle:
            json.loads(line)
            count += 1
    return count / (time.perf_counter() - started)


def rss_over(count: int, old: str | None) -> None:
    bus_class, _ = _modules(old)
    with tempfile.TemporaryDirectory() as state:
        bus = bus_class(Path(state))
        bus.open()
        step = max(1, count // 10)
        print(f"{0:>9} events: RSS {_rss_mib():.1f} MiB", flush=True)
        for index in range(count):
            bus.emit("aaaaaaaaaaaa", "exec.finished", _event_data(index))
            if (index + 1) % step == 0:
                print(f"{index + 1:>9} events: RSS {_rss_mib():.1f} MiB", flush=True)
        bus.close()


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=109_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--old", help="a directory with old_events.py and old_routes_events.py to serve instead")
    parser.add_argument("--rss", type=int, help="emit this many events and print the process's memory")
    parser.add_argument("--serve", nargs=2, metavar=("STATE", "SOCKET"), help=argparse.SUPPRESS)
    parser.add_argument("--ping", nargs=2, metavar=("SOCKET", "STOP_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ping:
        ping(Path(args.ping[0]), Path(args.ping[1]))
        return
    if args.serve:
        serve(Path(args.serve[0]), Path(args.serve[1]), args.old)
        return
    if args.rss:
        rss_over(args.rss, args.old)
        return
    with tempfile.TemporaryDirectory() as base:
        state = Path(base) / "state"
        write_history(state, args.events)
        size = (state / "events.jsonl").stat().st_size
        print(f"history: {args.events:,} events, {size / 2**20:.1f} MiB; {os.cpu_count()} CPUs, load "
              f"{os.getloadavg()[0]:.2f}")
        for run in range(args.runs):
            baseline = local_parse(state / "events.jsonl")
            socket = Path(base) / f"api-{run}.sock"
            command = [sys.executable, __file__, "--serve", str(state), str(socket)] + (
                ["--old", args.old] if args.old else [])
            server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
            try:
                assert server.stdout is not None and server.stdout.readline().strip() == "ready"
                result = asyncio.run(one_run(socket, args.events, Path(base) / f"stop-{run}"))
            finally:
                server.terminate()
                server.wait()
            print(f"run {run + 1}: first event {result['first_ms']:.1f} ms, all {result['total_s']:.2f} s "
                  f"({args.events / result['total_s']:,.0f} events/s); health during it: median "
                  f"{result['health_median_ms']:.1f} ms, max {result['health_max_ms']:.1f} ms over "
                  f"{result['health_calls']} calls; tail page of 1,000: {result['page_ms']:.1f} ms; all as one JSON "
                  f"(follow=0, parsed here): {result['stored_s']:.2f} s | baseline: "
                  f"local read + parse {baseline:,.0f} events/s; load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
