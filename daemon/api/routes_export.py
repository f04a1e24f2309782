"""Export routes: a stopped box's run as a ``.tkb`` bundle, streamed from the signer; and the signer's trust file.

``POST /v1/boxes/{box}/export`` closes the box's run if needed (``boxes/run_export.py`` says when it refuses), then
answers the bundle's bytes as a chunked body, with its run id, size and SHA-256 in the ``EXPORT_HEADERS``. Every
refusal comes before the first byte, as the API's JSON error. A bundle that stops arriving as the signer announced
it ends the answer without its last chunk (the connection is closed), so the client never receives a complete body
that is not the signer's bundle.

``GET /v1/trust`` answers ``{"trust": document}``: the trust file pinning the signer's keys (public keys only).
"""

from __future__ import annotations

import logging

from aiohttp import web

from ..boxes.run_export import ExportBroken, SignerExport, close_for_export, remember_export
from ..signer_link import AsyncSignerClient, SignerCallError, SignerUnreachable
from ..wire import EXPORT_HEADERS
from .errors import ApiError
from .keys import MANAGER

log = logging.getLogger("tkbox.daemon")
routes = web.RouteTableDef()


def _signer(request: web.Request) -> AsyncSignerClient:
    signer = request.app[MANAGER].signer
    if signer is None:
        raise ApiError(409, "unrecorded", "this daemon runs --unrecorded: no signer records runs or holds keys",
                       hint="start the daemon under a signer: tkbox up")
    return signer


@routes.post("/v1/boxes/{box}/export")
async def export_box(request: web.Request) -> web.StreamResponse:
    box = request.app[MANAGER].get(request.match_info["box"])
    run_id = await close_for_export(box)
    signer = _signer(request)
    try:
        export = await SignerExport.open(signer, run_id)
    except SignerUnreachable as exc:
        raise ApiError(503, "signer_unavailable", f"the signer did not export run {run_id}: {exc.message}",
                       hint="check the signer with: tkbox signer status") from None
    except SignerCallError as exc:
        raise ApiError(409, "export_refused", f"the signer refused to export run {run_id} ({exc.code}): "
                                              f"{exc.message}") from None
    except ExportBroken as exc:
        raise ApiError(502, "export_broken", str(exc)) from None
    response = web.StreamResponse(headers={
        "Content-Type": "application/octet-stream",
        EXPORT_HEADERS["run_id"]: export.run_id,
        EXPORT_HEADERS["sha256"]: export.sha256,
        EXPORT_HEADERS["size"]: str(export.size),
    })
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        async for chunk in export.chunks():
            await response.write(chunk)
    except (ExportBroken, SignerCallError) as exc:
        log.warning("export of box %s (run %s) broke off: %s", box.id, run_id, exc)
        box.emit("gap", {"kind": "export", "reason": f"the export of run {run_id} broke off: {exc}"})
        if request.transport is not None:
            request.transport.close()  # no last chunk: the client sees a body cut short, never a complete one
        return response
    finally:
        await export.finish()
    await response.write_eof()
    remember_export(box, export)
    return response


@routes.get("/v1/trust")
async def trust(request: web.Request) -> web.Response:
    try:
        reply = await _signer(request).call("trust")
    except SignerCallError as exc:
        raise ApiError(503, "signer_unavailable", f"the signer did not give its trust document: {exc.message}",
                       hint="check the signer with: tkbox signer status") from None
    return web.json_response({"trust": reply.get("trust")})
