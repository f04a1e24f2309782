"""``KeyRoutingMixin``: a key follows the focus; one typed right after a key that moved the focus goes where the
focus went.

Textual sends each key to the widget that has the focus when the App reads it (into that widget's message
queue), and runs ordinary bindings only when the key bubbles back up to the App. Keys typed quickly are read
together: ``e`` then ``ls`` sends all three to the boxes table; ``e`` opens the exec panel and focuses its input,
and then ``l`` and ``s`` bubble back from the table and are checked against the panel's bindings — they never
reach the input, so the person's first letters are lost (or, before the panel took the focus at once, ran ``x``
"Stop box?" behind it). The same held for ``:`` and ``/`` and the New box form.

So the App remembers which widget it sent each key to; a key that comes back unhandled after the focus moved
elsewhere is sent again, as a fresh key, to the widget that has the focus now (after the App's priority
bindings, as any key). A key whose first target still has the focus is handled as Textual always does.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from textual import events
from textual.widget import Widget

KEYS_REMEMBERED = 64
"""How many keys in flight the App remembers the first target of (a person types a few ahead at most; the rest
are handled where they were sent)."""


class KeyRoutingMixin:
    """Mixed into ``ConsoleApp`` before ``App``. It wraps ``on_event``; its ``_on_key`` runs before ``App._on_key``
    (Textual calls the ``_on_`` handler of every class in the MRO) and, when it sends the key on, stops the App's
    from running (``prevent_default``)."""

    def _sent_keys(self) -> deque[tuple[events.Key, Widget]]:
        try:
            return self.__sent_keys
        except AttributeError:
            self.__sent_keys: deque[tuple[events.Key, Widget]] = deque(maxlen=KEYS_REMEMBERED)
            return self.__sent_keys

    def _first_target(self, event: events.Key) -> Widget | None:
        for sent, target in self._sent_keys():
            if sent is event:
                return target
        return None

    async def on_event(self, event: events.Event) -> None:
        app: Any = self
        if isinstance(event, events.Key) and not event.is_forwarded and app.is_running:
            try:
                self._sent_keys().append((event, app.focused or app.screen))
            except Exception:  # no screen yet or any more: Textual's own handling decides
                pass
        await super().on_event(event)  # type: ignore[misc]

    async def _on_key(self, event: events.Key) -> None:
        app: Any = self
        target = self._first_target(event)
        focused = app.focused
        if target is not None and focused is not None and focused is not target:
            again = events.Key(event.key, event.character)
            again.time = event.time  # when it was typed: the approval prompt ignores keys typed before it showed
            again.set_sender(app)
            self._sent_keys().append((again, focused))
            event.prevent_default()  # the App's own _on_key would check this key's bindings against the new focus
            if not await app._check_bindings(again.key, priority=True):
                focused._forward_event(again)
