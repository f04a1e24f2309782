"""Plain tests of the console's pure parts: the ``ConsoleState`` reducer, presentation, form checks, commands."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.console_fakes import FIXED_NOW, make_box, make_event
from tkbox_tui.console.box_form import FIELDS, check_field, check_form, settings_from_form
from tkbox_tui.console.command_mode import CommandError, parse_command
from tkbox_tui.console.event_stream import Backoff, EventInbox
from tkbox_tui.console.present import box_cells, box_detail_lines, format_duration
from tkbox_tui.console.state import ConsoleState, EventFilter


def test_apply_ignores_events_already_seen_and_tracks_box_state():
    state = ConsoleState()
    state.set_boxes([make_box("b1", "web")])
    assert state.apply(make_event(1, "b1", "box.held"))
    assert not state.apply(make_event(1, "b1", "box.held"))
    assert state.boxes["b1"].state == "held" and state.boxes["b1"].last_event == "box.held"
    assert [e.seq for e in state.events] == [1]


def test_the_ring_is_bounded_but_every_event_is_counted():
    state = ConsoleState(ring_size=10)
    for seq in range(1, 101):
        state.apply(make_event(seq))
    assert len(state.events) == 10 and state.events_seen == 100 and state.last_seq == 100


@given(st.lists(st.integers(min_value=1, max_value=300), max_size=200))
def test_any_delivery_order_with_repeats_keeps_seqs_strictly_increasing(seqs):
    state = ConsoleState()
    for seq in seqs:
        state.apply(make_event(seq))
    kept = [e.seq for e in state.events]
    assert kept == sorted(set(kept)) and len(kept) == state.events_seen


def test_paused_counts_only_what_the_filter_shows():
    state = ConsoleState()
    state.set_boxes([make_box("b1", "web"), make_box("b2", "db")])
    state.event_filter = EventFilter.parse("box:db")
    state.pause()
    state.apply(make_event(1, "b1"))
    state.apply(make_event(2, "b2"))
    assert state.new_while_paused == 1
    state.follow()
    assert state.following and state.new_while_paused == 0


def test_filter_parses_box_kind_and_text():
    rule = EventFilter.parse("kind:exec box:web curl")
    assert (rule.box, rule.kind, rule.text) == ("web", "exec", "curl")
    assert rule.describe() == "box:web kind:exec curl"
    state = ConsoleState(event_filter=rule)
    state.set_boxes([make_box("b1", "web")])
    assert state.shows(make_event(1, "b1", "exec.denied", command="curl x"))
    assert not state.shows(make_event(2, "b1", "box.held"))


def test_scope_to_selected_box():
    state = ConsoleState()
    state.set_boxes([make_box("b1", "web"), make_box("b2", "db")])
    state.selected_box_id = "b2"
    state.scope_to_selected = True
    assert not state.shows(make_event(1, "b1")) and state.shows(make_event(2, "b2"))


def test_box_cells_use_the_injected_clock():
    box = make_box("b1", "web", execs_running=1, execs_total=4)
    assert box_cells(box, FIXED_NOW) == ("web", "running", "host", "45m", "1h15m", "1/4", "1", "0", "exec.finished")
    assert box_cells(box, FIXED_NOW + timedelta(hours=3))[4] == "0s"
    assert box_cells(make_box("b2", "x", "stopped"), FIXED_NOW)[4] == "-"


def test_detail_shows_secret_names_and_hosts_never_values():
    lines = dict(box_detail_lines(make_box("b1", "web")))
    assert lines["secrets"] == "GH_TOKEN → api.github.com"
    assert lines["run id"] == "run-b1"


@pytest.mark.parametrize(("seconds", "text"), [(5, "5s"), (125, "2m"), (3700, "1h01m"), (200000, "2d"), (-3, "0s")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_form_checks_say_what_to_fix(tmp_path):
    assert "a-z" in check_field("name", "Bad")
    assert "not a directory" in check_field("workspace", str(tmp_path / "nope"))
    assert "512M" in check_field("memory", "lots")
    assert "positive whole number of seconds" in check_field("lifetime", "-3")
    assert check_form({"workspace": str(tmp_path), "cpus": "2"}) == {}
    assert "allow" not in FIELDS and "secrets" not in FIELDS  # the daemon refuses both until their doors exist
    assert settings_from_form({"workspace": str(tmp_path), "cpus": "2", "memory": "1G"}) == {
        "workspace": str(tmp_path), "limits": {"cpus": 2, "memory": "1G"}}


def test_command_aliases():
    assert parse_command(":q") == ("quit", "")
    assert parse_command("box web-1") == ("box", "web-1")
    assert parse_command("ev") == ("events", "")
    with pytest.raises(CommandError, match="needs a name"):
        parse_command("box")
    with pytest.raises(CommandError, match="unknown command"):
        parse_command("launch")


def test_inbox_dedupes_and_signals_once_per_drain():
    inbox = EventInbox()
    assert inbox.put(make_event(1)) and not inbox.put(make_event(2)) and not inbox.put(make_event(2))
    assert [e.seq for e in inbox.drain()] == [1, 2] and inbox.after == 2 and inbox.duplicates_dropped == 1
    assert inbox.put(make_event(3))


def test_backoff_doubles_to_the_maximum_and_resets():
    backoff = Backoff(0.25, 1.0)
    assert [backoff.next_delay() for _ in range(4)] == [0.25, 0.5, 1.0, 1.0]
    backoff.reset()
    assert backoff.next_delay() == 0.25
