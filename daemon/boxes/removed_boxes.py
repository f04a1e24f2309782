"""A removed box leaves nothing in the daemon's memory: ``forget_removed_box`` drops it from every lookup by box id.

Everything a box holds (its exec history and output rings, live allowlist, remembered rules, links) hangs off its
``Box``; the daemon reaches a box through the manager's ``boxes``, the approvals registry's per-box rate window and
the event bus's per-box files.  Once a removal is done (the box is ``removed`` and gone from the API), the manager
calls ``forget_removed_box`` and the box is in none of them; the event bus still resolves its name to its id for a
while (``tkbox events NAME`` after ``tkbox rm NAME``), and its events stay in the history and in its state
directory.  ``box_lookups`` counts what each lookup holds, for tests and the soak bench.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..approvals.registry import ApprovalRegistry
from ..events import EventBus


class BoxLookups(Protocol):
    """What of ``BoxManager`` this module reads (the manager itself is not imported: it imports this module)."""

    boxes: dict[str, Any]
    approvals: ApprovalRegistry
    events: EventBus


def forget_removed_box(manager: BoxLookups, box_id: str) -> None:
    """Drop the removed box ``box_id`` from every lookup; a box that is not removed stays (nothing happens)."""
    box = manager.boxes.get(box_id)
    if box is not None and box.state != "removed":
        return
    if box is not None:
        del manager.boxes[box_id]
        manager.events.remember_removed(box_id, box.settings.name)
    manager.approvals.forget_box(box_id)
    manager.events.detach_box(box_id)


def box_lookups(manager: BoxLookups) -> dict[str, int]:
    """How many boxes each lookup by box id holds (all zero once every box is removed and forgotten)."""
    return {"boxes": len(manager.boxes), "approval_windows": manager.approvals.boxes_tracked(),
            **{f"events_{name}": count for name, count in manager.events.box_lookups().items()}}
