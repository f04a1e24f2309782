"""``EventLog``: the live event stream as plain lines; follows new events until the operator scrolls up.

Following means the newest line is on screen, after every write and every resize (``keep_newest_in_view``).

It holds events, not lines (``EventLines``): a line is formatted when it is first drawn or read, so a flood of
events costs the log a list append each, not a formatted line each.  Otherwise it behaves as Textual's ``Log``:
the same look, scrolling, ``max_lines`` and text selection.

It colours the lines of alert kinds (``present.is_alert_line``), highlights the matches of the filter's regular
expression in the lines it shows, and ``n``/``N`` move a current-line marker to the next/previous line shown (each
matches the filter, though a match past a line's cut is not drawn).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.cells import cell_len
from rich.highlighter import Highlighter
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.selection import Selection
from textual.strip import Strip

from ..event_lines import EventLines, LineOf, LogEntry
from ..filter_pattern import FilterPattern
from ..keymap import bindings_for
from ..present import event_line, is_alert_line

_control_codes = re.compile("[\u0000-\u0014]").sub  # as Textual's ``Log`` draws them


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


class EventLog(ScrollView, can_focus=True):
    """The event log: a line per event shown, scrolled like Textual's ``Log``; it reports when the operator scrolls
    away from the end (following pauses) and steps between the lines that match the filter."""

    ALLOW_SELECT = True
    BINDINGS = bindings_for("log")
    KEY_SCOPE = "log"
    """The key catalogue's scope of this pane (help lists its keys while another pane has the focus)."""
    HELP_PANE = "event log"
    COMPONENT_CLASSES = {"event-log--match", "event-log--current", "event-log--alert"}
    DEFAULT_CSS = """
    EventLog {
        background: $surface;
        color: $text;
        overflow: scroll;
        height: 1fr;
        &:focus { background-tint: $foreground 5%; }
    }
    EventLog > .event-log--match { background: $log-match; color: $background; text-style: bold; }
    EventLog > .event-log--current { background: $primary 30%; }
    EventLog > .event-log--alert { color: $event-alert; }
    """

    auto_scroll: var[bool] = var(True)
    """Following: new lines scroll the newest into view."""

    @dataclass
    class FollowPaused(Message):
        """The operator scrolled up: stop following, count what arrives."""

    @dataclass
    class OlderWanted(Message):
        """The operator asked for the events before the oldest shown (``log.older``, or scrolled to the top)."""

    def __init__(self, max_lines: int, line_of: LineOf = event_line, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.highlighter: MatchHighlighter = MatchHighlighter(self.get_component_rich_style)
        self._lines = EventLines(line_of, max_lines)
        self.current_line: int | None = None
        """The line ``n``/``N`` moved to (an index into ``lines``), or None before the first move."""
        self._width_pending = False

    @property
    def allow_select(self) -> bool:
        return True

    @property
    def lines(self) -> EventLines:
        """The lines, oldest first (a read-only sequence of ``str``; each is formatted when first read)."""
        return self._lines

    @property
    def line_count(self) -> int:
        return len(self._lines)

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
        """While following, show the newest line: a write scrolls to the end only when the view was at the end
        already, and a resize (the exec panel opening, the terminal shrinking) leaves the view short of it —
        following would stop for good while the status still said FOLLOWING."""
        if self.auto_scroll and not self.is_vertical_scrollbar_grabbed:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def on_resize(self) -> None:
        self.keep_newest_in_view()

    # -- writing --------------------------------------------------------------------------------------------

    def replace_events(self, entries: Iterable[LogEntry]) -> None:
        """Show exactly ``entries`` (after the filter or scope changed)."""
        self.current_line = None
        self.clear()
        self.write_events(entries)

    def clear(self) -> None:
        self._lines.clear()
        self.virtual_size = Size(0, 0)
        self.refresh()

    def write_events(self, entries: Iterable[LogEntry], scroll_end: bool | None = None) -> None:
        """Add a line for each of ``entries`` (formatted once drawn), as ``Log.write_lines`` adds lines: dropping the
        oldest beyond ``max_lines`` and scrolling to the end if following from the end; the current line stays on
        its text when old lines are dropped off the top."""
        at_end = self.is_vertical_scroll_end
        start = len(self._lines)
        dropped = self._lines.append(entries)
        added = len(self._lines) - start + dropped
        if not added:
            return
        if dropped and self.current_line is not None:
            self.current_line = self.current_line - dropped if self.current_line >= dropped else None
        self.virtual_size = Size(self._lines.width, len(self._lines))
        self.refresh_lines(max(0, start - dropped), added)
        if (self.auto_scroll if scroll_end is None else scroll_end) and at_end \
                and not self.is_vertical_scrollbar_grabbed:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        else:
            self.refresh()
        if scroll_end is not False:
            self.keep_newest_in_view()
        self._measure_view()

    def _measure_view(self) -> None:
        """Format the lines in view now, so that the width to scroll over counts them before they are drawn."""
        top = self.scroll_offset.y
        for index in range(top, min(top + max(self.scrollable_content_region.height, 1), len(self._lines))):
            self._lines[index]
        self._sync_width()

    def _sync_width(self) -> None:
        self._width_pending = False
        if self.virtual_size.width != self._lines.width:
            self.virtual_size = Size(self._lines.width, len(self._lines))

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._pause()
        super()._on_mouse_scroll_up(event)
        self._older_at_top()

    def action_scroll_up(self) -> None:
        self._pause()
        super().action_scroll_up()
        self._older_at_top()

    def action_page_up(self) -> None:
        self._pause()
        super().action_page_up()
        self._older_at_top()

    def action_scroll_home(self) -> None:
        self._pause()
        super().action_scroll_home()
        self._older_at_top()

    def action_load_older(self) -> None:
        self._pause()
        self.post_message(self.OlderWanted())

    def _older_at_top(self) -> None:
        """Scrolling up to the first line asks for the events before it."""
        if min(self.scroll_y, self.scroll_target_y) <= 0:
            self.post_message(self.OlderWanted())

    def grow(self, max_lines: int) -> None:
        """Keep up to ``max_lines`` lines (a page of older events joined the log)."""
        if self._lines.max_lines is not None and max_lines > self._lines.max_lines:
            self._lines.max_lines = max_lines

    # -- matches ---------------------------------------------------------------------------------------------

    @property
    def match_pattern(self) -> FilterPattern | None:
        return self.highlighter.pattern

    def set_match_pattern(self, pattern: FilterPattern | None) -> None:
        """Highlight ``pattern`` (None: nothing) and forget the current line; call before ``replace_events``."""
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

    # -- drawing (as Textual's ``Log`` draws, for the lines in view only) --------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        rich_style = self.rich_style
        if index >= len(self._lines):
            return Strip.blank(width, rich_style)
        known_width = self._lines.width
        line = _control_codes("\ufffd", self._lines[index].expandtabs())
        if self._lines.width > known_width and not self._width_pending:
            self._width_pending = True  # a line never drawn is wider: the scroll width grows after this frame
            self.call_after_refresh(self._sync_width)
        text = Text(line, no_wrap=True)
        text.stylize(rich_style)
        # The highlighter styles the current line's text; it runs inside this call, for this line only.
        self.highlighter.on_current_line = index == self.current_line
        try:
            text = self.highlighter(text)
        finally:
            self.highlighter.on_current_line = False
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(index)) is not None:
            start, end = span
            text.stylize(self.screen.get_component_rich_style("screen--selection"), start,
                         len(text) if end == -1 else end)
        strip = Strip(text.render(self.app.console), cell_len(line))
        return strip.crop_extend(scroll_x, scroll_x + width, rich_style).apply_offsets(scroll_x, index)

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The selected text (every line is formatted for it: a copy is rare)."""
        return selection.extract("\n".join(self._lines)), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()
