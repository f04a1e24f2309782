"""How approvals read on the command line (``approval_text``, ``exec_held``): the exact words for a known approval,
and, whatever an approval or a held exec's messages carry (the command line is the box's), no control character,
escape sequence or invisible character reaches the terminal raw."""

from __future__ import annotations

import contextlib
import io
from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from tests.exec_fakes import ScriptedExec
from tkbox_daemon.wire import APPROVAL_STATES, ApprovalInfo, Event
from tkbox_tui.cli.approval_text import (
    answered_line,
    approval_lines,
    clock,
    duration,
    event_approval,
    event_line,
)
from tkbox_tui.cli.exec_command import drive_exec
from tkbox_tui.cli.exec_held import approved_line, held_line, not_approved_line
from tkbox_tui.terminal_text import HIDDEN_RANGES

HIDDEN = {chr(code) for first, last in HIDDEN_RANGES for code in range(first, last + 1)}
NOW = datetime(2025, 3, 1, 11, 0, 12, tzinfo=UTC)
HOSTILE = "x\x1b[2K\r\x1b]52;c;QQ==\x07\u202e\x9b2J"
PENDING = ApprovalInfo(id="apr-00000000000000aa", box_id="b-1", box_name="web", kind="exec", state="pending",
                       asked={"command": "sudo true", "cwd": "/workspace", "tty": True}, program="sudo",
                       decision_id="dec-1", rule_ids=("TK-A001",), reason="privilege escalation",
                       created_at="2025-03-01T11:00:00Z", expires_at="2025-03-01T11:02:00.500Z")


def test_a_pending_approval_reads_with_how_long_it_has_been_held_and_has_left():
    assert approval_lines(PENDING, NOW) == [
        "apr-00000000000000aa  pending   web  exec  held 12s, expires in 1m48s (at 11:02:00 UTC)",
        "  asks:   sudo true  (cwd /workspace, on a terminal)",
        "  policy: TK-A001 privilege escalation"]


def test_an_answered_approval_reads_with_who_answered_when_and_why():
    rejected = replace(PENDING, state="rejected", answered_by="uid 0 (root)", answered_at="2025-03-01T11:00:30Z",
                       answer_reason="not today")
    assert approval_lines(rejected, NOW)[0] == ("apr-00000000000000aa  rejected  web  exec  by uid 0 (root) at "
                                                "11:00:30 UTC")
    assert approval_lines(rejected, NOW)[3] == "  reason: not today"
    remembered = replace(PENDING, state="approved", remembered_by="rem-000000000001",
                         answered_at="2025-03-01T11:00:01Z")
    assert approval_lines(remembered, NOW)[0].endswith("approved  web  exec  by remembered rule rem-000000000001 at "
                                                       "11:00:01 UTC")
    assert answered_line(rejected) == ("rejected apr-00000000000000aa (sudo true in box web) as uid 0 (root): "
                                       "not today")
    expired = replace(PENDING, state="expired")
    assert approval_lines(expired, NOW)[0].endswith("expired   web  exec  at 11:02:00 UTC, nobody answered")


def test_each_event_is_one_line_with_the_time_state_id_box_and_what_is_asked():
    def line(info: ApprovalInfo, kind: str) -> str:
        event = Event(7, "2025-03-01T11:00:30Z", info.box_id, kind, {"approval": info.to_json()})
        parsed = event_approval(event)
        assert parsed == info
        return event_line(event, parsed)

    assert line(PENDING, "approval.pending") == (
        "11:00:30 UTC  pending   apr-00000000000000aa  web  sudo true  — TK-A001 privilege escalation; expires at "
        "11:02:00 UTC; approve with: tkbox approve apr-00000000000000aa")
    approved = replace(PENDING, state="approved", answered_by="uid 0 (root)", answered_at="2025-03-01T11:00:30Z",
                       remember=True)
    assert line(approved, "approval.answered") == (
        "11:00:30 UTC  approved  apr-00000000000000aa  web  sudo true  — by uid 0 (root) at 11:00:30 UTC, and "
        "remembered for the box")
    assert line(replace(PENDING, state="expired"), "approval.expired").endswith("sudo true  — nobody answered in time")
    assert line(replace(PENDING, state="lost"), "approval.answered").endswith("web  sudo true")


