"""``EventLines``: the event log's lines, kept as the events they show and formatted only when read.

At 20,000 events a second the console cannot afford to format every event it keeps (about a fifth of its one
thread did only that, docs/performance.md): the log draws the twenty or so lines in view, and the rest are formatted
only when something reads them (a scroll, ``n``/``N``, Enter, a copy of the selection).  Each entry keeps the box
name the event had when it reached the log, so a line reads the same whenever it is formatted; a line, once
formatted, is kept with its entry until the entry leaves.  Pure: no Textual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload

from rich.cells import cell_len

from tkbox_daemon.wire import Event

LogEntry = tuple[Event, str | None]
"""An event the log shows, with the name of its box when it reached the log (None: not known then)."""
LineOf = Callable[[Event, str | None], str]
"""How an entry becomes its line (``present.event_line``)."""


class EventLines(Sequence[str]):
    """The last ``max_lines`` entries as a read-only sequence of their lines, each formatted by ``line_of`` the
    first time it is read.  ``width`` is the widest line formatted since the last ``clear``, in cells."""

    def __init__(self, line_of: LineOf, max_lines: int | None = None) -> None:
        self._line_of = line_of
        self.max_lines = max_lines
        self._entries: list[LogEntry] = []
        self._lines: list[str | None] = []
        self.width = 0

    def append(self, entries: Iterable[LogEntry]) -> int:
        """Add ``entries`` at the end; returns how many of the oldest were dropped to keep ``max_lines``."""
        added = list(entries)
        self._entries += added
        self._lines += [None] * len(added)
        dropped = len(self._entries) - self.max_lines if self.max_lines is not None else 0
        if dropped > 0:
            del self._entries[:dropped]
            del self._lines[:dropped]
            return dropped
        return 0

    def clear(self) -> None:
        self._entries.clear()
        self._lines.clear()
        self.width = 0

    def entry(self, index: int) -> LogEntry:
        return self._entries[index]

    def is_formatted(self, index: int) -> bool:
        """Whether the line at ``index`` was formatted already (tests count what a render formats)."""
        return self._lines[index] is not None

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self._line(position) for position in range(*index.indices(len(self._entries)))]
        if index < 0:
            index += len(self._entries)
        if not 0 <= index < len(self._entries):
            raise IndexError("log line index out of range")
        return self._line(index)

    def __iter__(self) -> Iterator[str]:
        return (self._line(position) for position in range(len(self._entries)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(mine == theirs for mine, theirs in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by its lines

    def __repr__(self) -> str:
        return f"EventLines({len(self)} lines, {sum(line is not None for line in self._lines)} formatted)"

    def _line(self, index: int) -> str:
        line = self._lines[index]
        if line is None:
            event, box_name = self._entries[index]
            line = self._lines[index] = self._line_of(event, box_name)
            self.width = max(self.width, cell_len(line))
        return line
