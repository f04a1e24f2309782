"""``ApprovalActionsMixin``: the App's side of approvals — keep ``ApprovalsState`` current from the event stream and
the daemon's list, pop the prompt when one arrives (bell and notification), hold it back while the operator types
(``prompt_gate``), and send the answers from the prompt and the inbox in workers.

The prompt's queue (``prompt_queue``) holds the pending approvals it has to show, in arrival order: every pending
approval this console had not seen before goes into it once.  Answering one, or its settling elsewhere, takes it
out; Esc ("later") empties it, and what it held stays pending in the inbox and the count.  While the inbox is the
screen on top, arrivals do not pop the prompt: the inbox shows them (the bell and notification still sound).
"""

from __future__ import annotations

import time
from typing import Any

from textual import events, work
from textual.widgets import Input, TextArea

from tkbox_daemon.wire import ApprovalInfo, Event

from ..client import DaemonError
from ..terminal_text import safe_text
from .approval_text import answered_elsewhere, summary
from .approvals_state import APPROVAL_KINDS, ApprovalsState
from .messages import (
    ApprovalAnswered,
    ApprovalAnswerFailed,
    ApprovalRefreshed,
    ApprovalsBulkAnswered,
    ApprovalsLoaded,
)
from .prompt_gate import PromptGate
from .screens import ApprovalPrompt, ApprovalsScreen, ConfirmModal, RejectReasonModal

PROMPT_FIRST_FRAME = 0.1
"""Seconds after the prompt mounted during which the main screen's render waits (``prompt_opening``)."""
TEXT_INPUTS = (Input, TextArea)
"""Widgets that take typed text: while one has the focus, the prompt waits (``prompt_gate``)."""
QUEUED_IDS_KEPT = 10_000
"""Approval ids remembered as already queued once (so a reconnect does not pop them again)."""
ANNOUNCED_AT_MOST = 3
"""Approvals named in one arrival notification (the rest are counted)."""
ANNOUNCE_SHOWN = 6.0
"""Seconds an arrival notification stays; while one is shown, later arrivals ring the bell and join the prompt's
queue and the count, without another notification (a stack of them slows every frame: ``bench/console.py``)."""