def test_an_event_of_another_kind_or_without_an_approval_is_not_shown_as_one():
    assert event_approval(Event(1, "", "b", "exec.started", {"approval": PENDING.to_json()})) is None
    assert event_approval(Event(1, "", "b", "approval.pending", {"approval": {"id": 3}})) is None


def test_times_and_durations():
    assert [duration(s) for s in (-3, 0, 59.9, 60, 119, 3599, 3600, 7380)] == [
        "0s", "0s", "59s", "1m00s", "1m59s", "59m59s", "1h00m", "2h03m"]
    assert clock("2025-03-01T13:00:00+02:00") == "11:00:00 UTC"
    assert clock("") == "?" and clock("soon\x1b[2J") == "soon\\x1b[2J" and clock("2025-03-01T11:00:00") == (
        "2025-03-01T11:00:00")  # no zone: not a time the daemon writes, shown as it came


def test_the_held_exec_lines():
    decision = {"rule_ids": ["TK-A001", "TK-A003"], "reason": "privilege escalation"}
    assert held_line(decision, {"approval_id": "apr-1", "expires_at": "2025-03-01T11:02:00Z"}) == (
        "tkbox: held for a person's approval: TK-A001, TK-A003 privilege escalation — approve with: tkbox approve "
        "apr-1 (expires at 11:02:00 UTC)")
    assert approved_line({"by": "uid 1000 (alice)"}) == "tkbox: approved by uid 1000 (alice); running it"
    assert not_approved_line({"state": "expired", "reason": "nobody answered", "hint": "ask again"}) == (
        "tkbox: not approved (expired): nobody answered\n  hint: ask again")


def _shown(text: str) -> set[str]:
    """The hidden characters in ``text`` (lines are split first: the lines themselves are fine)."""
    return {char for line in text.split("\n") for char in line} & HIDDEN


texts = st.text() | st.sampled_from([HOSTILE, "\x1b", "\r", "\u202e", "\U000e0041"])
json_values = st.recursive(st.none() | st.booleans() | st.integers() | texts,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                           max_leaves=6)
approvals = st.builds(
    ApprovalInfo, id=texts, box_id=texts, box_name=texts, kind=texts, state=st.sampled_from(APPROVAL_STATES),
    asked=st.dictionaries(st.sampled_from(["command", "cwd", "tty", "host", HOSTILE]), json_values, max_size=4),
    program=texts, decision_id=texts, rule_ids=st.lists(texts, max_size=3).map(tuple), reason=texts,
    created_at=texts, expires_at=texts, hint=texts, answered_at=texts, answered_by=texts, answer_reason=texts,
    remember=st.booleans(), remembered_by=texts)


@given(approvals, texts)
def test_no_field_of_an_approval_reaches_the_terminal_raw(info, time):
    lines = [*approval_lines(info, NOW), event_line(Event(1, time, info.box_id, "approval.pending", {}), info),
             answered_line(info)]
    for line in lines:
        assert "\n" not in line and not set(line) & HIDDEN, line


messages = st.dictionaries(st.sampled_from(["approval_id", "expires_at", "by", "state", "reason", "hint",
                                            "rule_ids", HOSTILE]), json_values, max_size=6)


@given(messages, messages)
def test_no_field_of_a_held_exec_message_reaches_the_terminal_raw(decision, message):
    for text in (held_line(decision, message), approved_line(message), not_approved_line(message)):
        assert not _shown(text), text


@given(messages, messages, messages, st.sampled_from(["approved", "denied"]))
def test_what_a_held_exec_writes_on_stderr_is_escaped_whatever_the_daemon_sends(decision, held, answer, ending):
    script = [{**decision, "type": "decision"}, {**held, "type": "held"},
              {**answer, "type": ending, "approval_id": answer.get("approval_id") or "apr-1"},
              {"type": "exit", "exit_code": 0}]
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        drive_exec(ScriptedExec(script), stream=False)
    assert stderr.getvalue() and not _shown(stderr.getvalue())
