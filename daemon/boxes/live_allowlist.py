"""A box's egress allowlist while it lives: the current list the proxy reads, and every change to it recorded.

``current`` is an immutable ``Allowlist``: the proxy reads it once for each new connection (``Box.egress_allowlist``),
so a change takes effect on the next connection and never halfway through one. A change (``change``: ``allow``,
``block`` or ``set``, ``egress/allowlist_edit.py``) is refused unless the box is creating, running or held; once
made it is recorded in the box's run as a trusted must-keep ``tkbox.allowlist`` observation (what changed, who
changed it, the list after it) and announced as the event ``egress.allowlist``. A record that cannot be kept stops
the box (``RunRecorder.observe_must_keep``). When the box starts, the same event says what its list starts with:
the entries (presets expanded), the presets named and their warnings, and the pinned names.

The proxy notes each connection attempt here (``note_attempt``, the latest ``EGRESS_ATTEMPTS_KEPT``), so that a
change can say, before it is made (``dry_run``), which earlier attempts it would have let through.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..egress.allowlist import Allowlist, Attempt, replay
from ..egress.allowlist_edit import AllowlistChange, change
from ..egress.presets import warnings
from ..limits import EGRESS_ATTEMPTS_KEPT
from ..wire_egress import AllowlistChangeInfo, AllowlistInfo

if TYPE_CHECKING:
    from .box import Box

ALLOWLIST_SOURCE = "tkbox.allowlist"
EVENT = "egress.allowlist"
CHANGEABLE_STATES = ("creating", "running", "held")


class AllowlistNotLive(RuntimeError):
    """The box no longer runs, so its allowlist is not changed (nothing would read it)."""


class LiveAllowlist:
    def __init__(self, box: Box) -> None:
        self.box = box
        self.current = Allowlist.parse(box.settings.allow)
        self.attempts: deque[Attempt] = deque(maxlen=EGRESS_ATTEMPTS_KEPT.default)

    def info(self) -> AllowlistInfo:
        settings = self.box.settings
        return AllowlistInfo(self.box.id, settings.name, self.box.state, tuple(self.current.texts()),
                             settings.allow_presets, {name: list(addresses) for name, addresses in
                                                      settings.resolve.items()})

    def announce_start(self) -> None:
        """The event saying what the box's list starts with (its run's ``tkbox.box`` record holds the same)."""
        settings = self.box.settings
        self.box.emit(EVENT, {"action": "start", "by": "settings", "entries": self.current.texts(),
                              "presets": list(settings.allow_presets), "notes": warnings(settings.allow_presets),
                              "resolve": {name: list(addresses) for name, addresses in settings.resolve.items()},
                              "count": len(self.current)})

    def note_attempt(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)

    def change(self, action: str, items: Sequence[str], *, by: str, dry_run: bool = False) -> AllowlistChangeInfo:
        """Make (or, with ``dry_run``, only show) a change; raises ``ChangeRefused`` (nothing changed) or
        ``AllowlistNotLive`` when the box no longer runs."""
        if self.box.state not in CHANGEABLE_STATES:
            raise AllowlistNotLive(f"box {self.box.settings.name} is {self.box.state}; its allowlist changes only "
                                   "while it runs")
        made = change(self.current, action, items)
        through = replay(made.before, made.after, self.attempts)
        applied = made.changed and not dry_run
        if applied:
            self.current = made.after
            self._record(made, by)
        return AllowlistChangeInfo(made.action, by, tuple(e.text for e in made.added),
                                   tuple(e.text for e in made.removed), applied, self.info(), made.presets,
                                   made.notes, tuple({"host": a.host, "port": a.port, "kind": a.kind,
                                                      "outcome": a.outcome} for a in through))

    def _record(self, made: AllowlistChange, by: str) -> None:
        value: dict[str, Any] = {**made.summary(by[:256]), "entries": made.after.texts()}
        recorder = self.box.recorder
        if recorder is not None and not recorder.closed:
            recorder.observe_must_keep(ALLOWLIST_SOURCE, value, trust="trusted")
        self.box.emit(EVENT, value)
