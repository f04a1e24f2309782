"""``tkbox approvals | approve | reject | forget`` in process, against a fake of the daemon's API
(``tests/approvals_fake_api.py``): what each prints, the shape of its ``--json``, the daemon's refusals in the
CLI's words, and the client calls underneath (ids as one URL segment, replies that are not what the API promises).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.approvals_fake_api import ME, fake_daemon
from tkbox_tui.cli import main
from tkbox_tui.client import DaemonClient, DaemonError, parsed_reply
from tkbox_tui.client import _approval_list as approval_list


@pytest.fixture
def fake(tmp_path, monkeypatch):
    runtime = Path(f"/tmp/tka-{abs(hash(str(tmp_path))) % 10**8}")  # short: a socket path is at most 108 bytes
    with fake_daemon(runtime) as daemon:
        monkeypatch.setenv("TKBOX_DAEMON_RUNTIME_DIR", str(runtime))
        yield daemon


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_approvals_lists_what_is_pending_with_how_to_answer(fake, capsys):
    first = fake.open("sudo true")
    second = fake.open("sudo apt-get install -y jq")
    status, out, err = run(capsys, "approvals")
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 7
    assert re.fullmatch(rf"{first.id}  pending   web  exec  held \d+s, expires in \d+m\d\ds \(at \d\d:\d\d:\d\d UTC\)",
                        lines[0])
    assert lines[1] == "  asks:   sudo true  (cwd /workspace)"
    assert lines[2] == "  policy: TK-A001 privilege escalation (runs as another user, usually root)"
    assert lines[3].startswith(f"{second.id}  pending") and lines[4] == "  asks:   sudo apt-get install -y jq  (cwd /workspace)"
    assert lines[6] == "approve with: tkbox approve ID [--remember]; reject with: tkbox reject ID [--reason TEXT]"


def test_approvals_says_when_there_is_none(fake, capsys):
    assert run(capsys, "approvals") == (0, "no approvals pending\n", "")
    assert run(capsys, "approvals", "--all") == (0, "no approvals kept\n", "")


def test_approvals_json_is_the_list_the_daemon_gave_and_all_adds_the_answered(fake, capsys):
    pending = fake.open("sudo true")
    answered = fake.open("sudo id")
    fake.call(fake._settle, answered.id, "rejected", ME, "no")
    status, out, _ = run(capsys, "approvals", "--json")
    assert status == 0 and json.loads(out) == [fake.approvals[pending.id].to_json()]
    status, out, _ = run(capsys, "approvals", "--json", "--all")
    assert [item["id"] for item in json.loads(out)] == [pending.id, answered.id]
    status, out, _ = run(capsys, "approvals", "--all")
    assert f"{answered.id}  rejected  web  exec  by {ME} at " in out and "  reason: no\n" in out


def test_approvals_of_one_box_and_of_a_box_that_does_not_exist(fake, capsys):
    fake.open("sudo true")
    status, out, _ = run(capsys, "approvals", "--box", "web", "--json")
    assert status == 0 and len(json.loads(out)) == 1
    assert run(capsys, "approvals", "--box", "nope") == (
        2, "", "tkbox approvals: box 'nope' not found; list the boxes with: tkbox ls\n")


def test_approve_says_what_was_approved_and_as_whom(fake, capsys):
    approval = fake.open("sudo true")
    status, out, err = run(capsys, "approve", approval.id)
    assert (status, err) == (0, "")
    assert out == f"approved {approval.id} (sudo true in box web) as {ME}\n"
    assert fake.answers == [(approval.id, {"answer": "approve"})]


def test_approve_and_remember_names_the_rule_and_how_to_forget_it(fake, capsys):
    approval = fake.open("sudo true")
    status, out, _ = run(capsys, "approve", approval.id, "--remember")
    rule = fake.remembered["b-web"][0]
    assert status == 0 and fake.answers == [(approval.id, {"answer": "approve", "remember": True})]
    assert out.splitlines() == [
        f"approved {approval.id} (sudo true in box web) as {ME}",
        f"remembered as {rule.id}: later asks of TK-A001 for sudo in box web are approved without asking; "
        f"undo with: tkbox forget web {rule.id}"]


def test_reject_sends_the_reason_and_shows_it(fake, capsys):
    approval = fake.open("sudo true")
    status, out, _ = run(capsys, "reject", approval.id, "--reason", "not today")
    assert status == 0 and out == f"rejected {approval.id} (sudo true in box web) as {ME}: not today\n"
    assert fake.answers == [(approval.id, {"answer": "reject", "reason": "not today"})]


def test_an_answer_with_json_prints_the_answered_approval(fake, capsys):
    approval = fake.open("sudo true")
    status, out, err = run(capsys, "reject", "--json", approval.id)
    assert (status, err) == (0, "")
    assert json.loads(out) == fake.approvals[approval.id].to_json() and json.loads(out)["state"] == "rejected"


def _refusals(fake) -> dict[str, tuple[str, str, str]]:
    """An approval id of each kind the daemon refuses to answer: its code, the start of its message, the hint."""
    answered, expired, refused = fake.open(), fake.open(), fake.open()
    fake.call(fake._settle, answered.id, "approved", ME, "")
    fake.expire(expired.id)
    fake.refuse_next_record = True  # the next answer's record is refused (the refused one is asked last)
    return {
        "apr-0000000000000000": ("not_found", "approval 'apr-0000000000000000' not found",
                                 "list them with: tkbox approvals"),
        answered.id: ("approval_answered", f"approval {answered.id} was already approved by {ME} at ",
                      "see how it was answered with: tkbox approvals --all"),
        expired.id: ("approval_expired", f"approval {expired.id} expired at {expired.expires_at}; nothing changed",
                     "the exec it held has ended with 126; run it again to ask again"),
        refused.id: ("record_refused", "the signer refused to record the answer: the action was refused and the "
                                       "box stopped", "the box was stopped; see why with: tkbox events BOX"),
    }


def test_the_daemons_refusals_of_an_answer_keep_its_words_and_say_what_to_do(fake, capsys):
    for approval_id, (_, message, hint) in _refusals(fake).items():
        status, out, err = run(capsys, "approve", approval_id)
        assert status == 2 and out == "" and err.count("\n") == 1
        assert err.startswith(f"tkbox approve: {message}") and err.endswith(f"; {hint}\n")


def test_the_daemons_refusals_of_an_answer_as_json(fake, capsys):
    for approval_id, (code, message, hint) in _refusals(fake).items():
        status, out, err = run(capsys, "reject", approval_id, "--json")
        error = json.loads(out)["error"]
        assert status == 2 and err == "" and (error["code"], error["hint"]) == (code, hint)
        assert error["message"].startswith(message)


def test_forget_removes_a_remembered_rule(fake, capsys):
    approval = fake.open("sudo true")
    run(capsys, "approve", approval.id, "--remember")
    rule = fake.remembered["b-web"][0]
    status, out, _ = run(capsys, "forget", "web", rule.id)
    assert status == 0 and fake.remembered["b-web"] == []
    assert out == f"forgot {rule.id} (TK-A001 for sudo) in box web: later asks go to a person again\n"
    run(capsys, "approve", fake.open("sudo id").id, "--remember")
    again = fake.remembered["b-web"][0]
    status, out, _ = run(capsys, "forget", "--json", "web", again.id)
    assert status == 0 and json.loads(out) == {"removed": again.to_json()}


def test_forget_says_whether_the_box_or_the_rule_is_missing(fake, capsys):
    run(capsys, "approve", fake.open().id, "--remember")
    rule = fake.remembered["b-web"][0]
    assert run(capsys, "forget", "web", "rem-000000000000") == (
        2, "", f"tkbox forget: box 'web' has no remembered rule 'rem-000000000000'; its remembered rules: {rule.id}\n")
    assert run(capsys, "forget", "nope", rule.id) == (
        2, "", "tkbox forget: box 'nope' not found; list the boxes with: tkbox ls\n")


def test_ls_shows_each_boxs_pending_approvals(fake, capsys):
    fake.open()
    fake.open()
    status, out, _ = run(capsys, "ls")
    header, line = out.splitlines()
    assert status == 0 and "APPROVALS" in header
    assert line[header.index("APPROVALS"):header.index("APPROVALS") + 9] == "        2"


@pytest.mark.parametrize("command", [["approvals"], ["approve", "apr-1"], ["reject", "apr-1"],
                                     ["forget", "web", "rem-1"]], ids=lambda argv: argv[0])
def test_no_daemon_reads_as_it_does_for_every_command(tmp_path, monkeypatch, capsys, command):
    monkeypatch.setenv("TKBOX_DAEMON_RUNTIME_DIR", str(tmp_path))
    status, out, err = run(capsys, *command)
    assert status == 2 and out == ""
    assert err == (f"tkbox {command[0]}: no daemon answers at {tmp_path / 'api.sock'} (No such file or directory); "
                   "start it with: tkbox up (or tkbox daemon)\n")


@pytest.mark.parametrize("approval_id", ["a/b", "x?y=1", "p#q", "sp ace", "%2e%2e", "..x"])
async def test_an_approval_id_reaches_the_daemon_as_one_segment(fake, approval_id):
    async with DaemonClient(fake.socket) as client:
        for call in (client.approval(approval_id), client.answer_approval(approval_id, "reject")):
            with pytest.raises(DaemonError) as raised:
                await call
            assert raised.value.code == "not_found" and raised.value.status == 404
    assert fake.answers == [(approval_id, {"answer": "reject"})]


@pytest.mark.parametrize("approval_id", ["", ".", ".."])
async def test_an_id_a_url_would_resolve_away_is_not_found_without_asking(tmp_path, approval_id):
    async with DaemonClient(tmp_path / "api.sock") as client:  # no daemon: nothing was asked
        with pytest.raises(DaemonError) as raised:
            await client.answer_approval(approval_id, "approve")
    assert raised.value.code == "not_found" and raised.value.extra["hint"] == "list them with: tkbox approvals"


async def test_an_answer_is_approve_or_reject_and_only_approve_remembers(tmp_path):
    async with DaemonClient(tmp_path / "api.sock") as client:
        with pytest.raises(ValueError):
            await client.answer_approval("apr-1", "yes")
        with pytest.raises(ValueError):
            await client.answer_approval("apr-1", "reject", remember=True)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=10)


@given(json_values | st.fixed_dictionaries({"approvals": json_values}))
def test_a_reply_that_is_not_a_list_of_approvals_is_a_bad_reply_never_a_crash(reply):
    try:
        parsed = parsed_reply(approval_list, reply, "a list of approvals")
    except DaemonError as error:
        assert error.code == "bad_reply" and error.message.startswith("the daemon's reply is not a list of approvals")
    else:
        assert isinstance(reply, dict) and len(parsed) == len(reply["approvals"])
