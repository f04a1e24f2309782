"""The event routes over HTTP, in a bare app and in the real daemon (and ``tkbox events --tail``): a long history
streams without holding up other calls, resumes across a daemon restart, pages back, and refuses bad parameters by
name."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.daemon_harness import make_workspace, running_daemon
from tkbox_daemon.api.errors import json_errors, not_found
from tkbox_daemon.api.keys import EVENTS, MANAGER
from tkbox_daemon.api.routes_events import routes
from tkbox_daemon.event_history import HistoryReader
from tkbox_daemon.events import EventBus
from tkbox_daemon.wire import Event, EventPage

BOX = "aaaaaaaaaaaa"


class _Boxes:
    """The one lookup the event routes make of the box manager: ``t1`` is a live box."""

    def resolve_id(self, ref: str) -> str:
        if ref in ("t1", BOX):
            return BOX
        raise not_found(f"box {ref!r}")


@asynccontextmanager
async def _serving(state: Path) -> AsyncIterator[tuple[TestClient, EventBus]]:
    bus = EventBus(state)
    bus.open()
    app = web.Application(middlewares=[json_errors])
    app.add_routes(routes)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"last_seq": bus.last_seq})

    app.router.add_get("/v1/health", health)
    app[EVENTS] = bus
    app[MANAGER] = _Boxes()  # type: ignore[assignment]
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client, bus
    finally:
        bus.close_subscribers()
        await client.close()
        bus.close()


def _fill(bus: EventBus, count: int) -> None:
    for index in range(count):
        bus.emit(BOX if index % 2 else "", "exec.started", {"n": index})


async def _sse_events(response: aiohttp.ClientResponse, last: int) -> list[Event]:
    got: list[Event] = []
    async for raw in response.content:
        if raw.startswith(b"data: "):
            got.append(Event.from_json(json.loads(raw[6:])))
            if got[-1].seq >= last:
                break
    return got


async def test_health_answers_while_a_long_history_streams(tmp_path, monkeypatch):
    async with _serving(tmp_path) as (_, bus):
        _fill(bus, 30_000)
    readers: list[HistoryReader] = []
    async with _serving(tmp_path) as (client, bus):  # restarted: every old event is on disk only
        make_reader = bus.history.reader
        monkeypatch.setattr(bus.history, "reader", lambda *a: readers.append(make_reader(*a)) or readers[-1])
        stream = await client.get("/v1/events", params={"after": "0"})  # its reader starts, nobody reads it yet
        assert stream.status == 200
        health = await client.get("/v1/health")
        assert (await health.json())["last_seq"] == 30_000
        assert readers and not readers[0].done  # answered while the history was still being served
        got = await _sse_events(stream, 30_000)
        assert [event.seq for event in got] == list(range(1, 30_001))
        stream.close()


async def test_a_stream_resumes_after_a_restart_from_any_point(tmp_path):
    async with _serving(tmp_path) as (_, bus):
        _fill(bus, 700)
    async with _serving(tmp_path) as (client, bus):
        _fill(bus, 300)
        for after in (0, 1, 255, 256, 699, 700, 701, 999):
            stream = await client.get("/v1/events", params={"after": str(after)})
            assert [e.seq for e in await _sse_events(stream, 1000)] == list(range(after + 1, 1001))
            stream.close()
        stream = await client.get("/v1/events", headers={"Last-Event-ID": "990"}, params={"box": "t1"})
        assert [e.seq for e in await _sse_events(stream, 1000)] == [992, 994, 996, 998, 1000]
        stream.close()


async def test_stored_events_come_as_one_json_object(tmp_path):
    async with _serving(tmp_path) as (client, bus):
        _fill(bus, 20)
        reply = await (await client.get("/v1/events", params={"after": "15", "follow": "0"})).json()
        assert [event["seq"] for event in reply["events"]] == [16, 17, 18, 19, 20] and reply["last_seq"] == 20
        reply = await (await client.get("/v1/events", params={"after": "20", "follow": "0"})).json()
        assert reply == {"events": [], "last_seq": 20}


async def test_a_page_is_the_wire_schemas_event_page(tmp_path):
    async with _serving(tmp_path) as (client, bus):
        _fill(bus, 50)
        page = EventPage.from_json(await (await client.get("/v1/events/page", params={"limit": "5"})).json())
        assert [event.seq for event in page.events] == [46, 47, 48, 49, 50] and page.more
        assert page.last_seq == 50 and page.first_kept == 1
        reply = await client.get("/v1/events/page", params={"before": "10", "limit": "100", "box": "t1"})
        page = EventPage.from_json(await reply.json())
        assert [event.seq for event in page.events] == [2, 4, 6, 8] and not page.more


async def test_a_removed_box_is_still_found_by_its_name(tmp_path):
    async with _serving(tmp_path) as (client, bus):
        bus.emit("cccccccccccc", "box.removed", {})
        bus.remember_removed("cccccccccccc", "gone")
        reply = await (await client.get("/v1/events", params={"box": "gone", "follow": "0"})).json()
        assert [event["kind"] for event in reply["events"]] == ["box.removed"]
        reply = await client.get("/v1/events", params={"box": "never", "follow": "0"})
        assert reply.status == 404


async def test_bad_parameters_are_refused_by_name(tmp_path):
    async with _serving(tmp_path) as (client, _):
        for path, params, word in (("/v1/events", {"after": "-1"}, "after"),
                                   ("/v1/events", {"after": "١٢"}, "after"),
                                   ("/v1/events/page", {"before": "x"}, "before"),
                                   ("/v1/events/page", {"limit": "0"}, "events_page"),
                                   ("/v1/events/page", {"limit": "10001"}, "events_page")):
            reply = await client.get(path, params=params)
            assert reply.status == 400
            assert word in (await reply.json())["error"]["message"]


async def test_the_real_daemon_continues_its_sequence_and_serves_any_resume_after_a_restart(tmp_path):
    workspace = make_workspace(tmp_path)
    async with running_daemon(tmp_path, unrecorded=True) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(workspace)})
        await client.remove_box("t1")
        first_bus = daemon.events
    first_life = first_bus.last_seq  # its daemon.stopping included
    async with running_daemon(tmp_path, unrecorded=True) as daemon, daemon.client() as client:
        await client.create_box({"name": "t2", "workspace": str(workspace)})
        last = daemon.events.last_seq
        assert last > first_life + 1  # the sequence went on: the new daemon's first event follows the old's last
        for after in range(0, last + 1):
            seqs = [event.seq for event in await client.stored_events(after=after)]
            assert seqs == list(range(after + 1, last + 1))
        page = await client.event_page(before=first_life + 2, limit=3)
        assert [event.seq for event in page.events] == [first_life - 1, first_life, first_life + 1]
        assert page.events[-1].kind == "daemon.started" and page.more
        got = []
        async for event in client.events(after=first_life - 1):
            got.append(event.seq)
            if event.seq == last:
                break
        assert got == list(range(first_life, last + 1))


async def test_tkbox_events_tail_prints_the_last_events_then_follows_from_them(tmp_path):
    tkbox = str(Path(sys.executable).parent / "tkbox")
    async with running_daemon(tmp_path, unrecorded=True) as daemon:
        for index in range(30):
            daemon.events.emit("", "exec.started", {"n": index})
        env = {**os.environ, "TKBOX_DAEMON_RUNTIME_DIR": str(daemon.config.paths.runtime_dir)}

        async def tkbox_events(*args: str) -> tuple[int, bytes, bytes]:
            process = await asyncio.create_subprocess_exec(
                tkbox, "events", *args, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(process.communicate(), 120)
            return process.returncode or 0, out, err

        last = daemon.events.last_seq
        code, out, err = await tkbox_events("--tail", "3", "--json")
        assert code == 0, err
        assert [json.loads(line)["seq"] for line in out.splitlines()] == [last - 2, last - 1, last]
        code, out, err = await tkbox_events("--tail", "3", "--after", "5")
        assert code == 2 and b"--tail" in err
        code, out, err = await tkbox_events("--tail", "0")
        assert code != 0 and b"events_page" in err
