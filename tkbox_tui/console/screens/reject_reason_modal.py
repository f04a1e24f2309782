"""``RejectReasonModal``: ``x`` on the prompt or in the inbox — an optional reason for the rejection, which travels
back with the refusal to what waited: the box's exec (exit 126), its connection (the proxy's 403) or the file
write of an apply.  Enter sends the rejection (with or without a reason); Esc sends nothing and the approval stays
pending.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from tkbox_daemon.wire import ApprovalInfo

from ..approval_text import summary
from ..keymap import bindings_for

REASON_LIMIT = 1024
"""Characters of a reason the daemon takes (``POST /v1/approvals/{id}``)."""
REFUSED_WITH_IT = {"exec": "the box's command is refused with it", "host": "the box's connection is refused with it",
                   "write": "the file is not written, and the apply says why"}
"""What the reason goes back with, per approval kind (``wire.APPROVAL_KINDS``)."""


class RejectReasonModal(ModalScreen[str | None]):
    """Dismisses with the reason (``""`` for none) on Enter, None on Esc."""

    BINDINGS = bindings_for("reject")
    AUTO_FOCUS = "#reject-reason"
    DEFAULT_CSS = """
    RejectReasonModal { align: center middle; }
    RejectReasonModal > Vertical { width: 76; max-width: 100%; height: auto; border: thick $error;
                                   background: $surface; padding: 0 1; }
    RejectReasonModal #reject-question { width: 100%; margin-bottom: 1; }
    RejectReasonModal #reject-hint { width: 100%; margin-top: 1; color: $text-muted; }
    """

    def __init__(self, approval: ApprovalInfo, *, cursor_blink: bool = True) -> None:
        super().__init__(id="reject-reason-modal")
        self.approval = approval
        self.cursor_blink = cursor_blink

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(f"Reject {self.approval.id}?\n{summary(self.approval)}"), id="reject-question")
            refused = REFUSED_WITH_IT.get(self.approval.kind, "what waited for it is refused with it")
            reason = Input(placeholder=f"reason (optional): {refused}",
                           max_length=REASON_LIMIT, id="reject-reason")
            reason.cursor_blink = self.cursor_blink
            yield reason
            yield Label("Enter rejects (with the reason, if any)   ·   Esc cancels: nothing is sent", id="reject-hint")

    @on(Input.Submitted, "#reject-reason")
    def send(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
