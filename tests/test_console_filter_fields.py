"""The filter searches every field of an event, not the line cut for drawing; alert kinds are coloured.

The tester's run: 480 concurrent execs, and ``exit_code=0`` found 2 of the 480 finished ones, because the payload
was cut to 120 characters before the regular expression ran.  Here the regex searches ``event_search_text`` (every
field, escaped as drawn) and only the drawn line is cut.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from rich.segment import Segment
from textual.color import Color

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_box,
    make_event,
    quiet_settings,
    wait_until,
)
from tkbox_daemon.wire import Event
from tkbox_tui.console.app import make_app
from tkbox_tui.console.present import (
    ALERT_KINDS,
    DRAWN_DATA_LIMIT,
    SEARCH_VALUE_LIMIT,
    event_line,
    event_search_text,
    event_texts,
    is_alert_line,
    value_text,
)
from tkbox_tui.console.state import ConsoleState, EventFilter
from tkbox_tui.console.widgets import BoxTable, CommandBar, EventLog
from tkbox_tui.terminal_text import ELLIPSIS, safe_text

ROOT = Path(__file__).resolve().parents[1]


def finished_exec(seq: int, exit_code: int, box_id: str = "b1") -> Event:
    """An ``exec.finished`` as the daemon emits it (daemon/boxes/exec_session.py), with a realistic command."""
    return make_event(seq, box_id, "exec.finished",
                      command=f"sh -c 'python3 -m pytest tests/unit/test_job_{seq:03d}.py -q --maxfail=1; exit "
                              f"{exit_code}'",
                      decision_id=f"dec-{seq:032x}", exit_code=exit_code, signal=None, timed_out=False,
                      reported_by="guest", host={"outcome": "reported", "time_limit_ms": 1_800_000})


RUN = [finished_exec(seq, 0 if seq % 8 else 1 + seq % 5) for seq in range(1, 481)]  # 420 exit 0, 60 failures


def _state(query: str) -> ConsoleState:
    state = ConsoleState(event_filter=EventFilter.parse(query))
    state.set_boxes([make_box("b1", "load-test")])
    return state


def test_exit_code_0_finds_every_finished_exec_that_exited_0_though_the_drawn_line_is_cut():
    assert all("exit_code=" not in event_line(event, "load-test") for event in RUN)  # the cut hides it…
    state = _state("exit_code=0")
    shown = state.shown_lines(RUN)
    assert len(shown) == 420 == sum(event.data["exit_code"] == 0 for event in RUN)  # …the filter still finds it
    assert shown == [event_line(event, "load-test") for event in RUN if event.data["exit_code"] == 0]
    assert len(_state(r"exit_code=0\b").shown_lines(RUN)) == 420
    assert len(_state("!exit_code=0").shown_lines(RUN)) == 60


def test_the_examples_in_docs_console_md_work_as_written():
    docs = (ROOT / "docs" / "console.md").read_text()
    events = [*RUN[:16], make_event(500, "b1", "exec.denied", command="curl https://example.net/x.sh",
                                    rule_ids=["TK-D001"], reason="downloads", verdict="deny"),
              make_event(501, "b1", "exec.started", command="wget -q https://example.net"),
              make_event(502, "b2", "box.stopped", state="stopped"),
              make_event(503, "b2", "box.started", state="running"),
              make_event(504, "b2", "exec.finished", command="sleep 9999", exit_code=137, signal=9, timed_out=True)]
    examples = {  # each example as docs/console.md writes it, and the events it finds here
        "curl|wget": [500, 501],
        "exit_code=[1-9]": [8, 16, 504],
        "exit_code=0": [seq for seq in range(1, 17) if seq % 8],
        r"#12\d\b": [],  # none here; see RUN below
        "timed_out=true": [504],
        "rule_ids=.*TK-D": [500],
        "!kind:box": [*range(1, 17), 500, 501, 504],
        "!box:web denied": [*range(1, 17), 501, 502, 503, 504],
    }
    for query, expected in examples.items():
        assert f"`{query}`" in docs, f"docs/console.md no longer shows the example {query}"
        state = ConsoleState(event_filter=EventFilter.parse(query))
        state.set_boxes([make_box("b1", "web"), make_box("b2", "db")])
        assert [event.seq for event in events if state.shows(event)] == expected, query
    assert len(_state(r"#12\d\b").shown_lines(RUN)) == 10  # #120 … #129


def test_values_are_spelled_as_json_and_strings_as_themselves():
    line = event_line(make_event(7, "b1", "exec.finished", command="make test", exit_code=0, signal=None,
                                 timed_out=False, rule_ids=["a", "b"]), "web")
    assert line.endswith('command=make test exit_code=0 signal=null timed_out=false rule_ids=["a", "b"]')
    assert value_text("\x1b[2J") == "\x1b[2J" and value_text({"k": [1, None]}) == '{"k": [1, null]}'


async def test_typing_the_filter_in_the_console_shows_every_match_and_n_steps_through_them(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "load-test")])
    app = make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)
    run = RUN[:48]  # 42 exit 0
    async with app.run_test(size=(180, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.connected and fake.stream_opened.is_set())
        for event in run:
            fake.live.put_nowait(event)
        log = app.screen.query_one(EventLog)
        await wait_until(pilot, lambda: len(log.lines) == len(run))
        await pilot.press("slash", *"exit_code=0", "enter")
        await wait_until(pilot, lambda: len(log.lines) == 42)
        assert [int(re.search(r"#(\d+)", line).group(1)) for line in log.lines] == [
            event.seq for event in run if event.data["exit_code"] == 0]
        assert app.focused is log
        await pilot.press("n")  # the match is past the cut of every line: n still stops at each one
        first = log.current_line
        await pilot.press("n")
        assert first is not None and log.current_line == first + 1
        await pilot.press("slash")
        assert app.screen.query_one(CommandBar).value == "exit_code=0"


# -- colours of alert kinds ----------------------------------------------------------------------------------


def _colour_of(log: EventLog, y: int, text: str) -> Color | None:
    for segment_text, style, _ in Segment.filter_control(log.render_line(y)):
        if text in segment_text and style is not None and style.color is not None:
            return Color.from_rich_color(style.color)
    return None


async def test_alert_kinds_are_coloured_with_the_themes_event_alert_token_in_log_and_table(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "web", last_event="box.created")])
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", theme="tkbox-dark"), clock=fixed_clock)
    async with app.run_test(size=(180, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.connected and fake.stream_opened.is_set())
        fake.box_list = [make_box("b1", "web", last_event="exec.denied")]
        for event in (make_event(1, "b1", "exec.started", command="make"),
                      make_event(2, "b1", "exec.denied", command="curl x", verdict="deny"),
                      make_event(3, "", "gap", missing=4)):
            fake.live.put_nowait(event)
        log = app.screen.query_one(EventLog)
        table = app.screen.query_one(BoxTable)
        await wait_until(pilot, lambda: len(log.lines) == 3 and str(table.get_cell("b1", "last event")) == "exec.denied")
        for theme in ("tkbox-dark", "tkbox-light", "tkbox-high-contrast"):
            app.switch_theme(theme)
            await pilot.pause()
            alert = Color.parse(app.tkbox_tokens["event-alert"])
            assert _colour_of(log, 1, "exec.denied") == alert and _colour_of(log, 2, "gap") == alert
            assert _colour_of(log, 0, "exec.started") != alert
            cell = table.get_cell("b1", "last event")
            assert Color.parse(str(cell.style)) == alert, theme


async def test_the_last_event_column_widens_when_a_longer_kind_arrives(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "web", last_event="box.created")])
    app = make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)
    async with app.run_test(size=(180, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.connected and fake.stream_opened.is_set())
        table = app.screen.query_one(BoxTable)
        fake.box_list = [make_box("b1", "web", last_event="exec.finished")]
        fake.live.put_nowait(make_event(1, "b1", "exec.finished", command="make", exit_code=0))
        await wait_until(pilot, lambda: str(table.get_cell("b1", "last event")) == "exec.finished")
        await wait_until(pilot, lambda: any("exec.finished" in table.render_line(y).text for y in range(3)))
        await wait_until(pilot, lambda: table.columns["last event"].get_render_width(table)
                         >= len("exec.finished") + 2)  # + padding: the whole kind fits


# -- properties ----------------------------------------------------------------------------------------------

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)
payloads = st.dictionaries(st.text(max_size=20), json_values | st.text(min_size=100, max_size=400), max_size=6)
any_events = st.builds(Event, st.integers(1, 10**9), st.text(max_size=30), st.text(max_size=12),
                       st.sampled_from(sorted(ALERT_KINDS | {"exec.started", "exec.finished", "box.started"}))
                       | st.text(max_size=24), payloads)
box_names = st.none() | st.text(max_size=20)


@given(any_events, box_names)
def test_the_drawn_line_is_a_prefix_of_what_the_filter_searches(event, name):
    drawn, searched = event_line(event, name), event_search_text(event, name)
    assert searched.startswith(drawn.removesuffix(ELLIPSIS))
    assert drawn == searched or drawn.endswith(ELLIPSIS)
    assert "\n" not in searched and "\x1b" not in searched


@given(any_events, box_names)
def test_both_texts_made_at_once_are_the_ones_made_apart(event, name):
    assert event_texts(event, name) == (event_line(event, name), event_search_text(event, name))


@given(any_events, box_names)
def test_every_key_and_value_of_the_payload_is_searched(event, name):
    searched = event_search_text(event, name)
    for key, value in event.data.items():
        pair = f"{safe_text(key)}={safe_text(value_text(value))}"
        assert pair in searched
        pattern = re.escape(pair)
        if len(pattern) <= 256:
            assert EventFilter(text=pattern).shows(event, name)  # found wherever it sits, past the cut too


@given(any_events, box_names)
def test_the_kind_read_back_from_a_line_decides_its_colour(event, name):
    assert is_alert_line(event_line(event, name)) == (event.kind in ALERT_KINDS)


def test_each_value_searched_is_bounded():
    event = make_event(1, "b1", "exec.finished", command="x" * (SEARCH_VALUE_LIMIT * 2), exit_code=0)
    searched = event_search_text(event, "web")
    assert len(searched) < SEARCH_VALUE_LIMIT + 200 and searched.endswith("exit_code=0")
    assert len(event_line(event, "web")) < DRAWN_DATA_LIMIT + 80


def test_value_text_is_json_for_what_json_gives():
    for value in (None, True, 3, 2.5, [1, "a"], {"b": None}):
        assert json.loads(value_text(value)) == value
