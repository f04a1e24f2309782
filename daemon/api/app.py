"""The daemon's aiohttp application: ``create_app(config)`` for the daemon, tests and e2e alike.

Shared state lives in typed ``AppKey``s; the event bus, the signer link and the box
manager are set up and torn down in one ``cleanup_ctx`` (shutdown stops every box and
closes every run before the event log is closed, so no event is lost).  A clean stop
first answers every pending approval ``lost`` (recorded), before the handlers of the
execs that wait for them are waited for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from ..box.backend import BoxBackend
from ..boxes.box import BoxOperationError
from ..boxes.manager import BoxManager
from ..config import DaemonConfig
from ..events import EventBus
from ..signer_link import AsyncSignerClient
from .errors import ApiError, json_errors
from .keys import EVENTS, MANAGER
from .peer import peer_check
from .routes_allowlist import routes as allowlist_routes
from .routes_apply import routes as apply_routes
from .routes_approvals import routes as approval_routes
from .routes_boxes import routes as box_routes
from .routes_events import routes as event_routes
from .routes_exec import routes as exec_routes
from .routes_execs import routes as execs_routes
from .routes_export import routes as export_routes
from .routes_host import REPORT
from .routes_host import routes as host_routes


@web.middleware
async def box_errors(request: web.Request, handler: object) -> web.StreamResponse:
    try:
        return await handler(request)  # type: ignore[operator]
    except BoxOperationError as error:
        raise ApiError(error.status, error.code, str(error)) from None


def create_app(config: DaemonConfig, backend: BoxBackend) -> web.Application:
    app = web.Application(middlewares=[json_errors, peer_check(config.allowed_uids), box_errors],
                          client_max_size=2 << 20)
    app.add_routes(box_routes)
    app.add_routes(event_routes)
    app.add_routes(exec_routes)
    app.add_routes(execs_routes)
    app.add_routes(approval_routes)
    app.add_routes(apply_routes)
    app.add_routes(export_routes)
    app.add_routes(allowlist_routes)
    app.add_routes(host_routes)
    app[REPORT] = {}

    async def daemon_state(app: web.Application) -> AsyncIterator[None]:
        config.paths.ensure()
        events = EventBus(config.paths.state_dir)
        await asyncio.to_thread(events.open)  # indexes the event history (reads the files through once)
        signer = None if config.unrecorded else AsyncSignerClient(config.signer.socket)
        manager = BoxManager(config, events, signer, backend)
        app[EVENTS] = events
        app[MANAGER] = manager
        events.emit("", "daemon.started", {"recorded": signer is not None, "backend": backend.name})
        if signer is None:
            events.emit("", "daemon.unrecorded", {"warning": "started with --unrecorded: nothing is decided or "
                                                             "recorded"})
        manager.pool.fill_soon()  # boxes started ahead (boxes/pool.py), in the background
        yield
        await manager.shutdown()
        events.close_subscribers()
        if signer is not None:
            await signer.close()
        events.close()

    async def close_event_streams(app: web.Application) -> None:
        app[EVENTS].emit("", "daemon.stopping", {})
        # Held execs end now (refused, their approvals lost and recorded), so their handlers are not waited for.
        await app[MANAGER].approvals.lose_all("the daemon stopped before anyone answered")
        app[EVENTS].close_subscribers()  # open event streams end now, before the handlers are waited for

    app.cleanup_ctx.append(daemon_state)
    app.on_shutdown.append(close_event_streams)
    return app
