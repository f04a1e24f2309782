"""``s`` under the default pack: ``/bin/sh`` is an ``ask``; when it is not approved, the console says so, with the
rule and its reason from the daemon's ``exec.denied`` event (``test_console_approvals_exec.py``: from the shell's
rejected or expired approval).

The real ``tkbox exec --tty`` is replaced by a script of what it does against the daemon: the daemon emits
``exec.denied`` (received by the console's event stream) and the command exits 126.
"""

from __future__ import annotations

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_event,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.console import shell
from tkbox_tui.console.app import make_app


def _shell_app(tmp_path, monkeypatch, denial_data: dict | None, exit_code: int = 126):
    fake = FakeDaemonClient(two_boxes())
    app = make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)
    ran: list[list[str]] = []
    monkeypatch.setattr(shell, "exec_supports_tty", lambda: True)

    def run_suspended(app_, command):
        ran.append(command)
        if denial_data is not None:  # what the daemon does while tkbox exec waits for its answer
            fake.live.put_nowait(make_event(app_.state.last_seq + 1, "b1", "exec.denied", **denial_data))
        return exit_code

    monkeypatch.setattr(shell, "run_suspended", run_suspended)
    return fake, app, ran


ASK = {"command": "/bin/sh", "rule_ids": ["TK-A005"], "verdict": "ask",
       "reason": "runs code it reads from standard input, which the policy cannot see"}


async def _press_s(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.state.selected_box is not None)
    await pilot.press("s")


async def test_a_shell_the_policy_asks_about_and_nobody_approved_is_refused_saying_so(tmp_path, monkeypatch):
    fake, app, ran = _shell_app(tmp_path, monkeypatch, ASK)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await _press_s(app, pilot)
        await wait_until(pilot, lambda: any(n.title == "shell refused" for n in app._notifications), rounds=2000)
        note = next(n for n in app._notifications if n.title == "shell refused")
        assert ran == [[*shell.tkbox_executable(), "exec", "web-api", "--tty", "--", "/bin/sh"]]
        assert note.message.startswith("The shell was not approved, so it was refused: the policy asks a person")
        assert "TK-A005: runs code it reads from standard input" in note.message
        assert "cannot take approvals" not in note.message
        assert "s asks again" in note.message and note.severity == "warning"


async def test_a_shell_the_policy_denies_is_refused_with_the_rule(tmp_path, monkeypatch):
    denial = {"command": "/bin/sh", "rule_ids": ["TK-D900"], "verdict": "deny", "reason": "no shells \x1b[2J here"}
    fake, app, _ = _shell_app(tmp_path, monkeypatch, denial)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await _press_s(app, pilot)
        await wait_until(pilot, lambda: any(n.title == "shell refused" for n in app._notifications), rounds=2000)
        note = next(n for n in app._notifications if n.title == "shell refused")
        assert note.message == "The shell was denied by TK-D900: no shells \\x1b[2J here."
        assert "approval" not in note.message


async def test_without_the_daemons_event_the_refusal_is_still_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(shell, "REFUSAL_WAIT", 0.2)
    fake, app, _ = _shell_app(tmp_path, monkeypatch, None)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await _press_s(app, pilot)
        await wait_until(pilot, lambda: any(n.title == "shell refused" for n in app._notifications), rounds=5000)
        note = next(n for n in app._notifications if n.title == "shell refused")
        assert "refused (exit 126)" in note.message and "exec.denied" in note.message


async def test_a_shell_that_ran_says_how_it_ended(tmp_path, monkeypatch):
    fake, app, _ = _shell_app(tmp_path, monkeypatch, None, exit_code=0)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await _press_s(app, pilot)
        await wait_until(pilot, lambda: any(n.message == "shell ended (exit 0)" for n in app._notifications))


def test_only_the_shells_denial_in_that_box_after_the_press_counts():
    events = [make_event(5, "b1", "exec.denied", **ASK),  # before the press
              make_event(7, "b2", "exec.denied", **ASK),  # another box
              make_event(8, "b1", "exec.denied", **{**ASK, "command": "curl x"}),  # another command
              make_event(9, "b1", "exec.denied", **ASK)]
    assert shell.find_refusal(events, "b1", 6).seq == 9
    assert shell.find_refusal(events[:3], "b1", 6) is None
