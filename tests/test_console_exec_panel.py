"""The exec panel says what it runs: argv without a shell (its hint says so), ``!`` through ``sh -c`` as one
decided command, ↑/↓ through the box's own history, output that scrolls past ten lines, and never another box's
output under a box's title.  Pilot tests against ``FakeDaemonClient``."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, Label, Log

from tests.console_fakes import FakeDaemonClient, fixed_clock, make_box, quiet_settings, two_boxes, wait_until
from tkbox_tui.console.app import make_app
from tkbox_tui.console.messages import ExecEnded, ExecOutputReceived
from tkbox_tui.console.widgets import BoxTable, CommandBar, ExecPanel
from tkbox_tui.console.widgets.exec_panel import argv_of


def _app(tmp_path: Path, fake: FakeDaemonClient | None = None):
    fake = fake or FakeDaemonClient([*two_boxes(), make_box("b3", "third")])
    return fake, make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)


async def _started(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.client.stream_opened.is_set())


def _output(panel: ExecPanel) -> str:
    return "\n".join(panel.query_one("#exec-output", Log).lines)


async def _run(pilot, panel: ExecPanel, line: str) -> None:
    panel.query_one("#exec-argv", Input).value = line
    await pilot.press("enter")
    await wait_until(pilot, lambda: not panel.running and _output(panel).rstrip().endswith("]"))


@pytest.mark.parametrize(("line", "argv"), [
    ("ls -la", ["ls", "-la"]),
    ("grep 'a b' *.py", ["grep", "a b", "*.py"]),  # no shell: the * reaches grep as it is
    ("!ls *.py | wc -l", ["sh", "-c", "ls *.py | wc -l"]),
    ("  ! echo $HOME  ", ["sh", "-c", "echo $HOME"]),
    ("!", []),
])
def test_a_line_is_argv_and_a_bang_runs_the_rest_through_sh(line, argv):
    assert argv_of(line) == argv


async def test_the_hint_says_argv_without_a_shell_and_a_bang_line_is_one_sh_c_command(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await pilot.press("e")
        panel = app.screen.query_one(ExecPanel)
        assert "no shell" in panel.query_one("#exec-argv", Input).placeholder
        assert "!CMD runs CMD through sh -c" in panel.query_one("#exec-argv", Input).placeholder
        assert "runs argv, no shell" in str(panel.query_one("#exec-title", Label).render())
        await _run(pilot, panel, "!ls *.py | wc -l")
        assert ("exec", "b1", ("sh", "-c", "ls *.py | wc -l")) in fake.calls
        assert "$ sh -c 'ls *.py | wc -l'" in _output(panel)
        await _run(pilot, panel, "echo *")
        assert ("exec", "b1", ("echo", "*")) in fake.calls


async def test_up_and_down_walk_this_boxs_history_and_come_back_to_the_draft(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await pilot.press("e")
        panel = app.screen.query_one(ExecPanel)
        argv_input = panel.query_one("#exec-argv", Input)
        for line in ("echo one", "echo two", "echo two", "!echo three"):
            await _run(pilot, panel, line)
        await pilot.press(*"draft")
        await pilot.press("up")
        assert argv_input.value == "!echo three"
        await pilot.press("up", "up")
        assert argv_input.value == "echo one"  # a repeated line is remembered once
        await pilot.press("up")
        assert argv_input.value == "echo one"  # the oldest stays
        await pilot.press("down", "down")
        assert argv_input.value == "!echo three"
        await pilot.press("down")
        assert argv_input.value == "draft"
        await pilot.press("escape")
        app.screen.query_one(BoxTable).focus()
        await pilot.press("j", "e")  # another box: its own (empty) history
        assert panel.box_id == "b2"
        await pilot.press("up")
        assert argv_input.value == ""
        assert panel.histories == {"b1": ["echo one", "echo two", "!echo three"]}


async def test_output_scrolls_well_past_ten_lines(tmp_path):
    fake, app = _app(tmp_path)
    fake.exec_script = lambda argv: [{"type": "decision", "verdict": "allow", "reason": "ok"},
                                     {"type": "started", "stdin_window": 1},
                                     (1, "".join(f"line {n}\n" for n in range(1, 201)).encode()),
                                     {"type": "exit", "exit_code": 0, "signal": None, "timed_out": False}, None]
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await pilot.press("e")
        panel = app.screen.query_one(ExecPanel)
        await _run(pilot, panel, "seq 200")
        log = panel.query_one("#exec-output", Log)
        assert "line 1" in log.lines and "line 200" in log.lines
        assert log.scrollable_content_region.height > 10  # more than ten lines on screen
        assert log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y  # it scrolls, and follows the end


async def test_the_panel_never_shows_another_boxs_output_under_its_title(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await pilot.press("e")
        panel = app.screen.query_one(ExecPanel)
        await _run(pilot, panel, "echo from-web-api")
        assert "from-web-api" in _output(panel)
        await pilot.press("escape")
        app.screen.query_one(BoxTable).focus()
        await pilot.press("j", "e")
        assert "batch-jobs" in str(panel.query_one("#exec-title", Label).render())
        assert "from-web-api" not in _output(panel)
        # output of the first box arriving late is not shown under the second box's title
        app.post_message(ExecOutputReceived("late from web-api\n", "stdout", "b1"))
        app.post_message(ExecEnded("exit 0", 0, box_id="b1"))
        await pilot.pause()
        assert "late from web-api" not in _output(panel) and "[exit 0]" not in _output(panel)


async def test_the_panel_keeps_its_box_while_a_command_runs_there(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await _started(app, pilot)
        await pilot.press("e")
        panel = app.screen.query_one(ExecPanel)
        panel.query_one("#exec-argv", Input).value = "sleep 100"
        await pilot.press("enter")
        await wait_until(pilot, lambda: panel.running and fake.exec_calls and fake.exec_calls[0].argv)
        app.state.selected_box_id = "b2"
        app.action_exec_box()
        await pilot.pause()
        assert panel.box_id == "b1" and "sleep 100" in _output(panel)
        assert any("still running in web-api" in note.message for note in app._notifications)
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: not panel.running)


async def test_a_command_that_ends_after_the_panel_closed_leaves_the_focus_where_it_is(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await pilot.press("e")
        panel = app.screen.query_one(ExecPanel)
        panel.query_one("#exec-argv", Input).value = "sleep 100"
        await pilot.press("enter")
        await wait_until(pilot, lambda: panel.running and fake.exec_calls and fake.exec_calls[0].argv)
        await pilot.press("escape")  # the panel closes; the command runs on
        assert isinstance(app.focused, BoxTable)
        await fake.exec_calls[0].signal("INT")  # it ends while the panel is closed
        await wait_until(pilot, lambda: not panel.running)
        assert isinstance(app.focused, BoxTable)  # not the closed panel's hidden input
        await pilot.press("colon")
        assert isinstance(app.focused, CommandBar)

