"""The event filter: a regex over the shown line, `!` inverts, bad or long patterns refused, matches highlighted, n/N."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st
from rich.segment import Segment
from textual.color import Color

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_box,
    make_event,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.console.app import make_app
from tkbox_tui.console.filter_pattern import MAX_FILTER_PATTERN, FilterError
from tkbox_tui.console.keymap import BINDING_IDS
from tkbox_tui.console.present import connection_label, event_line
from tkbox_tui.console.screens import HelpScreen
from tkbox_tui.console.state import ConsoleState, EventFilter
from tkbox_tui.console.widgets import BoxTable, CommandBar, EventLog

# -- the filter, without a terminal ---------------------------------------------------------------------------


def _state(rule: EventFilter) -> ConsoleState:
    state = ConsoleState(event_filter=rule)
    state.set_boxes([make_box("b1", "web"), make_box("b2", "db")])
    return state


EVENTS = [make_event(1, "b1", "exec.started", command="make test"),
          make_event(2, "b1", "exec.denied", command="curl evil.example"),
          make_event(3, "b2", "box.stopped"),
          make_event(4, "b2", "exec.finished", command="make lint", exit_code=2)]


def _shown(query: str) -> list[int]:
    state = _state(EventFilter.parse(query))
    return [event.seq for event in EVENTS if state.shows(event)]


def test_free_text_is_a_case_insensitive_regex_over_the_line_as_shown():
    assert _shown(r"MAKE\s+(test|lint)") == [1, 4]
    assert _shown(r"curl|box\.stop") == [2, 3]
    assert _shown(r"exit_code=[1-9]") == [4]
    assert _shown(r"#3\b") == [3]  # the sequence number and the box name are part of the line
    assert _shown(r"^\S+ #\d+\s+db\b") == [3, 4]
    assert _shown("") == [1, 2, 3, 4]


def test_box_and_kind_keep_working_and_combine_with_the_regex():
    assert _shown("box:web") == [1, 2]
    assert _shown("box:b2 kind:exec") == [4]
    assert _shown("kind:exec make") == [1, 4]
    assert _shown("make kind:exec box:db") == [4]  # the words may stand anywhere


def test_a_leading_bang_inverts_the_whole_filter():
    assert _shown("!make") == [2, 3]
    assert _shown("!box:web kind:exec curl") == [1, 3, 4]  # all but the web box's exec events that mention curl
    assert _shown("  ! kind:box") == [1, 2, 4]
    rule = EventFilter.parse("!kind:exec")
    assert rule.inverted and rule.kind == "exec" and rule.describe() == "!kind:exec"
    assert rule.highlight is None  # the lines an inverted filter shows have nothing to highlight


def test_the_scope_to_the_selected_box_applies_on_top_and_is_never_inverted():
    state = _state(EventFilter.parse("!make"))
    state.selected_box_id = "b2"
    state.scope_to_selected = True
    assert [event.seq for event in EVENTS if state.shows(event)] == [3]


def test_parse_keeps_the_regex_spacing_and_describe_reads_back():
    rule = EventFilter.parse("box:web  a  b   kind:exec  c")
    assert (rule.box, rule.kind, rule.text, rule.inverted) == ("web", "exec", "a  b   c", False)
    assert EventFilter.parse(rule.describe()) == rule
    assert EventFilter.parse("kind: !x").describe() == "\\!x"  # a leading literal ! is not read back as "invert"
    assert EventFilter.parse("foo\\ ").text == "foo\\ "  # an escaped trailing space is part of the pattern
    assert EventFilter.parse("box:x !foo") == EventFilter("x", "", "!foo", False)
    assert EventFilter.parse("!!foo") == EventFilter("", "", "!foo", True)


def test_a_bad_regex_is_refused_naming_the_problem_and_the_fix():
    with pytest.raises(FilterError) as refused:
        EventFilter.parse("curl (evil")
    message = str(refused.value)
    assert message.startswith("'curl (evil' is not a valid regular expression: missing ): curl (evil")
    assert message.endswith("; escape special characters with \\ (lookarounds and backreferences are not "
                            "supported: they can stall a search)")
    with pytest.raises(FilterError, match="not a valid regular expression"):
        EventFilter(text="[")  # the constructor checks too: no filter holds a pattern that does not compile


def test_patterns_longer_than_the_limit_are_refused():
    assert EventFilter.parse("a" * MAX_FILTER_PATTERN).text == "a" * MAX_FILTER_PATTERN
    with pytest.raises(FilterError, match=f"{MAX_FILTER_PATTERN + 1} characters long; the limit is "
                                          f"{MAX_FILTER_PATTERN}: shorten it"):
        EventFilter.parse("a" * (MAX_FILTER_PATTERN + 1))


@pytest.mark.parametrize("query", ["!", "  !  ", "! box: kind:"])
def test_a_bang_with_nothing_to_invert_is_refused(query):
    with pytest.raises(FilterError, match="needs one after it"):
        EventFilter.parse(query)


def test_the_status_line_shows_the_filter_with_its_bang_and_says_when_inverted():
    plain = connection_label(True, True, 0, "kind:exec")
    inverted = connection_label(True, True, 0, "!kind:exec", True)
    assert plain.endswith("filter: kind:exec") and "inverted" not in plain
    assert "filter: !kind:exec  (inverted: showing events that do not match)" in inverted
    assert "filter" not in connection_label(True, True, 0, "")


# -- properties -------------------------------------------------------------------------------------------------

KINDS = ["exec.started", "exec.denied", "exec.finished", "box.created", "box.stopped", "gap", "signer.unavailable"]
BOX_IDS = ["b1", "b2", "b9", ""]
events = st.builds(make_event, st.integers(1, 100_000), st.sampled_from(BOX_IDS), st.sampled_from(KINDS),
                   command=st.text(max_size=40), note=st.text(alphabet="ab ()[]*.\\", max_size=12))
patterns = st.one_of(st.text(max_size=16), st.text(alphabet="abxe.*+?()[]|\\^$ ", max_size=12),
                     st.sampled_from([r"exec\.\w+", "curl|make", r"#\d+\b", "^11", "web", r"\bdb\b", ""]),
                     st.text(max_size=10).map(re.escape))
queries = st.tuples(st.sampled_from(["", "box:web ", "box:b2 ", "kind:exec ", "box:db kind:box ", "kind: "]),
                    patterns).map("".join)


@given(events, queries)
def test_the_inverted_filter_shows_exactly_the_events_the_plain_one_hides(event, query):
    assume(not query.lstrip().startswith("!"))
    try:
        plain, inverted = EventFilter.parse(query), EventFilter.parse("!" + query)
    except FilterError:
        reject()  # an invalid pattern: nothing to compare
    assert _state(plain).shows(event) != _state(inverted).shows(event)


@given(events, st.data())
def test_an_escaped_substring_of_a_line_always_matches_that_line(event, data):
    name = {"b1": "web", "b2": "db"}.get(event.box_id)
    line = event_line(event, name)
    start = data.draw(st.integers(0, len(line)), label="start")
    end = data.draw(st.integers(start, min(len(line), start + 100)), label="end")
    pattern = re.escape(line[start:end])
    assert EventFilter(text=pattern).shows(event, name)
    if not pattern.startswith("!") and not any(word.startswith(("box:", "kind:")) for word in pattern.split()):
        assert EventFilter.parse(pattern).shows(event, name)  # typed into the filter line, it works the same


@given(st.booleans(), queries)
def test_describe_reads_back_as_the_same_filter(bang, query):
    try:
        rule = EventFilter.parse("!" * bang + query)
    except FilterError:
        reject()  # an invalid pattern: nothing to compare
    again = EventFilter.parse(rule.describe())
    assert (again.box, again.kind, again.inverted) == (rule.box, rule.kind, rule.inverted)
    assert again.text in (rule.text, "\\" + rule.text)  # a leading literal ! comes back escaped: \!
    assert again.describe() == rule.describe()


# -- in the console ------------------------------------------------------------------------------------------


def _app(tmp_path: Path, **overrides):
    fake = FakeDaemonClient(two_boxes())
    return fake, make_app(fake, settings=quiet_settings(tmp_path / "config", **overrides), clock=fixed_clock)


async def _with_events(app, pilot, fake, events_to_send) -> EventLog:
    await wait_until(pilot, lambda: app.state.connected and fake.stream_opened.is_set())
    for event in events_to_send:
        fake.live.put_nowait(event)
    last = events_to_send[-1].seq
    log = app.screen.query_one(EventLog)
    await wait_until(pilot, lambda: app.state.last_seq == last and len(log.lines) == len(events_to_send))
    return log


async def _filter(pilot, text: str) -> None:
    await pilot.press("slash")
    pilot.app.screen.query_one(CommandBar).value = text
    await pilot.press("enter")
    await pilot.pause()


def _status(app) -> str:
    return str(app.screen.query_one("#follow-status").render())


def _seqs(log: EventLog) -> list[int]:
    return [int(re.search(r"#(\d+)", line).group(1)) for line in log.lines]


FLOW_EVENTS = [make_event(1, "b1", "exec.started", command="make test"),
               make_event(2, "b2", "box.stopped"),
               make_event(3, "b1", "exec.denied", command="curl evil"),
               make_event(4, "b1", "exec.finished", command="make lint", exit_code=2)]


async def test_slash_and_a_regex_shows_the_matching_lines_highlighted(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        log = await _with_events(app, pilot, fake, FLOW_EVENTS)
        await pilot.press("slash", *"MAKE", "enter")  # typed key by key
        await wait_until(pilot, lambda: _seqs(log) == [1, 4])
        await _filter(pilot, r"make\s+(test|lint)")
        assert _seqs(log) == [1, 4]
        assert app.focused is log  # so n/N work straight away
        assert "filter: make\\s+(test|lint)" in _status(app) and "inverted" not in _status(app)
        segments = list(Segment.filter_control(log.render_line(0)))
        match_background = Color.parse(app.tkbox_tokens["log-match"]).rich_color
        highlighted = [text for text, style, _ in segments if style and style.bgcolor == match_background]
        assert highlighted == ["make test"]


async def test_a_bang_inverts_the_filter_and_the_status_line_says_so(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        log = await _with_events(app, pilot, fake, FLOW_EVENTS)
        await _filter(pilot, "!kind:exec")
        await wait_until(pilot, lambda: _seqs(log) == [2])
        assert "filter: !kind:exec  (inverted: showing events that do not match)" in _status(app)
        await _filter(pilot, "!make")
        assert _seqs(log) == [2, 3]
        assert log.match_pattern is None  # nothing to highlight in lines that lack the pattern
        await pilot.press("slash")
        assert app.screen.query_one(CommandBar).value == "!make"  # the bar opens with the filter in force


async def test_a_bad_or_long_regex_is_refused_and_the_filter_in_force_stays(tmp_path):
    fake, app = _app(tmp_path)
    notified: list[str] = []  # every notification, kept (the app's own expire after 10 s of wall-clock time)
    notify = app.notify

    def recording_notify(message: str, *args: object, **kwargs: object) -> None:
        notified.append(message)
        notify(message, *args, **kwargs)

    app.notify = recording_notify  # type: ignore[method-assign]
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        log = await _with_events(app, pilot, fake, FLOW_EVENTS)
        await _filter(pilot, "kind:exec make")
        assert _seqs(log) == [1, 4]
        await _filter(pilot, "curl (evil")
        await wait_until(pilot, lambda: any("not a valid regular expression" in message for message in notified))
        refused = [message for message in notified if "not a valid regular expression" in message]
        assert len(refused) == 1
        assert "'curl (evil' is not a valid regular expression" in refused[0]
        assert "escape special characters with \\" in refused[0]
        assert "The filter in force stays: kind:exec make." in refused[0]
        assert app.state.event_filter == EventFilter.parse("kind:exec make")
        assert _seqs(log) == [1, 4] and "filter: kind:exec make" in _status(app)
        bar = app.screen.query_one(CommandBar)
        assert bar.has_class("-open") and bar.value == "curl (evil"  # reopened to fix the typo
        await pilot.press("escape")
        assert not bar.has_class("-open") and app.state.event_filter.describe() == "kind:exec make"
        await _filter(pilot, "x" * (MAX_FILTER_PATTERN + 1))
        await wait_until(pilot, lambda: any(f"the limit is {MAX_FILTER_PATTERN}" in message for message in notified))
        assert app.state.event_filter.describe() == "kind:exec make" and _seqs(log) == [1, 4]
        await pilot.press("escape")
        await pilot.press("colon", *"filter [", "enter")  # :filter is refused the same way
        await wait_until(pilot, lambda: sum("not a valid regular expression" in message for message in notified) >= 2)
        assert sum("not a valid regular expression" in message for message in notified) == 2
        assert app.state.event_filter.describe() == "kind:exec make"


def _in_view(log: EventLog, line: int) -> bool:
    top = log.scroll_offset.y
    return top <= line < top + log.scrollable_content_region.height


async def test_n_and_shift_n_move_between_matching_lines(tmp_path):
    fake, app = _app(tmp_path)
    many = [make_event(seq, "b1", "exec.finished", command=f"make step-{seq}" if seq % 3 == 0 else f"ls {seq}")
            for seq in range(1, 91)]
    async with app.run_test(size=(120, 36)) as pilot:
        log = await _with_events(app, pilot, fake, many)
        await _filter(pilot, r"make step-\d+")
        shown = _seqs(log)
        assert shown == list(range(3, 91, 3)) and log.max_scroll_y > 0  # 30 lines: more than the view holds
        assert app.state.following and log.scroll_offset.y == log.max_scroll_y
        top = log.scroll_offset.y
        await pilot.press("n")  # the first press starts from the top of the view
        assert log.current_line == top and not app.state.following
        await wait_until(pilot, lambda: "PAUSED" in _status(app))
        await pilot.press("n", "n")
        assert log.current_line == top + 2 and _in_view(log, top + 2)
        await pilot.press("N")
        assert log.current_line == top + 1
        for _ in range(len(shown) - 1 - log.current_line):
            await pilot.press("n")
        assert log.current_line == len(shown) - 1
        await pilot.press("n")  # wraps to the first match, scrolled into view
        assert log.current_line == 0 and _in_view(log, 0) and log.scroll_offset.y == 0
        await pilot.press("N")  # and back round to the last
        assert log.current_line == len(shown) - 1 and _in_view(log, len(shown) - 1)
        current_style = log.get_component_rich_style("event-log--current")
        y = log.current_line - log.scroll_offset.y
        assert [style.bgcolor for _, style, _ in log.render_line(y)][0] == current_style.bgcolor
        assert [style.bgcolor for _, style, _ in log.render_line(y - 1)][0] != current_style.bgcolor
        await pilot.press("f")  # following again forgets the marker
        assert app.state.following and log.current_line is None


async def test_n_steps_through_every_shown_line_of_an_inverted_filter(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        log = await _with_events(app, pilot, fake, FLOW_EVENTS)
        await _filter(pilot, "!box:web-api test")  # hides only the web-api box's test line
        assert _seqs(log) == [2, 3, 4]
        await pilot.press("N")
        assert log.current_line == 2
        await pilot.press("N", "N")
        assert log.current_line == 0


async def test_the_marker_stays_on_its_line_when_old_lines_drop_off(tmp_path):
    fake, app = _app(tmp_path, event_ring=10)
    async with app.run_test(size=(120, 36)) as pilot:
        log = await _with_events(app, pilot, fake, [make_event(seq) for seq in range(1, 11)])
        log.focus()
        await pilot.press("N", "N")  # no filter: every line is a stop; the last but one
        assert log.current_line == 8
        marked = log.lines[log.current_line]
        for seq in range(11, 15):
            fake.live.put_nowait(make_event(seq))
        await wait_until(pilot, lambda: _seqs(log)[-1] == 14)
        assert len(log.lines) == 10 and log.current_line == 4 and log.lines[log.current_line] == marked


async def test_n_is_new_box_in_the_boxes_pane_and_next_match_in_the_event_log(tmp_path):
    from tkbox_tui.console.screens import NewBoxScreen

    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        log = await _with_events(app, pilot, fake, FLOW_EVENTS)
        assert isinstance(app.focused, BoxTable)
        await pilot.press("n")
        assert isinstance(app.screen, NewBoxScreen)
        await pilot.press("escape")
        await _filter(pilot, "nothing-matches-this")
        assert log.lines == [] and app.focused is log
        await pilot.press("n")
        assert not isinstance(app.screen, NewBoxScreen)
        assert any("no line in the event log matches" in n.message for n in app._notifications)


async def test_help_lists_the_match_keys_from_any_pane_and_they_can_be_remapped(tmp_path):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "config.yaml").write_text("keymap:\n  log.previous_match: z\n")
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(config_dir), clock=fixed_clock)
    async with app.run_test(size=(120, 40)) as pilot:
        log = await _with_events(app, pilot, fake, FLOW_EVENTS)
        assert {binding.id for binding in EventLog.BINDINGS} == {"log.next_match", "log.previous_match", "log.open",
                                                                 "log.older"}
        assert {binding.id for binding in EventLog.BINDINGS} <= BINDING_IDS
        await pilot.press("question_mark")  # from the boxes pane: listed as the event log's
        rows = {binding_id: (keys, text) for keys, ids, text in app.screen.rows() for binding_id in ids.split(", ")}
        assert rows["log.previous_match"] == ("z", "Previous match (in the event log)")
        # n means New box here and Next match in the event log: one row says both (each key listed once)
        assert rows["box.new"] == rows["log.next_match"] == ("n", "New box; in the event log: Next match")
        await pilot.press("escape")
        log.focus()
        await pilot.press("question_mark")  # from the event log: its own keys
        assert isinstance(app.screen, HelpScreen)
        rows = {binding_id: (keys, text) for keys, binding_id, text in app.screen.rows()}
        assert rows["log.next_match"] == ("n", "Next match") and rows["log.previous_match"] == ("z", "Previous match")
        await pilot.press("escape")
        await pilot.press("z")
        assert log.current_line == len(log.lines) - 1


async def test_the_filter_bar_keeps_an_escaped_trailing_space(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        log = await _with_events(app, pilot, fake, FLOW_EVENTS)
        await _filter(pilot, "  test  ")  # plain spaces around the pattern are trimmed
        assert app.state.event_filter.text == "test" and _seqs(log) == [1]
        await _filter(pilot, "test\\ ")  # "test" ends its line, so "test " matches nothing
        assert app.state.event_filter.text == "test\\ " and log.lines == []


# ---- patterns that could stall the console ---------------------------------------------------------------
@pytest.mark.parametrize("pattern", ["(a+)+b", "(a?a?)*b", "a*a*a*a*a*a*a*a*b", r"(\w+\s?)*$"])
def test_patterns_that_backtrack_exponentially_in_re_search_a_long_line_in_one_pass(pattern: str) -> None:
    # Python's re takes seconds on 20-24 characters for these and doubles per character; RE2 is linear.
    compiled = EventFilter.parse(pattern).regex
    assert compiled is not None
    assert compiled.search("a" * 20_000 + "!") is None or pattern.endswith("$")


@pytest.mark.parametrize(("pattern", "why"), [("(?=curl)c", "invalid perl operator"),
                                              (r"(a)\1", "invalid escape sequence")])
def test_lookarounds_and_backreferences_are_refused_with_the_reason(pattern: str, why: str) -> None:
    with pytest.raises(FilterError, match=f"not a valid regular expression: {why}.*lookarounds and backreferences"):
        EventFilter.parse(pattern)


def test_a_line_with_a_lone_surrogate_is_searched_not_crashed_on() -> None:
    compiled = EventFilter.parse("x+").regex
    assert compiled is not None
    assert compiled.search("\ud800 xx").span() == (2, 4)
    assert [match.span() for match in compiled.finditer("\udfff x \ud800 xx")] == [(2, 3), (6, 8)]


@settings(max_examples=300, deadline=None)
@given(pattern=st.from_regex(r"[abAB()|*+?.]{1,10}", fullmatch=True), line=st.text(alphabet="abAB!ü", max_size=12))
def test_the_filter_finds_what_python_re_finds_wherever_re_is_safe_to_run(pattern: str, line: str) -> None:
    """Property: on short lines (where backtracking is cheap) RE2 gives exactly re's first match and every match,
    case-insensitively, so the operator's regex means what Python's documentation says it means."""
    try:
        expected = re.compile(pattern, re.IGNORECASE)
    except re.error:
        reject()
    if re.search(r"[?*+][?+]", pattern):
        reject()  # lazy and possessive repeats: RE2 has lazy ones but not possessive; neither is a filter's need
    if "(?" in pattern:
        reject()  # Python's own group syntax and inline flags, such as (?a): RE2 refuses them, and says so
    compiled = EventFilter.parse(pattern).regex
    assert compiled is not None
    first = compiled.search(line)
    wanted = expected.search(line)
    assert (first.span() if first else None) == (wanted.span() if wanted else None)
    if expected.match("") is None:  # where empty matches can occur the two differ on which ones follow a match
        assert [m.span() for m in compiled.finditer(line)] == [m.span() for m in expected.finditer(line)]
