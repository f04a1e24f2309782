"""``ApprovalPrompt``: the modal that pops up when an approval arrives, wherever the operator is: what is asked,
by which box, under which rule and why, held for how long and a live countdown to expiry; ``1 of 3`` when several
wait.  ``a`` approves (one key), ``r`` approves and remembers, ``x`` rejects with an optional reason, ``A``
approves all (asks first), Esc is "later" (closed; still pending in the inbox and the count).

The App decides when it opens and which keys reach it (``prompt_gate``, ``approval_actions``); this screen shows
the head of the App's ``prompt_queue`` and forwards the keys.  Box text is escaped (``approval_text``) and shown as
``Text``, never read as markup.
"""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from ...terminal_text import clip
from ..approval_text import detail_lines
from ..key_names import key_label
from ..keymap import bindings_for

ASKS_SHOWN = 600
"""Characters of what is asked that the prompt shows (the inbox's details show it whole)."""
PROMPT_WORDS = {"prompt.approve": "approve", "prompt.remember": "approve & remember", "prompt.reject": "reject…",
                "prompt.approve_all": "approve all…", "prompt.later": "later"}
"""The prompt's key hints, by binding id, in this order."""


class ApprovalPrompt(ModalScreen[None]):
    """Shows ``app.prompt_queue[0]``; ``show_queue`` moves it on (or closes it when the queue is empty)."""

    BINDINGS = bindings_for("prompt")
    DEFAULT_CSS = """
    ApprovalPrompt { align: center middle; }
    ApprovalPrompt > Vertical { width: 78; max-width: 100%; height: auto; max-height: 100%;
                                border: thick $verdict-ask; background: $surface; padding: 0 1; }
    ApprovalPrompt #prompt-title { width: 100%; text-style: bold; color: $verdict-ask; }
    ApprovalPrompt #prompt-body { width: 100%; margin-top: 1; }
    ApprovalPrompt #prompt-keys { width: 100%; margin-top: 1; text-style: bold; }
    """

    def __init__(self) -> None:
        super().__init__(id="approval-prompt")
        self.shown_id = ""
        self.shown_at = float("inf")
        """When (``time.monotonic``, the clock of key events) it showed ``shown_id``: keys pressed before it is
        armed answer nothing (``prompt_gate.PromptGate.armed``)."""
        self.ignored_keys = 0
        """Keys dropped because they came before the prompt was armed (tests count them)."""
        self.position = (0, 0)
        """(which, of how many) the title says: ``1 of 3``."""
        self.body: list[tuple[str, str]] = []
        """What the body shows: (label, escaped value)."""
        self._ready = False
        """Whether it has mounted (``show_queue`` draws from then on)."""
        # Kept, not queried: the screen can mount before the container's children do.
        self._title = Label("", id="prompt-title")
        self._body = Static("", id="prompt-body")
        self._keys = Static("", id="prompt-keys")
        self.mounted_at: float | None = None
        """When it mounted (``time.monotonic``): the App holds its own render back for a moment after."""

    def compose(self) -> ComposeResult:
        with Vertical():
            yield self._title
            yield self._body
            yield self._keys

    def on_mount(self) -> None:
        self._ready = True
        self.mounted_at = time.monotonic()
        self.show_queue()

    def on_screen_resume(self) -> None:
        self.show_queue()  # back from the reject reason or the approve-all question

    def show_queue(self) -> None:
        """Show the head of the App's queue; close when it is empty (only once on top: a modal above it, the reject
        reason, is closed first)."""
        app: Any = self.app
        queue = app.prompt_queue
        info = app.approvals.get(queue[0]) if queue else None
        if info is None:
            if app.screen is self:
                self.dismiss(None)
            return
        if info.id != self.shown_id:
            self.shown_id = info.id
            self.shown_at = time.monotonic()
        self.position = (1, len(queue))
        self._draw()

    def tick(self) -> None:
        """The countdown moves on (the App's tick)."""
        self._draw()

    def _draw(self) -> None:
        app: Any = self.app
        info = app.approvals.get(self.shown_id)
        if info is None or not self._ready:
            return
        which, of = self.position
        self._title.update(Text(f"Approval needed — {which} of {of}"))
        self.body = [(label, clip(value, ASKS_SHOWN) if label == "asks" else value)
                     for label, value in detail_lines(info, app.clock())]
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for label, value in self.body:
            table.add_row(label, Text(value))
        self._body.update(table)
        self._keys.update(Text(self.key_hints()))

    def key_hints(self) -> str:
        """``a approve   r approve & remember   x reject…   A approve all…   Esc later``, in the keys bound now."""
        keys: dict[str, list[str]] = {}
        for key, active in self.active_bindings.items():
            if active.binding.id in PROMPT_WORDS:
                keys.setdefault(active.binding.id, []).append(key_label(key))
        return "   ".join(f"{'/'.join(keys[binding_id])} {word}" for binding_id, word in PROMPT_WORDS.items()
                          if binding_id in keys)

    # -- keys (the App drops those that come before the prompt is armed) ------------------------------------

    def action_approve(self) -> None:
        self.app.answer_approval(self.shown_id, "approve")  # type: ignore[attr-defined]

    def action_approve_remember(self) -> None:
        self.app.answer_approval(self.shown_id, "approve", remember=True)  # type: ignore[attr-defined]

    def action_reject(self) -> None:
        self.app.request_reject(self.shown_id)  # type: ignore[attr-defined]

    def action_approve_all(self) -> None:
        self.app.request_approve_all()  # type: ignore[attr-defined]

    def action_later(self) -> None:
        self.app.defer_prompt()  # type: ignore[attr-defined]
