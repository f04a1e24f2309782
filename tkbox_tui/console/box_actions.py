"""``BoxActionsMixin``: the App's side of creating, stopping and removing boxes — the form or the confirm first,
then the daemon call in a worker, then one notification with the result.

Box names and the daemon's error messages are box-controlled: they are shown escaped, and notifications take no
markup.  A ``lost`` box (live when its daemon ended; docs/boxes.md) cannot be stopped: ``x`` says so and what to do
instead, and ``d`` says what removing it does.  A stop or remove the daemon answers with "not found" drops the row:
the daemon no longer knows that box.
"""

from __future__ import annotations

from typing import Any

from textual import work

from ..client import DaemonError
from ..terminal_text import safe_text
from .messages import BoxActionFinished
from .screens import ConfirmModal, NewBoxScreen


class BoxActionsMixin:
    """Mixed into ``ConsoleApp`` (which provides ``client``, ``state``, ``settings``, ``_selected_or_warn``,
    ``_render_now`` and the App's ``push_screen``/``notify``/``post_message``).

    ``on_box_action_finished`` is named for its message rather than decorated with ``@on``: Textual collects
    ``@on`` handlers only from classes built by its message-pump metaclass, which a plain mixin is not.
    """

    def action_new_box(self) -> None:
        app: Any = self

        def create(settings: dict[str, Any] | None) -> None:
            if settings is not None:
                self._call_box_action("create", settings.get("name", "new box"), settings)

        app.push_screen(NewBoxScreen({"workspace": "."}, cursor_blink=app.settings.cursor_blink), create)

    def action_stop_box(self) -> None:
        app: Any = self
        box = app._selected_or_warn()
        if box is not None and box.state == "lost":
            app.notify(f"{safe_text(box.name)} is lost: the daemon that ran it ended, and nothing of it runs, so "
                       "there is nothing to stop. d removes it (its layers).", title="nothing to stop",
                       severity="warning", timeout=10, markup=False)
        elif box is not None:
            app.push_screen(ConfirmModal(f"Stop box {safe_text(box.name)}? Running commands end.", "Stop"),
                            lambda yes: self._call_box_action("stop", box.id) if yes else None)

    def action_remove_box(self) -> None:
        app: Any = self
        box = app._selected_or_warn()
        if box is not None:
            question = (f"Remove lost box {safe_text(box.name)}? Its layers are deleted (its uids were given back "
                        "when the daemon restarted); its run stays open (its token went with the daemon that ran "
                        "it)." if box.state == "lost" else
                        f"Remove box {safe_text(box.name)}? Its state is deleted; the record stays.")
            app.push_screen(ConfirmModal(question, "Remove"),
                            lambda yes: self._call_box_action("remove", box.id) if yes else None)

    @work(group="box-actions", exit_on_error=False, description="box action")
    async def _call_box_action(self, action: str, box_ref: str, settings: dict[str, Any] | None = None) -> None:
        app: Any = self
        try:
            if action == "create":
                box = await app.client.create_box(settings or {})
            elif action == "stop":
                box = await app.client.stop_box(box_ref)
            else:
                box = await app.client.remove_box(box_ref)
        except DaemonError as exc:
            app.post_message(BoxActionFinished(action, box_ref, error=exc.message,
                                               error_field=str(exc.extra.get("field", "")), error_code=exc.code))
            return
        app.post_message(BoxActionFinished(action, box_ref, box))

    def on_box_action_finished(self, message: BoxActionFinished) -> None:
        """Say how a create, stop or remove ended, and show the box as the daemon now describes it."""
        app: Any = self
        if message.error and message.error_code == "not_found" and message.action in ("stop", "remove"):
            known = app.state.boxes.get(message.box_ref)
            app.state.forget_box(message.box_ref)
            app.notify(f"the daemon no longer knows box {safe_text(known.name if known else message.box_ref)}; its "
                       "row is gone", severity="warning", timeout=10, markup=False)
            app._render_now()
            return
        if message.error:
            where = f" (field {safe_text(message.error_field)})" if message.error_field else ""
            app.notify(f"{message.action} failed: {safe_text(message.error)}{where}", severity="error", timeout=10,
                       markup=False)
            return
        if message.box is not None:
            if message.action == "remove":
                app.state.forget_box(message.box.id)
            else:
                app.state.update_box(message.box)
            app.notify(f"{message.action}: {safe_text(message.box.name)} is {safe_text(message.box.state)}",
                       markup=False)
        app._render_now()
