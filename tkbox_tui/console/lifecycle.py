"""``LifecycleMixin``: once the console's shutdown begins, nothing touches a screen or a widget.

Textual tears the screens down while the App's timers, workers and queued messages can still run: after
``App.exit`` the messages queued before it are still handled, and ``App.run_test`` (every Pilot test) prunes the
screens and empties the screen stack while the App's message loop, its timers and its workers are still going.
A render tick or a message handler that reached for the main screen then met an empty screen stack
(``IndexError`` from ``screen_stack[0]``) or widgets already removed (``NoMatches``) — on a busy machine, where
the teardown takes long enough for a tick or a message to fall inside it.

So the App knows when shutdown began (``ui_closed``), and from then on:

- it takes none of the console's own messages (those defined in ``tkbox_tui``, and ``Worker.StateChanged``),
  neither when they are posted (``check_message_enabled``, Textual's public filter) nor when they were queued
  before shutdown began (``_on_message``, where Textual dispatches a message to its handlers);
- it handles no input event still queued (a key typed just before: Textual would look up the current screen to
  route it, and raise ``ScreenStackError``) — ``on_event``;
- its timer callbacks return at once (they check ``ui_closed`` first: Textual calls a timer's callback directly,
  not through the message queue).

Textual's own messages (``ExitApp``, ``Prompt``, …) pass untouched: the shutdown needs them.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.message import Message
from textual.worker import Worker

CONSOLE_PACKAGE = "tkbox_tui."


def is_console_message(message: Message) -> bool:
    """Whether a handler of the console's (which may touch screens and widgets) is what ``message`` is for."""
    return type(message).__module__.startswith(CONSOLE_PACKAGE) or isinstance(message, Worker.StateChanged)


class LifecycleMixin:
    """Mixed into ``ConsoleApp`` before ``App``, whose ``exit``, ``check_message_enabled``, ``on_event`` and
    ``_on_message`` it wraps."""

    _exit_requested = False

    @property
    def ui_closed(self) -> bool:
        """True once shutdown began: ``exit`` was called, or Textual stopped the App (``is_running`` turns false
        first thing in ``App._shutdown``, before any screen is torn down)."""
        app: Any = self
        return self._exit_requested or not app.is_running

    def exit(self, *args: Any, **kwargs: Any) -> None:
        self._exit_requested = True
        super().exit(*args, **kwargs)  # type: ignore[misc]

    def check_message_enabled(self, message: Message) -> bool:
        if self.ui_closed and is_console_message(message):
            return False
        return super().check_message_enabled(message)  # type: ignore[misc]

    async def on_event(self, event: events.Event) -> None:
        if self.ui_closed and isinstance(event, events.InputEvent):
            return  # a key or a click queued before shutdown began: there is no screen left to take it
        await super().on_event(event)  # type: ignore[misc]

    async def _on_message(self, message: Message) -> None:
        # Messages queued before shutdown began are dispatched while the screens are torn down: drop ours.
        if self.ui_closed and is_console_message(message):
            return
        await super()._on_message(message)  # type: ignore[misc]
