"""The console's approvals without a terminal: the reducer over approval events and the daemon's list, what the
inbox and the prompt say (escaped), and the rules of the prompt's gate."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from tests.console_fakes import FIXED_NOW, make_approval, make_event
from tkbox_daemon.wire import ApprovalInfo
from tkbox_tui.console.approval_text import (
    answered_elsewhere,
    detail_lines,
    expires_text,
    format_countdown,
    inbox_cells,
    state_text,
    summary,
)
from tkbox_tui.console.approvals_state import ApprovalsState, approval_of
from tkbox_tui.console.present import escaped
from tkbox_tui.console.prompt_gate import PromptGate
from tkbox_tui.terminal_text import safe_text


def _event(seq: int, kind: str, info: ApprovalInfo):
    return make_event(seq, info.box_id, kind, approval=info.to_json())


def test_pending_then_answered_then_a_replayed_pending_stays_answered():
    state = ApprovalsState()
    asked = make_approval()
    approved = replace(asked, state="approved", answered_by="uid 1000 (op)", answered_at="2025-03-01T11:59:58Z")
    assert state.apply(_event(1, "approval.pending", asked), FIXED_NOW) == asked
    assert state.pending_count() == 1 and state.pending_count("b1") == 1 and state.pending_count("b2") == 0
    assert state.apply(_event(2, "approval.answered", approved), FIXED_NOW) == approved
    assert state.apply(_event(3, "approval.pending", asked), FIXED_NOW) is None  # never back to pending
    assert state.pending_count() == 0 and state.get(asked.id).state == "approved"


def test_events_the_list_already_holds_change_nothing():
    state = ApprovalsState()
    approved = make_approval(state="approved", answered_at="2025-03-01T11:59:58Z")
    state.set_all([approved], listed_through=10, now=FIXED_NOW)
    assert state.apply(_event(9, "approval.pending", make_approval("apr-00000000000000c3")), FIXED_NOW) is None
    assert state.apply(_event(11, "approval.pending", make_approval("apr-00000000000000c3")), FIXED_NOW) is not None
    assert [info.id for info in state.pending] == ["apr-00000000000000c3"]


def test_the_daemons_list_replaces_what_it_no_longer_keeps():
    state = ApprovalsState()
    state.apply(_event(1, "approval.pending", make_approval("apr-00000000000000c3")), FIXED_NOW)
    state.set_all([make_approval("apr-00000000000000d4")], listed_through=None, now=FIXED_NOW)
    assert list(state.approvals) == ["apr-00000000000000d4"] and state.synced


def test_settled_approvals_stay_for_a_while_then_drop():
    state = ApprovalsState(keep_settled=300)
    state.take(make_approval(state="expired", answer_reason="nobody answered in 120 s"), FIXED_NOW)
    state.take(make_approval("apr-00000000000000b2"), FIXED_NOW)
    assert not state.prune(FIXED_NOW + timedelta(seconds=60))
    assert not state.prune(FIXED_NOW + timedelta(seconds=400))  # expired at 12:01:45, kept for 300 s
    assert state.prune(FIXED_NOW + timedelta(seconds=406))
    assert list(state.approvals) == ["apr-00000000000000b2"]  # a pending one never drops


def test_approvals_are_kept_oldest_first_whatever_order_they_arrive_in():
    state = ApprovalsState()
    state.take(make_approval("apr-00000000000000b2", created_at="2025-03-01T11:59:50Z"), FIXED_NOW)
    state.take(make_approval("apr-00000000000000a1", created_at="2025-03-01T11:59:40Z"), FIXED_NOW)
    assert [info.id for info in state.ordered] == ["apr-00000000000000a1", "apr-00000000000000b2"]


def test_an_event_whose_payload_is_not_an_approval_is_counted_not_shown():
    state = ApprovalsState()
    assert state.apply(make_event(1, "b1", "approval.pending", approval={"id": "apr-x"}), FIXED_NOW) is None
    assert state.apply(make_event(2, "b1", "approval.pending"), FIXED_NOW) is None
    assert state.malformed == 2 and not state.approvals


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                      max_size=4), max_leaves=12)


@given(st.dictionaries(st.sampled_from(list(ApprovalInfo.__dataclass_fields__)) | st.text(max_size=6), json_values))
def test_approval_of_never_raises_and_what_it_gives_round_trips(payload):
    """Property: whatever an approval event carries, the console either leaves it out or has an approval that
    reads back the same."""
    info = approval_of(make_event(1, "b1", "approval.pending", approval=payload))
    assert info is None or ApprovalInfo.from_json(info.to_json()) == info


@given(st.permutations(list(range(6))), st.sets(st.integers(0, 2)))
def test_whatever_order_the_events_come_in_an_answered_approval_stays_answered(order, answered):
    """Property: three approvals, each asked and (some) answered; their six events applied in any order (the seq
    numbers in that order) leave exactly the answered ones settled and the others pending."""
    asked = [make_approval(f"apr-{index:016x}") for index in range(3)]
    events = [("approval.pending", info) for info in asked]
    events += [("approval.answered", replace(info, state="rejected")) for info in asked]
    state = ApprovalsState()
    for seq, position in enumerate(order, 1):
        kind, info = events[position]
        if kind == "approval.pending" or position - 3 in answered:
            state.apply(_event(seq, kind, info), FIXED_NOW)
    assert {info.id for info in state.pending} == {asked[index].id for index in range(3)} - {
        asked[index].id for index in answered}


HOSTILE = "rm -rf / \x1b]52;c;cm0K\x07 \x1b[2J\u202e[bold red]x[/] \r\n"


def test_what_the_inbox_and_the_prompt_say_is_escaped():
    info = make_approval(command=HOSTILE, box_name="evil\x1b[31m", reason="quotes \x1b[1m", hint="\x9b1m")
    shown = [*inbox_cells(info, FIXED_NOW), *(value for _, value in detail_lines(info, FIXED_NOW)), summary(info),
             answered_elsewhere(replace(info, state="rejected", answered_by="uid 0\x1b", answer_reason="\r"))]
    for text in shown:
        assert not any(ord(char) < 32 or 0x7f <= ord(char) <= 0x9f or char == "\u202e" for char in text), text
    assert "\\x1b]52;c;cm0K\\x07 \\x1b[2J\\u202e[bold red]x[/] \\r\\n" in dict(detail_lines(info, FIXED_NOW))["asks"]


def test_the_countdown_and_the_marks():
    info = make_approval()  # asked 15 s ago, expires in 105 s
    assert expires_text(info, FIXED_NOW) == "1m45s"
    assert expires_text(info, FIXED_NOW + timedelta(seconds=104.5)) == "0s"
    assert expires_text(info, FIXED_NOW + timedelta(seconds=106)) == "due"
    assert format_countdown(59) == "59s" and format_countdown(3725) == "1h02m"
    assert dict(detail_lines(info, FIXED_NOW))["time"] == "held for 15s   expires in 1m45s"
    assert state_text(replace(info, state="approved", answered_by="uid 1000 (op)", remember=True)) == \
        "approved by uid 1000 (op) (and remembered)"
    assert state_text(replace(info, state="approved", remembered_by="rem-0123456789ab")) == \
        "approved by remembered rule rem-0123456789ab"
    assert state_text(replace(info, state="rejected", answered_by="uid 0 (root)", answer_reason="not now")) == \
        "rejected by uid 0 (root): not now"
    assert inbox_cells(replace(info, state="expired"), FIXED_NOW)[:1] == ("expired",)


def test_the_gate_waits_for_typing_to_pause_and_arms_the_prompt_after_it_shows():
    gate = PromptGate(typing_pause=2.0, arm_delay=0.5)
    assert gate.may_open(input_focused=False, now=0.0) and gate.may_open(input_focused=True, now=0.0)
    gate.note_typing(10.0)
    assert gate.may_open(input_focused=False, now=10.1)  # the focus is not in a text input
    assert not gate.may_open(input_focused=True, now=11.9) and gate.wait_left(True, 11.5) == 0.5
    assert gate.may_open(input_focused=True, now=12.0)
    assert not gate.armed(shown_at=5.0, key_time=4.0)  # typed before it showed
    assert not gate.armed(shown_at=5.0, key_time=5.4) and gate.armed(shown_at=5.0, key_time=5.5)


@given(st.text() | st.text(alphabet=st.characters(max_codepoint=127)))
def test_the_logs_fast_escape_is_safe_text(text):
    """Property: the log's fast path (``present.escaped``, taken for the prompt's sake at 20,000 events/s) gives
    exactly what ``safe_text`` gives, for any text."""
    assert escaped(text) == safe_text(text)
