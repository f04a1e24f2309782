"""Allowlist routes: show a box's egress allowlist, and change it while the box runs (docs/egress.md).

``GET /v1/boxes/{box}/allowlist`` → ``AllowlistInfo``. ``POST /v1/boxes/{box}/allowlist`` with exactly one of
``{"allow": [HOST…]}``, ``{"block": [HOST…]}`` or ``{"set": [ENTRY…]}`` (``[]`` empties the list: the kill switch),
and ``"dry_run": true`` to see the change and what it would have let through without making it →
``AllowlistChangeInfo``. The change carries the operator's identity from the API socket's peer credentials (a box
cannot reach this socket), is recorded in the box's run (``tkbox.allowlist``) and announced (``egress.allowlist``).
400 ``invalid_allowlist``: an entry is wrong, or a narrower allow under a wider block (nothing changed); 409
``box_not_running``: the box no longer runs; 503 ``not_recorded``: a change letting more through could not be
recorded (not made; the box stops).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..boxes.live_allowlist import AllowlistNotLive, AllowlistNotRecorded
from ..egress.allowlist_edit import ACTIONS, ChangeRefused
from ..limits import ALLOWLIST_ENTRIES
from .errors import ApiError
from .keys import MANAGER
from .routes_approvals import operator_of
from .routes_boxes import read_json_object

routes = web.RouteTableDef()
HINT = "see the box's list with: tkbox allowlist BOX"


@routes.get("/v1/boxes/{box}/allowlist")
async def show_allowlist(request: web.Request) -> web.Response:
    box = request.app[MANAGER].get(request.match_info["box"])
    return web.json_response(box.allowlist.info().to_json())


@routes.post("/v1/boxes/{box}/allowlist")
async def change_allowlist(request: web.Request) -> web.Response:
    action, items, dry_run = parse_change(await read_json_object(request))
    box = request.app[MANAGER].get(request.match_info["box"])
    try:
        answer = await box.allowlist.change(action, items, by=operator_of(request), dry_run=dry_run)
    except ChangeRefused as exc:
        raise ApiError(400, "invalid_allowlist", str(exc), hint=HINT) from None
    except AllowlistNotLive as exc:
        raise ApiError(409, "box_not_running", str(exc)) from None
    except AllowlistNotRecorded as exc:
        raise ApiError(503, "not_recorded", str(exc), hint="see why with: tkbox events BOX") from None
    return web.json_response(answer.to_json())


def parse_change(body: dict[str, Any]) -> tuple[str, list[str], bool]:
    """The action, its items and ``dry_run`` from a change's body; raises ApiError naming what is wrong."""
    unknown = sorted(set(body) - {*ACTIONS, "dry_run"})
    if unknown:
        raise ApiError(400, "invalid_request", f"unknown field {unknown[0][:40]!r}; a change is one of "
                                               f"{', '.join(ACTIONS)} (a list of hosts), and dry_run")
    actions = [action for action in ACTIONS if action in body]
    if len(actions) != 1:
        raise ApiError(400, "invalid_request", f"a change has exactly one of {', '.join(ACTIONS)}")
    items = body[actions[0]]
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ApiError(400, "invalid_request", f"{actions[0]} is a list of strings (hosts or entries)")
    if len(items) > ALLOWLIST_ENTRIES.default:
        raise ApiError(400, "invalid_allowlist", ALLOWLIST_ENTRIES.refusal(f"{len(items)} items in one change"))
    dry_run = body.get("dry_run", False)
    if type(dry_run) is not bool:
        raise ApiError(400, "invalid_request", "dry_run is true or false")
    return actions[0], items, dry_run
