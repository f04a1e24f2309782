"""``ConsoleFooter``: Textual's ``Footer`` with ``?``, ``:`` and ``q`` first and a short word for each key.

Textual's footer lists the focused widget's keys, then the screen's, then the App's, each with its binding's
description, on one row: with the console's descriptions that row is wider than 200 columns, so the App's keys
came last and were cut off — ``?`` and ``:``, the ways to every other key, were never hinted.  This footer puts
``keymap.FOOTER_FIRST`` first and shows ``keymap.FOOTER_HINTS`` words; ``?`` still lists every description.
Whatever does not fit on a narrow terminal is cut from the end (the command palette hint stays at the right).
Before every key comes the pending approvals count (``ApprovalsBadge``): at the left, it is never cut.

Textual composes the footer again at every change of the keys (each move of the focus, each screen change) and
binds each new key to the footer's ``compact`` reactive; it drops the bindings of removed keys only when
``compact`` changes, which here it never does, so every key ever drawn would stay in memory with all it drew
(about 450 objects per recompose, and the garbage collector's full passes, which pause the console, grow with
them: ``bench/console.py``).  ``recompose`` therefore has the reactive checked once more, which drops them.

Textual asks for that recompose at every push and pop of a screen too, though the keys are the same: about twenty
keys made, styled twice each and laid out, just as an approval prompt opens.  ``recompose`` does nothing when what
the footer would draw (every active binding, its key's look, whether it is enabled, its tooltip) is what it drew.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer

from ..keymap import FOOTER_FIRST, FOOTER_HINTS
from .approvals_badge import ApprovalsBadge


class ConsoleFooter(Footer):
    """The footer of every full screen of the console (the main screen, the inbox, the box and event pages)."""

    def compose(self) -> ComposeResult:
        yield ApprovalsBadge()
        widgets: list[Widget] = list(super().compose())  # FooterKeys: each has the ``action`` of its binding
        binding_id = {binding.action: binding.id for _, binding, _, _ in self.screen.active_bindings.values()
                      if binding.id}

        def id_of(widget: Widget) -> str:
            return binding_id.get(getattr(widget, "action", ""), "")

        for widget in widgets:
            if hint := FOOTER_HINTS.get(id_of(widget)):
                widget.description = hint  # type: ignore[attr-defined]

        def rank(widget: Widget) -> int:
            if widget.has_class("-command-palette"):
                return len(FOOTER_FIRST) + 1  # Textual docks it at the right: keep it last
            return FOOTER_FIRST.index(id_of(widget)) if id_of(widget) in FOOTER_FIRST else len(FOOTER_FIRST)

        yield from sorted(widgets, key=rank)  # a stable sort: the other keys keep Textual's order

    _drawn_from: tuple[Any, ...] | None = None
    """What the last recompose drew from (``_keys_to_draw``)."""

    def _keys_to_draw(self) -> tuple[Any, ...]:
        """Everything ``compose`` reads: the screen's active bindings, in order, each with its key's look, whether
        it is enabled and its tooltip; and the footer's own settings."""
        app = self.app
        return (self.compact, self.show_command_palette, tuple(
            (key, binding, app.get_key_display(binding), enabled, tooltip)
            for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()))

    async def recompose(self) -> None:
        if not self.is_attached:
            return  # its screen is gone (Textual's recompose does nothing then either)
        drawn_from = self._keys_to_draw()
        if drawn_from == self._drawn_from and self.is_mounted:
            return  # the same keys: nothing to draw again
        self._drawn_from = drawn_from
        await super().recompose()
        self.mutate_reactive(Footer.compact)  # drops the bindings of the keys just removed (see above)
