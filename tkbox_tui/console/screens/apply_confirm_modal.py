"""``ApplyConfirmModal``: the confirm before a patch is applied — first what will be written, what asks a person,
what will be refused and what is excluded; then, when sensitive files are included, a second step about them alone.

``y`` goes on (on the second step it allows the sensitive files), ``n`` and Esc apply nothing; the safe button has
the focus on each step. The texts are ``review_text``'s (escaped) and shown as ``Text``, never as markup.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from ..keymap import bindings_for


@dataclass(frozen=True)
class ApplyConsent:
    """The operator's yes: apply the included files, with ``allow_sensitive`` when they confirmed the second step."""

    allow_sensitive: bool


class ApplyConfirmModal(ModalScreen[ApplyConsent | None]):
    """Dismisses an ``ApplyConsent`` after ``y`` on every step, None on ``n``, Esc or a No button."""

    AUTO_FOCUS = "#apply-no"
    BINDINGS = bindings_for("apply_confirm")
    DEFAULT_CSS = """
    ApplyConfirmModal { align: center middle; }
    ApplyConfirmModal > Vertical { width: 90%; max-width: 100; height: auto; max-height: 90%;
                                   border: thick $warning; background: $surface; padding: 0 1; }
    ApplyConfirmModal.-sensitive > Vertical { border: thick $error; }
    ApplyConfirmModal #apply-step { height: 1; text-style: bold; }
    ApplyConfirmModal VerticalScroll { height: auto; max-height: 70vh; }
    ApplyConfirmModal Horizontal { height: 1; align-horizontal: right; margin-top: 1; }
    ApplyConfirmModal Button { margin-left: 2; width: auto; }
    """

    def __init__(self, plan_text: str, sensitive_text: str | None) -> None:
        super().__init__()
        self.plan_text = plan_text
        self.sensitive_text = sensitive_text
        self.step = "plan"
        """``plan`` (what will be written), then ``sensitive`` (only when sensitive files are included)."""

    def compose(self) -> ComposeResult:
        steps = "1 of 2" if self.sensitive_text else "1 of 1"
        with Vertical():
            yield Label(f"Apply the patch? (step {steps})", id="apply-step")
            with VerticalScroll():
                yield Static(Text(self.plan_text), id="apply-question")
            with Horizontal():
                yield Button("Apply (y)", variant="warning", id="apply-yes", compact=True)
                yield Button("No (n)", variant="primary", id="apply-no", compact=True)

    def on_mount(self) -> None:
        self.query_one("#apply-no", Button).focus()

    @on(Button.Pressed, "#apply-yes")
    def action_confirm(self) -> None:
        if self.step == "plan" and self.sensitive_text is not None:
            self.step = "sensitive"
            self.add_class("-sensitive")
            self.query_one("#apply-step", Label).update("Sensitive files (step 2 of 2)")
            self.query_one("#apply-question", Static).update(Text(self.sensitive_text))
            self.query_one("#apply-yes", Button).label = "Write sensitive files too (y)"
            self.query_one("#apply-no", Button).focus()
            return
        self.dismiss(ApplyConsent(allow_sensitive=self.step == "sensitive"))

    @on(Button.Pressed, "#apply-no")
    def action_cancel(self) -> None:
        self.dismiss(None)
