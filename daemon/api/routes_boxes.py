"""Box routes: list, create, show, stop, remove, diff, and forgetting one of a box's remembered rules."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .. import strictjson
from .errors import ApiError
from .keys import MANAGER
from .routes_approvals import operator_of

MAX_BODY_BYTES = 1 << 20
routes = web.RouteTableDef()


async def read_json_object(request: web.Request) -> dict[str, Any]:
    body = await request.content.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, "too_large", f"a request body is at most {MAX_BODY_BYTES} bytes")
    try:
        return strictjson.loads_object(body or b"{}", max_bytes=MAX_BODY_BYTES)
    except strictjson.StrictJSONError as exc:
        raise ApiError(400, "invalid_request", f"the body is not one strict JSON object: {exc}") from None


@routes.get("/v1/health")
async def health(request: web.Request) -> web.Response:
    return web.json_response(request.app[MANAGER].health())


@routes.get("/v1/boxes")
async def list_boxes(request: web.Request) -> web.Response:
    return web.json_response({"boxes": [info.to_json() for info in request.app[MANAGER].list()]})


@routes.post("/v1/boxes")
async def create_box(request: web.Request) -> web.Response:
    settings = await read_json_object(request)
    info = await request.app[MANAGER].create(settings)
    return web.json_response(info.to_json(), status=201)


@routes.get("/v1/boxes/{box}")
async def show_box(request: web.Request) -> web.Response:
    return web.json_response(request.app[MANAGER].get(request.match_info["box"]).info().to_json())


@routes.post("/v1/boxes/{box}/stop")
async def stop_box(request: web.Request) -> web.Response:
    info = await request.app[MANAGER].stop(request.match_info["box"], reason="stopped by the operator")
    return web.json_response(info.to_json())


@routes.delete("/v1/boxes/{box}")
async def remove_box(request: web.Request) -> web.Response:
    info = await request.app[MANAGER].remove(request.match_info["box"])
    return web.json_response(info.to_json())


@routes.get("/v1/boxes/{box}/diff")
async def box_diff(request: web.Request) -> web.Response:
    patch, summary, source = await request.app[MANAGER].diff(request.match_info["box"])
    if request.query.get("format") == "json":
        return web.json_response({"source": source, "summary": summary, "patch": patch.decode("utf-8", "replace")})
    return web.Response(body=patch, content_type="text/x-diff",
                        headers={"X-Tkbox-Patch-Source": source, "X-Tkbox-Files": json.dumps(len(summary))})


@routes.delete("/v1/boxes/{box}/remembered/{rule}")
async def forget_remembered_rule(request: web.Request) -> web.Response:
    """Forget one remembered rule: later asks it covered wait for a person again (recorded in the box's run)."""
    box = request.app[MANAGER].get(request.match_info["box"])
    rule_id = request.match_info["rule"]
    removed = box.approvals.forget(rule_id, by=operator_of(request))
    if removed is None:
        raise ApiError(404, "not_found", f"remembered rule {rule_id[:40]!r} not found in box {box.settings.name}; "
                                         "a box's remembered rules are listed by tkbox ls --json (remembered)")
    return web.json_response({"removed": removed.to_json()})
