"""``CommandBar``: the one-line input for ``:`` commands and ``/`` filters, hidden until asked for.

In command mode Tab completes (``command_mode.completions``): the bar asks the App (``CompletionRequested``), which
knows the box and theme names, and the App answers with ``complete_with``.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import Input

from ...terminal_text import safe_text
from ..command_mode import PLACEHOLDER, next_completion

PROMPTS = {"command": ":", "filter": "/"}


class CommandBar(Input):
    """Opens in a mode (``command`` or ``filter``); Enter posts ``Entered``, Escape closes without effect."""

    # In the screen's flow above the footer, not docked: a second widget docked at the bottom would lie under the
    # footer.  Its one-row look while focused is in styles/base.tcss (Textual's Input:focus border hid the text).
    DEFAULT_CSS = """
    CommandBar { display: none; border: none; height: 1; padding: 0 1; }
    CommandBar.-open { display: block; }
    """

    @dataclass
    class Entered(Message):
        """The operator entered a command or a filter."""

        mode: str
        text: str

    @dataclass
    class CompletionRequested(Message):
        """Tab in command mode: the App answers with ``bar.complete_with(candidates)``."""

        bar: CommandBar
        text: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.mode = "command"
        self._typed = ""
        self._cycle: tuple[str, str] | None = None
        """(what was typed, what Tab made of it) while Tab cycles among several completions."""

    def open(self, mode: str, text: str = "") -> None:
        self.mode = mode
        self.placeholder = {"command": PLACEHOLDER,
                            "filter": "box:NAME kind:PREFIX regex; ! first inverts; empty clears"}[mode]
        self.value = text
        self.add_class("-open")
        # At once, not as ``focus()`` does (after the messages already queued): keys typed right after : or / are
        # already queued, and would otherwise reach the pane behind (``d`` of "/denied" opened "Remove box?").
        self.screen.set_focus(self)

    def close(self) -> None:
        self.remove_class("-open")
        self.value = ""
        self.screen.focus_next()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        mode = self.mode
        # A filter keeps its spacing: EventFilter.parse trims it, except a trailing space escaped with a backslash.
        text = self.value if mode == "filter" else self.value.strip()
        self.close()
        self.post_message(self.Entered(mode, text))

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            event.stop()
            self.close()
        elif event.key == "tab" and self.mode == "command":
            event.stop()
            event.prevent_default()
            # Tab again after a completion among several: complete from what was typed, so Tab cycles
            cycling = self._cycle is not None and self.value == self._cycle[1]
            self._typed = self._cycle[0] if cycling and self._cycle else self.value
            self.post_message(self.CompletionRequested(self, self._typed))

    def complete_with(self, candidates: list[str]) -> None:
        """One Tab press's work (``command_mode.next_completion``); several candidates are also listed."""
        if not candidates:
            self.notify("nothing to complete", severity="warning", timeout=3)
            return
        self.value = next_completion(self.value, candidates)
        self.cursor_position = len(self.value)
        self._cycle = (self._typed, self.value) if len(candidates) > 1 else None
        if len(candidates) > 1:
            self.notify("  ".join(safe_text(candidate.strip()) for candidate in candidates[:20]), title="Tab",
                        timeout=4, markup=False)
