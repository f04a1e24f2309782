"""``EventLog``: the live event stream as plain lines; follows new events until the operator scrolls up.

Following means the newest line is on screen, after every write and every resize (``keep_newest_in_view``).

It colours the lines of alert kinds (``present.is_alert_line``), highlights the matches of the filter's regular
expression in the lines it shows, and ``n``/``N`` move a current-line marker to the next/previous line shown (each
matches the filter, though a match past a line's cut is not drawn).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.highlighter import Highlighter
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Log

from ..filter_pattern import FilterPattern
from ..keymap import bindings_for
from ..present import is_alert_line


class MatchHighlighter(Highlighter):
    """Styles the text of the current line, then every non-empty match of ``pattern`` on top of it."""

    def __init__(self, style_of: Callable[[str], Style]) -> None:
        self.pattern: FilterPattern | None = None
        self.on_current_line = False
        self._style_of = style_of

    def highlight(self, text: Text) -> None:
        if is_alert_line(text.plain):  # denials, failures, gaps…: the theme's event-alert colour
            text.stylize(self._style_of("event-log--alert"))
        if self.on_current_line:
            text.stylize(self._style_of("event-log--current"))
        if self.pattern is not None:
            style = self._style_of("event-log--match")
            for match in self.pattern.finditer(text.plain):
                if match.end() > match.start():
                    text.stylize(style, match.start(), match.end())


class EventLog(Log):
    """A ``Log`` that reports when the operator scrolls away from the end (following pauses) and steps between
    the lines that match the filter."""

    BINDINGS = bindings_for("log")
    KEY_SCOPE = "log"
    """The key catalogue's scope of this pane (help lists its keys while another pane has the focus)."""
    HELP_PANE = "event log"
    COMPONENT_CLASSES = {"event-log--match", "event-log--current", "event-log--alert"}
    DEFAULT_CSS = """
    EventLog { height: 1fr; }
    EventLog > .event-log--match { background: $log-match; color: $background; text-style: bold; }
    EventLog > .event-log--current { background: $primary 30%; }
    EventLog > .event-log--alert { color: $event-alert; }
    """

    @dataclass
    class FollowPaused(Message):
        """The operator scrolled up: stop following, count what arrives."""

    def __init__(self, max_lines: int, **kwargs: object) -> None:
        super().__init__(max_lines=max_lines, auto_scroll=True, highlight=True, **kwargs)  # type: ignore[arg-type]
        self.highlighter: MatchHighlighter = MatchHighlighter(self.get_component_rich_style)
        self.current_line: int | None = None
        """The line ``n``/``N`` moved to (an index into ``lines``), or None before the first move."""

    # -- following ------------------------------------------------------------------------------------------

    def _pause(self) -> None:
        if self.auto_scroll:
            self.auto_scroll = False
            self.post_message(self.FollowPaused())

    def resume(self) -> None:
        self._set_current_line(None)
        self.auto_scroll = True
        self.scroll_end(animate=False)

    def keep_newest_in_view(self) -> None:
        """While following, show the newest line: ``Log`` scrolls to the end after a write only when the view was at
        the end already, and a resize (the exec panel opening, the terminal shrinking) leaves the view short of it —
        following would stop for good while the status still said FOLLOWING."""
        if self.auto_scroll and not self.is_vertical_scrollbar_grabbed:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def on_resize(self) -> None:
        self.keep_newest_in_view()

    def replace_lines(self, lines: list[str]) -> None:
        """Show exactly ``lines`` (after the filter or scope changed)."""
        self.current_line = None
        self.clear()
        if lines:
            self.write_lines(lines)

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> EventLog:
        """As ``Log.write_lines``, keeping the current line on its text when old lines are dropped off the top."""
        split = [part for line in lines for part in line.splitlines()]
        before = len(self.lines)
        super().write_lines(split, scroll_end)
        dropped = before + len(split) - len(self.lines)
        if dropped and self.current_line is not None:
            self.current_line = self.current_line - dropped if self.current_line >= dropped else None
        if scroll_end is not False:
            self.keep_newest_in_view()
        return self

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

    # -- matches ---------------------------------------------------------------------------------------------

    @property
    def match_pattern(self) -> FilterPattern | None:
        return self.highlighter.pattern

    def set_match_pattern(self, pattern: FilterPattern | None) -> None:
        """Highlight ``pattern`` (None: nothing) and forget the current line; call before ``replace_lines``."""
        self.highlighter.pattern = pattern
        self.current_line = None
        self.refresh()

    def matching_lines(self) -> list[int]:
        """Indexes of the lines ``n``/``N`` stop at: every line shown, since the filter hides the events without a
        match (a match may lie past the cut of a line: searched, not drawn)."""
        return list(range(len(self.lines)))

    def action_next_match(self) -> None:
        self.move_to_match(+1)

    def action_previous_match(self) -> None:
        self.move_to_match(-1)

    def move_to_match(self, step: int) -> None:
        """Mark the next (``step`` > 0) or previous matching line and scroll it into view, wrapping at the ends.

        Before the first move it starts from the view: ``n`` takes the first match at or below the top line,
        ``N`` the last at or above the bottom one.  Moving pauses following, as scrolling up does.
        """
        matches = self.matching_lines()
        if not matches:
            self.notify("no line in the event log matches the filter", severity="warning")
            return
        if self.current_line is None:
            top = self.scroll_offset.y
            bottom = top + self.scrollable_content_region.height - 1
            start = (next((i for i in matches if i >= top), matches[0]) if step > 0 else
                     next((i for i in reversed(matches) if i <= bottom), matches[-1]))
        else:
            current = self.current_line
            start = (next((i for i in matches if i > current), matches[0]) if step > 0 else
                     next((i for i in reversed(matches) if i < current), matches[-1]))
        self._pause()
        self._set_current_line(start)
        self.scroll_to_region(Region(0, start, 1, 1), animate=False, immediate=True)

    def _set_current_line(self, line: int | None) -> None:
        previous, self.current_line = self.current_line, line
        for index in {previous, line} - {None}:
            self.refresh_lines(index)  # type: ignore[arg-type]

    def render_line(self, y: int) -> Strip:
        # The highlighter styles the current line's text; it runs inside this call, for this line only.
        self.highlighter.on_current_line = self.scroll_offset.y + y == self.current_line
        try:
            return super().render_line(y)
        finally:
            self.highlighter.on_current_line = False