class ApprovalActionsMixin:
    """Mixed into ``ConsoleApp`` before ``KeyRoutingMixin`` (its ``_on_key`` must run first).  The App provides
    ``client``, ``clock``, ``settings``, ``approvals_pending`` (a reactive), ``notify``, ``bell``, ``push_screen``.
    Handlers are named for their messages: Textual collects ``@on`` only from classes built by its metaclass."""

    approvals: ApprovalsState
    prompt_queue: list[str]
    prompt_gate: PromptGate

    def init_approvals(self) -> None:
        app: Any = self
        self.approvals = ApprovalsState(keep_settled=app.settings.approvals_kept_for)
        self.prompt_queue = []
        self._queued_once: dict[str, None] = {}
        self.prompt_gate = PromptGate(app.settings.prompt_typing_pause, app.settings.prompt_arm_delay)
        self.monotonic = time.monotonic
        """The clock of the typing pause (``prompt_gate``) and of the arrival notifications; tests move it on."""
        self._announced_at = float("-inf")

    # -- what the daemon says ---------------------------------------------------------------------------------

    def take_approval_events(self, batch: list[Event]) -> None:
        """Apply the approval events of a batch the App just took (already new to ``ConsoleState``)."""
        app: Any = self
        now = app.clock()
        changed = [info for event in batch if event.kind in APPROVAL_KINDS
                   if (info := self.approvals.apply(event, now)) is not None]
        if changed:
            self.approvals_changed(changed)

    def on_approvals_loaded(self, message: ApprovalsLoaded) -> None:
        app: Any = self
        if message.approvals is None:
            return  # a daemon without the approvals API: the boxes' own counts stand
        self.approvals.set_all(message.approvals, message.listed_through, app.clock())
        self.approvals_changed(self.approvals.ordered)

    def on_approval_answered(self, message: ApprovalAnswered) -> None:
        app: Any = self
        info = message.approval
        if self.approvals.take(info, app.clock()):
            self.approvals_changed([info])
        if not message.quiet:
            app.notify(f"{'approved' if info.state == 'approved' else safe_text(info.state)}: {summary(info)}",
                       title=safe_text(info.id), timeout=6, markup=False)

    def on_approval_answer_failed(self, message: ApprovalAnswerFailed) -> None:
        app: Any = self
        if message.code in ("approval_answered", "approval_expired", "not_found"):
            self._refresh_approval(message.approval_id)  # how it did end, for the inbox and the count
        if message.quiet:
            return
        settled = message.code in ("approval_answered", "approval_expired")
        app.notify(f"{safe_text(message.message)}" + ("" if settled else
                   f"\n{safe_text(message.approval_id)} is still pending: i opens the inbox."),
                   title=f"{message.answer} not taken", severity="warning" if settled else "error", timeout=12,
                   markup=False)

    def on_approval_refreshed(self, message: ApprovalRefreshed) -> None:
        app: Any = self
        if self.approvals.take(message.approval, app.clock()):
            self.approvals_changed([message.approval])

    def on_approvals_bulk_answered(self, message: ApprovalsBulkAnswered) -> None:
        app: Any = self
        text = f"approved {message.approved} of {message.approved + len(message.refused)}"
        if message.refused:
            text += ":\n" + "\n".join(safe_text(reason) for reason in message.refused[:5])
        app.notify(text, title="approve all", severity="warning" if message.refused else "information",
                   timeout=12, markup=False)

    def approvals_changed(self, changed: list[ApprovalInfo]) -> None:
        """Queue what is new and pending for the prompt, announce it, and bring every view of approvals up to date."""
        app: Any = self
        arrived = [info for info in changed if info.pending and info.id not in self._queued_once]
        for info in arrived:
            self.prompt_queue.append(info.id)
            self._queued_once[info.id] = None
        while len(self._queued_once) > QUEUED_IDS_KEPT:
            del self._queued_once[next(iter(self._queued_once))]
        self.approvals.prune(app.clock())
        self.count_pending()
        app._render_dirty = True  # the box table's approvals column
        if arrived and not app.ui_closed:
            self._announce(arrived)
        self.refresh_approval_views()

    def count_pending(self) -> None:
        """The footer's count: the pending approvals this console knows; from a daemon without the approvals API,
        the sum of its boxes' own counts (so that none is off screen either way)."""
        app: Any = self
        app.approvals_pending = self.approvals.pending_count() if self.approvals.synced else sum(
            box.approvals_pending for box in app.state.boxes.values())

    def _announce(self, arrived: list[ApprovalInfo]) -> None:
        """A bell for every arrival; a notification unless the last one is still on screen."""
        app: Any = self
        app.bell()
        now = self.monotonic()
        if now - self._announced_at < ANNOUNCE_SHOWN:
            return
        self._announced_at = now
        named = "\n".join(summary(info) for info in arrived[:ANNOUNCED_AT_MOST])
        more = f"\n… and {len(arrived) - ANNOUNCED_AT_MOST} more" if len(arrived) > ANNOUNCED_AT_MOST else ""
        title = "approval needed" if len(arrived) == 1 else f"{len(arrived)} approvals needed"
        app.notify(f"{named}{more}\n(the prompt answers it; i: the inbox)", title=title, severity="warning",
                   timeout=ANNOUNCE_SHOWN, markup=False)

    def refresh_approval_views(self) -> None:
        """The open inbox screens and the prompt show the state as it is now; the prompt opens if it may."""
        app: Any = self
        if app.ui_closed:
            return
        for screen in app.screen_stack:
            if isinstance(screen, ApprovalsScreen) and screen.is_mounted:
                screen.show(self.approvals.ordered, app.clock())
        self.maybe_show_prompt()

    def tick_approvals(self) -> None:
        """Every ``tick_interval``: drop approvals settled long enough ago, move the countdowns on."""
        app: Any = self
        if app.ui_closed:
            return
        if self.approvals.prune(app.clock()):
            self.count_pending()
        for screen in app.screen_stack:
            if isinstance(screen, ApprovalsScreen | ApprovalPrompt) and screen.is_mounted:
                screen.tick()

    # -- the prompt ---------------------------------------------------------------------------------------------

    def _open_prompt(self) -> ApprovalPrompt | None:
        app: Any = self
        return next((screen for screen in app.screen_stack if isinstance(screen, ApprovalPrompt)), None)

    def _text_input_focused(self) -> bool:
        app: Any = self
        return isinstance(app.focused, TEXT_INPUTS)

    def maybe_show_prompt(self) -> None:
        """Settle the prompt's queue, then update the open prompt, or open one if the gate lets it."""
        app: Any = self
        if app.ui_closed or not app.main_screen.is_mounted:
            return
        for approval_id in list(self.prompt_queue):
            info = self.approvals.get(approval_id)
            if info is None or not info.pending:
                shown = self.prompt_queue[0] == approval_id and self._open_prompt() is not None
                self.prompt_queue.remove(approval_id)
                if shown and info is not None:
                    app.notify(answered_elsewhere(info), title="answered elsewhere", timeout=8, markup=False)
        prompt = self._open_prompt()
        if prompt is not None:
            prompt.show_queue()
            return
        if not self.prompt_queue:
            return
        if isinstance(app.screen, ApprovalsScreen):
            self.prompt_queue.clear()  # the inbox on top shows them
            return
        if self.prompt_gate.may_open(self._text_input_focused(), self.monotonic()):
            app.push_screen(ApprovalPrompt())

    @property
    def prompt_opening(self) -> bool:
        """Whether a prompt is being opened — pushed, and mounted less than ``PROMPT_FIRST_FRAME`` seconds ago: the
        main screen's render (behind it, dimmed) waits, so that it does not come before the prompt's first frame."""
        prompt = self._open_prompt()
        return prompt is not None and (prompt.mounted_at is None
                                       or time.monotonic() - prompt.mounted_at < PROMPT_FIRST_FRAME)

    def recheck_prompt(self) -> None:
        """The gate's timer: a prompt held back while the operator typed opens once the typing has paused."""
        if self.prompt_queue and self._open_prompt() is None:
            self.maybe_show_prompt()

    def defer_prompt(self) -> None:
        """Esc on the prompt: close it; what it held stays pending in the inbox and the count."""
        self.prompt_queue.clear()
        prompt = self._open_prompt()
        if prompt is not None:
            prompt.dismiss(None)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, TEXT_INPUTS):
            self.prompt_gate.note_typing(self.monotonic())

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        app: Any = self
        if self.prompt_queue and isinstance(event.widget, TEXT_INPUTS):
            app.call_after_refresh(self.recheck_prompt)  # the focus has moved on by then

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded and self._text_input_focused():
            self.prompt_gate.note_typing(self.monotonic())
        await super().on_event(event)  # type: ignore[misc]

    async def _on_key(self, event: events.Key) -> None:
        # A key pressed before the prompt showed what it shows (or just after) answers nothing: it was meant for
        # the screen behind, or for the approval before (prompt_gate).  Dropped here, before any binding runs.
        prompt = self._open_prompt()
        app: Any = self
        if prompt is not None and app.screen is prompt and not self.prompt_gate.armed(prompt.shown_at, event.time):
            prompt.ignored_keys += 1
            event.prevent_default()
            event.stop()

    # -- answers ----------------------------------------------------------------------------------------------

    def answer_approval(self, approval_id: str, answer: str, *, reason: str = "", remember: bool = False) -> None:
        """Send an answer (in a worker); one already settled is not sent, and the operator is told how it ended."""
        app: Any = self
        if approval_id in self.prompt_queue:
            self.prompt_queue.remove(approval_id)
        info = self.approvals.get(approval_id)
        if info is not None and not info.pending:
            app.notify(answered_elsewhere(info), title="nothing to answer", severity="warning", timeout=8,
                       markup=False)
        else:
            self._send_answer(approval_id, answer, reason, remember)
        self.refresh_approval_views()

    @work(group="approval-answers", exit_on_error=False, description="answer an approval")
    async def _send_answer(self, approval_id: str, answer: str, reason: str, remember: bool) -> None:
        app: Any = self
        try:
            info = await app.client.answer_approval(approval_id, answer, reason=reason, remember=remember)
        except DaemonError as exc:
            app.post_message(ApprovalAnswerFailed(approval_id, answer, exc.code, exc.message))
            return
        app.post_message(ApprovalAnswered(info))

    @work(group="approval-refresh", exit_on_error=False, description="read an approval again")
    async def _refresh_approval(self, approval_id: str) -> None:
        app: Any = self
        try:
            app.post_message(ApprovalRefreshed(await app.client.approval(approval_id)))
        except DaemonError:
            return  # the event stream, or the next resync, tells

    def request_reject(self, approval_id: str) -> None:
        """``x``: ask for an optional reason; Enter sends the rejection, Esc sends nothing."""
        app: Any = self
        info = self.approvals.get(approval_id)
        if info is None:
            return
        if not info.pending:
            app.notify(answered_elsewhere(info), title="nothing to answer", severity="warning", markup=False)
            return

        def send(reason: str | None) -> None:
            if reason is not None:
                self.answer_approval(approval_id, "reject", reason=reason)

        app.push_screen(RejectReasonModal(info, cursor_blink=app.settings.cursor_blink), send)

    def request_approve_all(self) -> None:
        """``A``: approve every approval pending now (asked first; those arriving after the question are not)."""
        app: Any = self
        pending = self.approvals.pending
        if not pending:
            app.notify("no approval is pending", severity="warning")
            return
        boxes = sorted({safe_text(info.box_name or info.box_id) for info in pending})
        question = (f"Approve all {len(pending)} pending approval{'s' if len(pending) != 1 else ''} (in "
                    f"{', '.join(boxes)})? Each runs as it was asked. Approvals that arrive after this question "
                    "are not included.")
        ids = [info.id for info in pending]

        def approve(yes: bool | None) -> None:
            if yes:
                for approval_id in ids:
                    if approval_id in self.prompt_queue:
                        self.prompt_queue.remove(approval_id)
                self._approve_all(ids)
                self.refresh_approval_views()

        app.push_screen(ConfirmModal(question, "Approve all"), approve)

    @work(group="approval-answers", exit_on_error=False, description="approve all")
    async def _approve_all(self, approval_ids: list[str]) -> None:
        app: Any = self
        approved, refused = 0, []
        for approval_id in approval_ids:
            try:
                info = await app.client.answer_approval(approval_id, "approve")
            except DaemonError as exc:
                refused.append(exc.message)
                app.post_message(ApprovalAnswerFailed(approval_id, "approve", exc.code, exc.message, quiet=True))
                continue
            approved += 1
            app.post_message(ApprovalAnswered(info, quiet=True))
        app.post_message(ApprovalsBulkAnswered(approved, refused))

    def action_open_approvals(self) -> None:
        """``i`` / ``:approvals``: the inbox (already on top: nothing to do)."""
        app: Any = self
        if isinstance(app.screen, ApprovalsScreen):
            return
        self.prompt_queue.clear()  # the inbox shows them all
        app.push_screen(ApprovalsScreen())
