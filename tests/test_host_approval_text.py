"""Approvals of kind ``host`` (the network door holds a host off the allowlist for a person) read well everywhere:
the console's inbox row, its details and the prompt, its notification, and ``tkbox approvals`` — the host, the
port, the url and the execs that were running, never raw JSON; box text escaped whatever it holds."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from tests.console_fakes import (
    FIXED_NOW,
    FakeDaemonClient,
    make_approval,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_daemon.wire import ApprovalInfo, Event
from tkbox_tui.cli.approval_text import approval_lines, event_line
from tkbox_tui.console.app import make_app
from tkbox_tui.console.approval_text import asked_text, detail_lines, inbox_cells, summary
from tkbox_tui.console.screens import ApprovalPrompt
from tkbox_tui.terminal_text import HIDDEN_RANGES

HIDDEN = {chr(code) for first, last in HIDDEN_RANGES for code in range(first, last + 1)}
URL = "http://files.example.org:80/simple/requests/?page=2"


def host_approval(**changes) -> ApprovalInfo:
    values = dict(kind="host", asked={"host": "files.example.org", "port": 80, "url": URL, "because": "off_list"},
                  program="files.example.org", rule_ids=("TK-A008",), reason="a host off the allowlist",
                  context={"execs_running": [3, 5]}, hint="")
    values.update(changes)
    return make_approval("apr-00000000000000b1", **values)


def test_the_console_shows_the_url_host_port_why_and_the_execs_running():
    info = host_approval()
    assert asked_text(info) == URL
    assert inbox_cells(info, FIXED_NOW)[2:4] == ("host", "http://files.example.org:80/simple/requ…")
    detail = dict(detail_lines(info, FIXED_NOW))
    assert detail["asks"] == f"host: {URL}"
    assert detail["host"] == "files.example.org:80   (not on the box's allowlist)"
    assert detail["execs"] == "#3, #5 running then (on the box's page)"
    assert summary(info) == f"web-api: host {URL} (TK-A008)"


def test_the_console_says_when_no_exec_was_running_and_names_only_the_first_ten():
    assert dict(detail_lines(host_approval(context={"execs_running": []}), FIXED_NOW))["execs"] == \
        "none was running then"
    many = dict(detail_lines(host_approval(context={"execs_running": list(range(1, 15))}), FIXED_NOW))["execs"]
    assert many.startswith("#1, #2") and "#10 and 4 more running then" in many
    tunnel = host_approval(asked={"host": "[2001:db8::1]", "port": 7007, "because": "policy"})
    assert asked_text(tunnel) == "[2001:db8::1]:7007"
    assert dict(detail_lines(tunnel, FIXED_NOW))["host"] == "[2001:db8::1]:7007   (the policy asks about it)"


def test_tkbox_approvals_prints_a_host_approval_in_words():
    info = host_approval(created_at="2025-03-01T11:59:45Z")
    now = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert approval_lines(info, now)[1] == (f"  asks:   {URL}  (host files.example.org port 80; not on the allowlist; "
                                            "execs running then: #3, #5)")
    assert approval_lines(replace(info, context={}), now)[1].endswith("port 80; not on the allowlist)")
    event = Event(9, "2025-03-01T12:00:00Z", "b1", "approval.pending", {"approval": info.to_json()})
    assert f"apr-00000000000000b1  web-api  {URL}  — TK-A008" in event_line(event, info)


@given(st.text(max_size=40), st.text(max_size=40), st.text(max_size=20))
def test_box_text_in_a_host_approval_is_escaped_everywhere(host, path, because):
    info = host_approval(asked={"host": host, "port": 80, "url": f"http://{host}:80/{path}", "because": because},
                         box_name=host)
    shown = [*inbox_cells(info, FIXED_NOW), *(value for _, value in detail_lines(info, FIXED_NOW)), summary(info),
             *approval_lines(info, FIXED_NOW)]
    assert not any(char in HIDDEN for text in shown for char in text)


async def test_the_prompt_shows_a_held_host_with_its_port_url_and_execs(tmp_path):
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(tmp_path / "config", prompt_arm_delay=0), clock=lambda: FIXED_NOW)
    app.bell = lambda: None  # type: ignore[method-assign]
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_until(pilot, lambda: app.state.connected)
        fake.ask(host_approval())
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalPrompt) and bool(app.screen.body))
        body = dict(app.screen.body)
        assert body["asks"] == f"host: {URL}" and body["host"].startswith("files.example.org:80")
        assert body["execs"] == "#3, #5 running then (on the box's page)"
        await pilot.press("a")
        await wait_until(pilot, lambda: any(call[0] == "answer_approval" for call in fake.calls))
        assert ("answer_approval", "apr-00000000000000b1", "approve", "", False) in fake.calls
