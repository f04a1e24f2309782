"""Who is calling: the API socket's peer uid (SO_PEERCRED); only the daemon's own uid and root are served."""

from __future__ import annotations

import socket
import struct
from typing import Any

from aiohttp import web

from .errors import ApiError


def peer_uid_of(request: web.Request) -> int | None:
    transport = request.transport
    if transport is None:
        return None
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def peer_check(allowed_uids: frozenset[int]) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        uid = peer_uid_of(request)
        if uid is not None and uid not in allowed_uids:
            raise ApiError(403, "forbidden", f"uid {uid} may not use this daemon")
        return await handler(request)

    return middleware
