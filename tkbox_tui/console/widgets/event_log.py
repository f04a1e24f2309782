"""``EventLog``: the live event stream as plain lines; follows new events until the operator scrolls up."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import Log


class EventLog(Log):
    """A ``Log`` that reports when the operator scrolls away from the end (following pauses)."""

    DEFAULT_CSS = """
    EventLog { height: 1fr; }
    """

    @dataclass
    class FollowPaused(Message):
        """The operator scrolled up: stop following, count what arrives."""

    def __init__(self, max_lines: int, **kwargs: object) -> None:
        super().__init__(max_lines=max_lines, auto_scroll=True, **kwargs)  # type: ignore[arg-type]

    def _pause(self) -> None:
        if self.auto_scroll:
            self.auto_scroll = False
            self.post_message(self.FollowPaused())

    def resume(self) -> None:
        self.auto_scroll = True
        self.scroll_end(animate=False)

    def replace_lines(self, lines: list[str]) -> None:
        """Show exactly ``lines`` (after the filter or scope changed)."""
        self.clear()
        if lines:
            self.write_lines(lines)

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._pause()
        super()._on_mouse_scroll_up(event)

    def action_scroll_up(self) -> None:
        self._pause()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._pause()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self._pause()
        super().action_scroll_home()
