"""Approval routes: list them, show one, answer one (docs/approvals.md).

``GET /v1/approvals[?box=NAME_OR_ID][&state=STATE]`` → ``{"approvals": [ApprovalInfo…]}``, oldest first: every
pending one and the answered ones still kept.  ``GET /v1/approvals/{id}`` → one.  ``POST /v1/approvals/{id}`` with
``{"answer": "approve"|"reject", "reason"?, "remember"?}`` → the answered approval; the answer carries the
operator's identity from the API socket's peer credentials (nothing else names who answered, and a box cannot
reach this socket).  409 ``approval_answered`` / ``approval_expired`` change nothing; 503 ``record_refused``: the
signer did not keep the answer's record, so the action was refused and its box stopped.
"""

from __future__ import annotations

import pwd
from collections.abc import Callable

from aiohttp import web

from ..approvals.answer_body import MAX_BODY_BYTES, InvalidAnswer, parse_answer
from ..approvals.registry import ApprovalConflict, ApprovalNotFound, ApprovalRegistry, RecordRefused
from ..wire import APPROVAL_STATES, ApprovalInfo
from .errors import ApiError
from .keys import MANAGER
from .peer import peer_uid_of

routes = web.RouteTableDef()
QUERY_KEYS = ("box", "state")


def operator_name(uid: int) -> str:
    """``uid 1000 (alice)``, or ``uid 1000`` for a uid with no name on this host."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def operator_of(request: web.Request) -> str:
    """Who is calling, from the socket's peer credentials; refused when they cannot be read (never guessed)."""
    uid = peer_uid_of(request)
    if uid is None:
        raise ApiError(403, "forbidden", "an answer needs the caller's identity from the API socket's peer "
                                         "credentials, and this connection has none; answer through the daemon's "
                                         "Unix socket (tkbox approve ID)")
    return operator_name(uid)


@routes.get("/v1/approvals")
async def list_approvals(request: web.Request) -> web.Response:
    unknown = sorted(key for key in request.query if key not in QUERY_KEYS)
    if unknown:
        raise ApiError(400, "invalid_request", f"unknown query parameter {unknown[0][:40]!r}; use box and state")
    state = request.query.get("state")
    if state is not None and state not in APPROVAL_STATES:
        raise ApiError(400, "invalid_request", f"state is one of {', '.join(APPROVAL_STATES)}")
    manager = request.app[MANAGER]
    box = request.query.get("box")
    box_id = manager.resolve_id(box) if box else None
    listed = manager.approvals.list(box_id=box_id, state=state)
    return web.json_response({"approvals": [info.to_json() for info in listed]})


@routes.get("/v1/approvals/{approval}")
async def show_approval(request: web.Request) -> web.Response:
    try:
        info = request.app[MANAGER].approvals.get(request.match_info["approval"])
    except ApprovalNotFound as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    return web.json_response(info.to_json())


@routes.post("/v1/approvals/{approval}")
async def answer_approval(request: web.Request) -> web.Response:
    body = await request.content.read(MAX_BODY_BYTES + 1)
    info = await answer_from_body(request.app[MANAGER].approvals, request.match_info["approval"], body,
                                  lambda: operator_of(request))
    return web.json_response(info.to_json())


async def answer_from_body(registry: ApprovalRegistry, approval_id: str, body: bytes,
                           operator: Callable[[], str]) -> ApprovalInfo:
    """Parse the body, name the caller, answer: every refusal is an ApiError, and a refused body changes nothing
    (it is refused before the approval is looked at)."""
    try:
        answer = parse_answer(body)
    except InvalidAnswer as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    by = operator()
    try:
        return await registry.answer(approval_id, answer.answer, by=by, reason=answer.reason,
                                     remember=answer.remember)
    except ApprovalNotFound as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except ApprovalConflict as exc:
        raise ApiError(409, exc.code, str(exc), hint="list the pending ones with: tkbox approvals") from None
    except RecordRefused as exc:
        raise ApiError(503, "record_refused", f"the signer did not keep the record of this answer ({exc}): the "
                                              "action was refused and its box stopped",
                       hint="see why with: tkbox events BOX; start the signer with: tkbox signer up") from None
