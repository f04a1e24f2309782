"""``EventLines``: the event log's lines are formatted when read, once each, and read as the events they show."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.console_fakes import make_event
from tkbox_tui.console.event_lines import EventLines
from tkbox_tui.console.present import event_line


class CountingLineOf:
    """``event_line``, counting the lines it makes, by seq."""

    def __init__(self) -> None:
        self.made: list[int] = []

    def __call__(self, event, box_name):
        self.made.append(event.seq)
        return event_line(event, box_name)


def entries(first: int, count: int, name: str | None = "web-api"):
    return [(make_event(seq, "b1", "exec.finished", exit_code=seq % 3), name) for seq in range(first, first + count)]


def test_appending_formats_nothing_and_a_line_is_formatted_once_when_read():
    line_of = CountingLineOf()
    lines = EventLines(line_of, max_lines=5_000)
    lines.append(entries(1, 5_000))
    assert len(lines) == 5_000 and line_of.made == []
    shown = lines[-3:]  # what a log at the end of 5,000 lines with a 3-line view draws
    assert line_of.made == [4_998, 4_999, 5_000]
    assert shown == [event_line(event, name) for event, name in entries(4_998, 3)]
    assert lines[-1] == shown[-1] and lines[4_997] == shown[0] and line_of.made == [4_998, 4_999, 5_000]
    assert [lines.is_formatted(index) for index in (0, 4_996, 4_997)] == [False, False, True]


def test_beyond_max_lines_the_oldest_go_and_a_line_keeps_its_text():
    line_of = CountingLineOf()
    lines = EventLines(line_of, max_lines=4)
    assert lines.append(entries(1, 3)) == 0
    kept = lines[2]  # #3, formatted while it was the last line
    assert lines.append(entries(4, 3)) == 2
    assert [lines.entry(index)[0].seq for index in range(len(lines))] == [3, 4, 5, 6]
    assert lines[0] == kept and line_of.made == [3]
    assert lines.append(entries(7, 10)) == 10  # a batch larger than the log: only its newest stay
    assert [lines.entry(index)[0].seq for index in range(4)] == [13, 14, 15, 16]


def test_a_line_shows_the_box_name_its_event_had_when_it_reached_the_log():
    lines = EventLines(event_line)
    lines.append(entries(1, 1, name="web-api") + entries(2, 1, name=None))
    assert " web-api " in lines[0] and " b1 " in lines[1]


def test_it_reads_as_a_sequence_of_str():
    lines = EventLines(event_line)
    assert lines == [] and list(lines) == [] and not lines
    lines.append(entries(1, 3))
    expected = [event_line(event, name) for event, name in entries(1, 3)]
    assert lines == expected and list(lines) == expected and lines[::2] == expected[::2]
    assert lines[-3] == expected[0] and expected[1] in lines
    assert lines != expected[:2] and lines != "".join(expected)
    with pytest.raises(IndexError):
        lines[3]
    with pytest.raises(IndexError):
        lines[-4]


def test_width_is_the_widest_line_formatted_since_the_last_clear():
    lines = EventLines(event_line)
    lines.append([(make_event(1, "b1", "exec.finished", exit_code=0), "web-api"),
                  (make_event(2, "b1", "exec.finished", command="x" * 60), "web-api")])
    assert lines.width == 0  # nothing formatted yet
    short = lines[0]
    assert lines.width == len(short)
    long = lines[1]
    assert lines.width == len(long) > len(short)
    lines.clear()
    assert lines.width == 0 and len(lines) == 0


@settings(max_examples=60, deadline=None)
@given(max_lines=st.integers(1, 40), batches=st.lists(st.integers(0, 30), max_size=8),
       reads=st.lists(st.integers(0, 200), max_size=30))
def test_the_lines_are_always_the_newest_entries_each_formatted_at_most_once(max_lines, batches, reads):
    """Whatever is appended and read, in any order: the lines are those of the newest ``max_lines`` entries, in
    order, as ``event_line`` makes them, and no entry's line is made twice."""
    line_of = CountingLineOf()
    lines = EventLines(line_of, max_lines=max_lines)
    appended = []
    next_seq = 1
    for step, count in enumerate(batches):
        batch = entries(next_seq, count, name=f"box-{step}")
        next_seq += count
        appended += batch
        lines.append(batch)
        for index in reads:
            if index < len(lines):
                assert lines[index] == event_line(*appended[-len(lines):][index])
    kept = appended[-max_lines:] if appended else []
    assert list(lines) == [event_line(event, name) for event, name in kept]
    assert len(line_of.made) == len(set(line_of.made))
