"""Host route: ``GET /v1/host`` → ``HostReport`` (``wire_host.py``), what this host gives a box (``tkbox doctor``,
the console's daemon page). The checks start a sandbox once, so they run in a thread, once per daemon, and again
only when asked (``?refresh=true``); concurrent requests share one run.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from ..host_checks import host_report
from ..wire_host import HostReport
from .errors import ApiError

routes = web.RouteTableDef()
REPORT: web.AppKey[dict[str, asyncio.Task[HostReport]]] = web.AppKey("host_report")


@routes.get("/v1/host")
async def show_host(request: web.Request) -> web.Response:
    refresh = request.query.get("refresh", "false")
    if refresh not in ("true", "false"):
        raise ApiError(400, "invalid_request", "refresh is true or false")
    tasks = request.app[REPORT]
    task = tasks.get("report")
    if task is None or (refresh == "true" and task.done()):
        task = tasks["report"] = asyncio.ensure_future(asyncio.to_thread(host_report, refresh=refresh == "true"))
    report = await asyncio.shield(task)
    return web.json_response(report.to_json())
