"""A box's egress allowlist while it lives: the current list the proxy reads, and every change to it recorded.

``current`` is an immutable ``Allowlist``: the proxy reads it once for each new connection (``Box.egress_allowlist``),
so a change takes effect on the next connection and never halfway through one. A change (``change``: ``allow``,
``block`` or ``set``, ``egress/allowlist_edit.py``) is refused unless the box is creating, running or held. It is
recorded in the box's run as a trusted must-keep ``tkbox.allowlist`` observation (what changed, who changed it, the
list after it) and announced as the event ``egress.allowlist``. A change that lets anything more through takes
effect only once the signer has kept its record, so no connection is decided under an entry the run does not yet
hold; a change that only narrows the list takes effect at once, then is recorded. A record that cannot be kept
stops the box (``RunRecorder.lose``), and a widening change whose record failed is not made
(``AllowlistNotRecorded``). Changes are made one at a time. When the box starts, the same event says what its list starts with:
the entries (presets expanded), the presets named and their warnings, and the pinned names.

The proxy notes each connection attempt here (``note_attempt``, the latest ``EGRESS_ATTEMPTS_KEPT``), so that a
change can say, before it is made (``dry_run``), which earlier attempts it would have let through.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..egress.allowlist import Allowlist, Attempt, replay
from ..egress.allowlist_edit import AllowlistChange, change
from ..egress.presets import warnings
from ..limits import EGRESS_ATTEMPTS_KEPT
from ..signer_link import SignerCallError
from ..tasks import spawn
from ..wire_egress import AllowlistChangeInfo, AllowlistInfo

if TYPE_CHECKING:
    from .box import Box

ALLOWLIST_SOURCE = "tkbox.allowlist"
EVENT = "egress.allowlist"
CHANGEABLE_STATES = ("creating", "running", "held")


class AllowlistNotLive(RuntimeError):
    """The box no longer runs, so its allowlist is not changed (nothing would read it)."""


class AllowlistNotRecorded(RuntimeError):
    """A change that would let more through could not be recorded: it was not made, and the box stops."""


class LiveAllowlist:
    def __init__(self, box: Box) -> None:
        self.box = box
        self.current = Allowlist.parse(box.settings.allow)
        self.attempts: deque[Attempt] = deque(maxlen=EGRESS_ATTEMPTS_KEPT.default)
        self.held_now: dict[object, Attempt] = {}  # connections held for a person at this moment
        self._changing = asyncio.Lock()  # one change at a time, each made against the list the last one left

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

    def note_held(self, attempt: Attempt) -> object:
        """A connection is held for a person now: the replay counts it until ``release`` (then its outcome is
        noted as an attempt)."""
        token = object()
        self.held_now[token] = attempt
        return token

    def release(self, token: object) -> None:
        self.held_now.pop(token, None)

    async def change(self, action: str, items: Sequence[str], *, by: str,
                     dry_run: bool = False) -> AllowlistChangeInfo:
        """Make (or, with ``dry_run``, only show) a change; raises ``ChangeRefused`` (nothing changed),
        ``AllowlistNotLive`` when the box no longer runs, or ``AllowlistNotRecorded``."""
        async with self._changing:
            if self.box.state not in CHANGEABLE_STATES:
                raise AllowlistNotLive(f"box {self.box.settings.name} is {self.box.state}; its allowlist changes "
                                       "only while it runs")
            made = change(self.current, action, items)
            through = replay(made.before, made.after, [*self.attempts, *self.held_now.values()])
            applied = made.changed and not dry_run
            if applied:
                await self._make(made, by)
        return AllowlistChangeInfo(made.action, by, tuple(e.text for e in made.added),
                                   tuple(e.text for e in made.removed), applied, self.info(), made.presets,
                                   made.notes, tuple({"host": a.host, "port": a.port, "kind": a.kind,
                                                      "outcome": a.outcome} for a in through))

    async def _make(self, made: AllowlistChange, by: str) -> None:
        value: dict[str, Any] = {**made.summary(by[:256]), "entries": made.after.texts()}
        recorder = self.box.recorder
        narrows_only = not made.added
        if narrows_only:
            self.current = made.after
        if recorder is not None:
            try:
                await recorder.observe_kept(ALLOWLIST_SOURCE, value)
            except SignerCallError as exc:
                spawn(recorder.lose(ALLOWLIST_SOURCE, exc.message), name=f"allowlist-lost-{self.box.id}")
                if not narrows_only:
                    raise AllowlistNotRecorded(f"the change could not be recorded in box {self.box.settings.name}'s "
                                               f"run ({exc.message}); it was not made, and the box stops") from None
        if not narrows_only:
            self.current = made.after
        self.box.emit(EVENT, value)
