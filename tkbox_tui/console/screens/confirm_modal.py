"""``ConfirmModal``: yes or no before a destructive action; the safe button (No) has the focus.

The question is shown as ``Text``, never read as markup: it names a box, whose text the caller has escaped.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from ..keymap import bindings_for


class ConfirmModal(ModalScreen[bool]):
    """Dismisses True only on ``y`` or the Yes button; ``n``, Escape and the focused No button give False."""

    AUTO_FOCUS = "#confirm-no"
    """The safe button has the focus from the first key on: no key typed ahead can land on Yes."""

    BINDINGS = bindings_for("confirm")
    DEFAULT_CSS = """
    ConfirmModal { align: center middle; }
    ConfirmModal > Vertical { width: 60; height: auto; border: thick $error; background: $surface; padding: 1 2; }
    ConfirmModal #confirm-question { width: 100%; margin-bottom: 1; }
    ConfirmModal Horizontal { height: auto; align-horizontal: right; }
    ConfirmModal Button { margin-left: 2; }
    """

    def __init__(self, question: str, yes_label: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes_label = yes_label

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(self.question), id="confirm-question")
            with Horizontal():
                yield Button(f"{self.yes_label} (y)", variant="error", id="confirm-yes")
                yield Button("No (n)", variant="primary", id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    @on(Button.Pressed, "#confirm-yes")
    def action_confirm(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#confirm-no")
    def action_cancel(self) -> None:
        self.dismiss(False)
