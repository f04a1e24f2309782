"""A box's execs for its page: ``GET /v1/boxes/{box}/execs`` lists them (oldest first) with the per-box output
budget; ``GET /v1/boxes/{box}/execs/{id}`` is one exec with the tails of its output (base64).

What is kept, for how long and within which limits: ``daemon/boxes/exec_history.py`` and docs/limits.md.
"""

from __future__ import annotations

from aiohttp import web

from .errors import not_found
from .keys import MANAGER

routes = web.RouteTableDef()
MAX_EXEC_ID_DIGITS = 12


@routes.get("/v1/boxes/{box}/execs")
async def list_execs(request: web.Request) -> web.Response:
    box = request.app[MANAGER].get(request.match_info["box"])
    history = box.exec_history
    return web.json_response({"execs": [info.to_json() for info in history.execs()],
                              "kept_bytes": history.kept_bytes, "budget_bytes": history.budget.limit,
                              "tail_bytes": history.tail_bytes})


@routes.get("/v1/boxes/{box}/execs/{exec}")
async def exec_output(request: web.Request) -> web.Response:
    box = request.app[MANAGER].get(request.match_info["box"])
    text = request.match_info["exec"]
    output = None
    if text.isascii() and text.isdigit() and len(text) <= MAX_EXEC_ID_DIGITS:
        output = box.exec_history.output(int(text))
    if output is None:
        raise not_found(f"exec {text[:40]!r} of box {box.settings.name}")
    return web.json_response(output.to_json())
