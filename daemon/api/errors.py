"""API errors: one JSON shape ``{"error": {"code", "message"}}`` with an HTTP status, raised anywhere in a handler."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..wire import error_body


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra

    def response(self) -> web.Response:
        return web.json_response(error_body(self.code, self.message, **self.extra), status=self.status)


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} not found; list boxes with: tkbox ls")


@web.middleware
async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every failure leaves as the JSON error shape, never as HTML or a dropped connection."""
    try:
        return await handler(request)
    except ApiError as error:
        return error.response()
    except web.HTTPException as http:
        if http.status < 400:
            raise
        return web.json_response(error_body(http.reason.lower().replace(" ", "_"), http.text or http.reason),
                                 status=http.status)
