"""The event stream: server-sent events, resumable from the last sequence number a client saw.

``GET /v1/events?after=N&box=ID`` (or the ``Last-Event-ID`` header): every event with
seq > N, then live ones; each SSE message's ``id`` is the event's sequence number.
``?follow=0`` returns the stored events as one JSON list instead.
"""

from __future__ import annotations

import contextlib
import json

from aiohttp import web

from ..events import SubscriberTooSlow
from .errors import ApiError
from .keys import EVENTS, MANAGER

routes = web.RouteTableDef()


def _after(request: web.Request) -> int:
    text = request.headers.get("Last-Event-ID") or request.query.get("after") or "0"
    if not text.isdigit() or len(text) > 16:
        raise ApiError(400, "invalid_request", "after / Last-Event-ID must be a sequence number")
    return int(text)


@routes.get("/v1/events")
async def events(request: web.Request) -> web.StreamResponse:
    bus = request.app[EVENTS]
    after = _after(request)
    box_filter = request.query.get("box")
    if box_filter:
        box_filter = request.app[MANAGER].resolve_id(box_filter)
    if request.query.get("follow") == "0":
        stored = [e.to_json() for e in bus.history_after(after) if not box_filter or e.box_id == box_filter]
        return web.json_response({"events": stored, "last_seq": bus.last_seq})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    with contextlib.suppress(ConnectionResetError, SubscriberTooSlow):
        async for event in bus.subscribe(after):
            if box_filter and event.box_id != box_filter:
                continue
            data = json.dumps(event.to_json(), separators=(",", ":"), ensure_ascii=False)
            await response.write(f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n".encode())
    return response
