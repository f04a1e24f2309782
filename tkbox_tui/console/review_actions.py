"""``ReviewActionsMixin``: the App's side of the patch review — open it (Enter or ``p`` on a stopped box,
``p`` on a box's page, ``:review [BOX]``), and run an apply in a worker of the App.

The apply runs in the App, not in the review screen, so that going back from the review does not cancel it (a
cancelled apply withdraws what is held and writes nothing: the operator would not know which). It posts what the
daemon says (``PatchApplyHeld``, ``PatchApplied``, ``PatchApplyFailed``); the App shows each in every open review of
the box ("attributes down") and says how it ended in a notification. A file held for a person raises the approval
prompt through the event stream's ``approval.pending``, as any approval does: nothing here holds it back.
"""

from __future__ import annotations

from typing import Any

from textual import work

from tkbox_daemon.wire_apply import ApplyReport

from ..client import DaemonError
from ..terminal_text import safe_text
from .messages import PatchApplied, PatchApplyFailed, PatchApplyHeld
from .review_text import report_summary
from .screens.review_screen import PatchReviewScreen

REVIEWABLE_STATES = ("stopped",)
"""A box whose patch can be reviewed and applied: the daemon applies only a stopped box's saved patch."""


class ReviewActionsMixin:
    """Mixed into ``ConsoleApp`` (which provides ``client``, ``state``, ``screen_stack``, ``push_screen``,
    ``notify``, ``_selected_or_warn`` and ``open_box_page``).  Handlers are named for their messages: Textual
    collects ``@on`` only from classes built by its metaclass."""

    def open_review(self, box_id: str) -> None:
        """The review of a stopped box's patch; any other box's state is said, and nothing opens."""
        app: Any = self
        box = app.state.boxes.get(box_id)
        if box is None:
            app.notify("that box is gone", severity="warning")
            return
        if box.state not in REVIEWABLE_STATES:
            app.notify(f"{safe_text(box.name)} is {safe_text(box.state)}: its patch can be reviewed and applied "
                       "once it is stopped (x stops it)", title="no patch to review yet", severity="warning",
                       markup=False)
            return
        app.push_screen(PatchReviewScreen(app.client, box))

    def action_review_box(self) -> None:
        """``p`` on the main screen: the selected box's review."""
        app: Any = self
        box = app._selected_or_warn()
        if box is not None:
            self.open_review(box.id)

    def review_without_patch(self, screen: PatchReviewScreen, reason: str) -> None:
        """The daemon has no saved patch for the box: its page instead, and why."""
        app: Any = self
        if screen in app.screen_stack:
            screen.dismiss(None)
        app.notify(f"{safe_text(reason)}; its page opens instead", title="no patch", severity="warning",
                   timeout=8, markup=False)
        app.open_box_page(screen.box.id)

    def start_apply(self, box_id: str, only: list[str] | None, allow_sensitive: bool) -> None:
        """Apply the box's patch (``only`` the listed paths, or all), in a worker of the App."""
        self._apply_patch(box_id, only, allow_sensitive)

    @work(group="patch-apply", exit_on_error=False, description="apply a box's patch")
    async def _apply_patch(self, box_id: str, only: list[str] | None, allow_sensitive: bool) -> None:
        app: Any = self
        try:
            async for item in app.client.apply(box_id, only=only, allow_sensitive=allow_sensitive):
                if isinstance(item, ApplyReport):
                    app.post_message(PatchApplied(box_id, item))
                    return
                path, approval = item
                app.post_message(PatchApplyHeld(box_id, path, approval.id))
        except DaemonError as exc:
            app.post_message(PatchApplyFailed(box_id, exc.message, str(exc.extra.get("hint") or "")))
            return
        app.post_message(PatchApplyFailed(box_id, "the daemon's answer ended without a report"))

    def _reviews_of(self, box_id: str) -> list[PatchReviewScreen]:
        app: Any = self
        return [screen for screen in app.screen_stack
                if isinstance(screen, PatchReviewScreen) and screen.box.id == box_id and screen.is_mounted]

    def on_patch_apply_held(self, message: PatchApplyHeld) -> None:
        for screen in self._reviews_of(message.box_id):
            screen.show_held(message.path, message.approval_id)

    def on_patch_applied(self, message: PatchApplied) -> None:
        app: Any = self
        for screen in self._reviews_of(message.box_id):
            screen.show_result(message.report)
        report = message.report
        name = report.box_name or message.box_id
        app.notify(report_summary(report), title=f"apply {safe_text(name)}", markup=False, timeout=10,
                   severity="information" if report.status == "applied" else "error")

    def on_patch_apply_failed(self, message: PatchApplyFailed) -> None:
        app: Any = self
        for screen in self._reviews_of(message.box_id):
            screen.show_failure(message.message, message.hint)
        app.notify(f"{safe_text(message.message)}" + (f"\n{safe_text(message.hint)}" if message.hint else ""),
                   title="apply failed", severity="error", timeout=12, markup=False)
