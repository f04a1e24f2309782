"""``AllowConfirmModal``: the confirm before a host is allowed from the network view — the entry and what it lets
through, what the daemon's dry run would change, and which earlier held or refused connections of the box it would
have let through (``network_text.allow_confirm_text``), so the operator sees what they open.

``y`` allows, ``n`` and Esc change nothing; the safe button has the focus.  The text is escaped and shown as
``Text``, never as markup.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from ..keymap import bindings_for


class AllowConfirmModal(ModalScreen[bool]):
    """Dismisses True only on ``y`` or the Allow button; ``n``, Esc and the focused No button give False."""

    AUTO_FOCUS = "#allow-no"
    BINDINGS = bindings_for("allow_confirm")
    DEFAULT_CSS = """
    AllowConfirmModal { align: center middle; }
    AllowConfirmModal > Vertical { width: 90%; max-width: 100; height: auto; max-height: 90%;
                                   border: thick $warning; background: $surface; padding: 0 1; }
    AllowConfirmModal #allow-title { height: 1; text-style: bold; }
    AllowConfirmModal VerticalScroll { height: auto; max-height: 70vh; }
    AllowConfirmModal Horizontal { height: 1; align-horizontal: right; margin-top: 1; }
    AllowConfirmModal Button { margin-left: 2; width: auto; }
    """

    def __init__(self, title: str, text: str) -> None:
        super().__init__(id="allow-confirm")
        self.title_text = title
        self.text = text
        """What the modal shows (escaped): the tests read it."""

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(self.title_text), id="allow-title")
            with VerticalScroll():
                yield Static(Text(self.text), id="allow-question")
            with Horizontal():
                yield Button("Allow (y)", variant="warning", id="allow-yes", compact=True)
                yield Button("No (n)", variant="primary", id="allow-no", compact=True)

    def on_mount(self) -> None:
        self.query_one("#allow-no", Button).focus()

    @on(Button.Pressed, "#allow-yes")
    def action_confirm(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#allow-no")
    def action_cancel(self) -> None:
        self.dismiss(False)
