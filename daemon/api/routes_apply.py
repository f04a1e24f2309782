"""``POST /v1/boxes/{box}/apply``: the changes door — a stopped box's patch, file by file, into its checkout.

The body is ``{"dry_run": bool, "only": [path, …], "allow_sensitive": bool}`` (each optional; ``only`` lists the
patch's paths to apply, the rest are declined). The answer is JSON lines (``daemon/wire_apply.py``): ``held``
lines while files wait for a person, then one ``report``. Problems with the request itself (an unknown box, a box
that is not stopped, a bad body, another apply of the same box under way) are API errors before the stream
starts; everything about the patch and the checkout is in the report.

A client that goes away while files are held withdraws their approvals: nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web

from ..boxes.apply import ApplyOptions, ApplySession, apply_box_patch, begin_apply, end_apply
from ..limits import APPLY_ONLY_PATHS
from ..tasks import spawn
from ..wire import ApprovalInfo
from .errors import ApiError
from .keys import MANAGER
from .routes_boxes import read_json_object

routes = web.RouteTableDef()
DISCONNECT_CHECK_SECONDS = 0.5  # how often a held apply looks whether its client is still there


def parse_options(body: dict[str, Any]) -> ApplyOptions:
    """The request's options, strictly: unknown fields and wrong types are refused with the field named."""
    unknown = sorted(set(body) - {"dry_run", "only", "allow_sensitive"})
    if unknown:
        raise ApiError(400, "invalid_request", f"unknown field(s) {', '.join(map(repr, unknown))}; an apply takes "
                                               "dry_run, only and allow_sensitive")
    for name in ("dry_run", "allow_sensitive"):
        if not isinstance(body.get(name, False), bool):
            raise ApiError(400, "invalid_request", f"{name} must be true or false")
    only = body.get("only")
    if only is not None:
        if not isinstance(only, list) or not all(isinstance(path, str) and path for path in only):
            raise ApiError(400, "invalid_request", "only must be a list of the patch's paths (non-empty strings)")
        if len(only) > APPLY_ONLY_PATHS.default:
            raise ApiError(413, "too_large", f"only lists at most {APPLY_ONLY_PATHS.default} paths; apply the patch "
                                             "in parts, or without only")
        only = tuple(dict.fromkeys(only))
    return ApplyOptions(dry_run=body.get("dry_run", False), only=only,
                        allow_sensitive=body.get("allow_sensitive", False))


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


@routes.post("/v1/boxes/{box}/apply")
async def apply_patch(request: web.Request) -> web.StreamResponse:
    options = parse_options(await read_json_object(request))
    manager = request.app[MANAGER]
    box = manager.get(request.match_info["box"])
    session = begin_apply(box, options)  # refuses a box that is not stopped, or one already applying
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)

    async def on_held(path: str, approval: ApprovalInfo) -> None:
        await response.write(_line({"type": "held", "path": path, "approval": approval.to_json()}))

    work = spawn(apply_box_patch(box, session, on_held=on_held), name=f"apply-{box.id}")
    watcher = spawn(_cancel_when_client_leaves(request, session, work), name=f"apply-client-{box.id}")
    try:
        report = await work
    finally:
        watcher.cancel()
        end_apply(box, session)
    with contextlib.suppress(ConnectionError):
        await response.write(_line({"type": "report", "report": report.to_json()}))
        await response.write_eof()
    return response


async def _cancel_when_client_leaves(request: web.Request, session: ApplySession, work: asyncio.Task[Any]) -> None:
    """Cancel the apply when its client's connection closes before the writing begins (aiohttp does not cancel
    handlers on its own): a cancelled apply withdraws what is held and writes nothing. A write once begun ends and
    is recorded whether or not anyone reads the report."""
    while not work.done() and not session.writing:
        transport = request.transport
        if transport is None or transport.is_closing():
            work.cancel()
            return
        await asyncio.sleep(DISCONNECT_CHECK_SECONDS)
