"""The wire schema of the network door's allowlist, shared by the daemon, the CLI and the console (standard
library only, like ``wire``): a box's allowlist as it is now, and the answer to a change of it.
"""

from __future__ import annotations

from typing import Any

from .wire_record import field, record

ADDRESS_REFUSED_RULE = "egress-address"
"""The rule of an ``egress.refused`` event for an address the proxy refuses whatever the allowlist says: no entry
can let it through (the console says so instead of offering an allow)."""


@record(frozen=True)
class AllowlistInfo:
    """A box's egress allowlist as it is now (``GET /v1/boxes/{box}/allowlist``; ``BoxInfo.allow`` holds the same
    entries): ``entries`` in order, each as written (``host``, ``host:port``, ``*.host``, an IP address, ``!`` before
    a block), the ``presets`` its settings named, and its pinned names (``resolve``). Empty entries: nothing goes
    out without a person (the kill switch)."""

    box_id: str
    box_name: str
    state: str
    entries: tuple[str, ...]
    presets: tuple[str, ...] = ()
    resolve: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"box_id": self.box_id, "box_name": self.box_name, "state": self.state, "entries": list(self.entries),
                "presets": list(self.presets), "resolve": {name: list(a) for name, a in self.resolve.items()}}

    @classmethod
    def from_json(cls, value: Any) -> AllowlistInfo:
        if not isinstance(value, dict) or not all(isinstance(value.get(k), str) for k in ("box_id", "box_name",
                                                                                          "state")):
            raise ValueError("an allowlist has string box_id, box_name and state")
        entries, presets, resolve = value.get("entries"), value.get("presets", []), value.get("resolve", {})
        if not _strings(entries) or not _strings(presets):
            raise ValueError("an allowlist's entries and presets are lists of strings")
        if not isinstance(resolve, dict) or not all(isinstance(k, str) and _strings(v) for k, v in resolve.items()):
            raise ValueError("an allowlist's resolve maps names to lists of addresses")
        return cls(value["box_id"], value["box_name"], value["state"], tuple(entries), tuple(presets),
                   {name: list(addresses) for name, addresses in resolve.items()})


@record(frozen=True)
class AllowlistChangeInfo:
    """The answer to a change of a box's allowlist (``POST /v1/boxes/{box}/allowlist`` with ``allow``, ``block`` or
    ``set``; the event ``egress.allowlist`` carries the same fields but ``would_let_through``): the ``action``, who
    made it (``by``, from the API socket's peer credentials), the entries ``added`` and ``removed``, the
    ``presets`` named, ``notes`` (what needed nothing, what stays blocked, a preset's warning), whether it was
    ``applied`` (false for a dry run or a change that changed nothing), the list after it, and
    ``would_let_through``: the box's earlier attempts held or refused because of the list that the new list admits
    (``{"host", "port", "kind", "outcome"}`` each, oldest first)."""

    action: str
    by: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    applied: bool
    allowlist: AllowlistInfo
    presets: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    would_let_through: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "by": self.by, "added": list(self.added), "removed": list(self.removed),
                "applied": self.applied, "allowlist": self.allowlist.to_json(), "presets": list(self.presets),
                "notes": list(self.notes), "would_let_through": [dict(item) for item in self.would_let_through]}

    @classmethod
    def from_json(cls, value: Any) -> AllowlistChangeInfo:
        if not isinstance(value, dict) or not isinstance(value.get("action"), str) or not isinstance(
                value.get("by"), str) or type(value.get("applied")) is not bool:
            raise ValueError("an allowlist change has string action and by, and boolean applied")
        lists = {key: value.get(key, []) for key in ("added", "removed", "presets", "notes")}
        if not all(_strings(item) for item in lists.values()):
            raise ValueError("an allowlist change's added, removed, presets and notes are lists of strings")
        through = value.get("would_let_through", [])
        if not isinstance(through, list) or not all(isinstance(item, dict) for item in through):
            raise ValueError("an allowlist change's would_let_through is a list of objects")
        return cls(value["action"], value["by"], tuple(lists["added"]), tuple(lists["removed"]), value["applied"],
                   AllowlistInfo.from_json(value.get("allowlist")), tuple(lists["presets"]), tuple(lists["notes"]),
                   tuple(through))


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
