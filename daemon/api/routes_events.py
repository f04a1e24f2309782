"""The event stream: server-sent events, resumable from the last sequence number a client saw, and pages of history.

``GET /v1/events?after=N&box=ID`` (or the ``Last-Event-ID`` header): every event with seq > N, then live ones;
each SSE message's ``id`` is the event's sequence number.  ``?follow=0`` returns the stored events as one JSON
object (``{"events": [...], "last_seq": N}``) instead.  ``GET /v1/events/page?before=SEQ&limit=N&box=ID``: the
last N events before SEQ (the newest without it), oldest first, as a ``wire.EventPage``.

Old events are read from the history files in a thread (``EventBus.batches``, ``EventBus.page``) and sent as
they are stored, a batch per write: a client reading a long history never holds up the daemon's other calls.
"""

from __future__ import annotations

import contextlib

from aiohttp import web

from ..event_history import StoredEvent
from ..limits import EVENTS_PAGE
from .errors import ApiError
from .keys import EVENTS, MANAGER

routes = web.RouteTableDef()
PAGE_DEFAULT = 500


def _sequence_number(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 16:
        raise ApiError(400, "invalid_request", f"{what} must be a sequence number (digits only)")
    return int(text)


def _after(request: web.Request) -> int:
    return _sequence_number(request.headers.get("Last-Event-ID") or request.query.get("after") or "0",
                            "after / Last-Event-ID")


def _box_filter(request: web.Request) -> str | None:
    """The box id of ``?box=`` (id or name; a removed box's too: its events stay readable)."""
    ref = request.query.get("box")
    if not ref:
        return None
    try:
        return request.app[MANAGER].resolve_id(ref)
    except ApiError as error:
        removed = request.app[EVENTS].removed_box_id(ref)
        if error.status != 404 or removed is None:
            raise
        return removed


def _sse(event: StoredEvent) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (event.seq, event.kind.encode(), event.line)


@routes.get("/v1/events")
async def events(request: web.Request) -> web.StreamResponse:
    bus = request.app[EVENTS]
    after = _after(request)
    box_filter = _box_filter(request)
    if request.query.get("follow") == "0":
        return await _stored(request, after, box_filter)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    with contextlib.suppress(ConnectionResetError):
        async for batch in bus.batches(after, box_filter):
            await response.write(b"".join(map(_sse, batch)))
    return response


async def _stored(request: web.Request, after: int, box_filter: str | None) -> web.StreamResponse:
    """The stored events after ``after`` as one JSON object, written as the history is read."""
    bus = request.app[EVENTS]
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    separator = b""
    await response.write(b'{"events":[')
    async for batch in bus.batches(after, box_filter, follow=False):
        await response.write(separator + b",".join(event.line for event in batch))
        separator = b","
    await response.write(b'],"last_seq":%d}' % bus.last_seq)
    await response.write_eof()
    return response


@routes.get("/v1/events/page")
async def events_page(request: web.Request) -> web.Response:
    bus = request.app[EVENTS]
    before_text = request.query.get("before")
    before = _sequence_number(before_text, "before") if before_text is not None else None
    limit = _sequence_number(request.query.get("limit", str(PAGE_DEFAULT)), "limit")
    if not 1 <= limit <= EVENTS_PAGE.default:
        raise ApiError(400, "invalid_request", EVENTS_PAGE.refusal(f"limit {limit} asked; ask for 1 to "
                                                                   f"{EVENTS_PAGE.default}"))
    page = await bus.page(before, limit, _box_filter(request))
    body = b'{"events":[%s],"last_seq":%d,"first_kept":%d,"more":%s}' % (
        b",".join(event.line for event in page["events"]), page["last_seq"], page["first_kept"],
        b"true" if page["more"] else b"false")
    return web.Response(body=body, content_type="application/json")
