"""``BoxActionsMixin``: the App's side of creating, stopping and removing boxes — the form or the confirm first,
then the daemon call in a worker, then one notification with the result.

Box names and the daemon's error messages are box-controlled: they are shown escaped, and notifications take no
markup.
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
        if box is not None:
            app.push_screen(ConfirmModal(f"Stop box {safe_text(box.name)}? Running commands end.", "Stop"),
                            lambda yes: self._call_box_action("stop", box.id) if yes else None)

    def action_remove_box(self) -> None:
        app: Any = self
        box = app._selected_or_warn()
        if box is not None:
            app.push_screen(ConfirmModal(f"Remove box {safe_text(box.name)}? Its state is deleted; the record stays.",
                                         "Remove"),
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
                                               error_field=str(exc.extra.get("field", ""))))
            return
        app.post_message(BoxActionFinished(action, box_ref, box))

    def on_box_action_finished(self, message: BoxActionFinished) -> None:
        """Say how a create, stop or remove ended, and show the box as the daemon now describes it."""
        app: Any = self
        if message.error:
            where = f" (field {safe_text(message.error_field)})" if message.error_field else ""
            app.notify(f"{message.action} failed: {safe_text(message.error)}{where}", severity="error", timeout=10,
                       markup=False)
            return
        if message.box is not None:
            if message.action == "remove":
                app.state.boxes.pop(message.box.id, None)
            else:
                app.state.update_box(message.box)
            app.notify(f"{message.action}: {safe_text(message.box.name)} is {safe_text(message.box.state)}",
                       markup=False)
        app._render_now()
