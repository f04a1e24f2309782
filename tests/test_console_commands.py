"""``:`` covers every action, from one table (``command_mode.COMMANDS``): each command runs the action its key
would, Tab completes names, and ``?`` and docs/keys.md list the same commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Log

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_exec,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_tui.console import shell
from tkbox_tui.console.app import ConsoleApp, make_app
from tkbox_tui.console.command_mode import (
    COMMANDS,
    CommandError,
    completions,
    help_rows,
    next_completion,
    parse_command,
)
from tkbox_tui.console.screens import BoxScreen, ConfirmModal, HelpScreen, NewBoxScreen
from tkbox_tui.console.widgets import BoxTable, CommandBar, ExecPanel

ROOT = Path(__file__).resolve().parents[1]
NAMES = {"box": ["web-api", "batch-jobs", "web-ui"], "theme": ["tkbox-dark", "tkbox-light", "tkbox-high-contrast"]}


def _app(tmp_path: Path):
    fake = FakeDaemonClient(two_boxes())
    return fake, make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)


async def _started(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.client.stream_opened.is_set())


async def _command(pilot, text: str) -> None:
    await pilot.press("colon", *text, "enter")
    await pilot.pause()


def test_every_command_in_the_table_has_a_handler_and_the_brief_list_is_there():
    for spec in COMMANDS:
        assert callable(getattr(ConsoleApp, f"_command_{spec.name}", None)), spec.name
    usages = {usage for usage, _ in help_rows()}
    for usage in (":new", ":exec CMD", ":shell [NAME]", ":stop [NAME]", ":rm [NAME]", ":theme NAME", ":filter [RE]",
                  ":box NAME", ":quit"):
        assert usage in usages
    assert parse_command(":q") == ("quit", "") and parse_command("remove web") == ("rm", "web")
    with pytest.raises(CommandError, match="needs an argument"):
        parse_command("exec")


@pytest.mark.parametrize(("typed", "expected"), [
    ("", sorted(spec.name + (" " if spec.argument else "") for spec in COMMANDS)),
    ("th", ["theme "]),
    ("s", ["shell ", "stop "]),
    ("qu", ["quit"]),
    (":theme tkbox-l", ["theme tkbox-light"]),
    ("box web", ["box web-api", "box web-ui"]),
    ("stop b", ["stop batch-jobs"]),
    ("exec ls", []),  # a command line is not completed
    ("nope x", []),
])
def test_completions(typed, expected):
    assert completions(typed, NAMES) == expected


def test_one_tab_completes_the_common_prefix_then_cycles():
    candidates = ["box web-api", "box web-ui"]
    assert next_completion("box w", candidates) == "box web-"
    assert next_completion("box web-", candidates) == "box web-api"
    assert next_completion("box web-api", candidates) == "box web-ui"
    assert next_completion("box web-ui", candidates) == "box web-api"
    assert next_completion("th", ["theme "]) == "theme "


async def test_tab_completes_in_the_command_line(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await pilot.press("colon", "t", "h", "tab")
        bar = app.screen.query_one(CommandBar)
        await wait_until(pilot, lambda: bar.value == "theme ")
        assert isinstance(app.focused, CommandBar)  # Tab completed; it did not move the focus
        await pilot.press(*"tkbox-l", "tab")
        await wait_until(pilot, lambda: bar.value == "theme tkbox-light")
        await pilot.press("enter")
        assert app.theme == "tkbox-light"
        await pilot.press("colon", *"box ", "tab")
        await wait_until(pilot, lambda: bar.value == "box batch-jobs")
        await pilot.press("tab")
        await wait_until(pilot, lambda: bar.value == "box web-api")


async def test_exec_stop_rm_new_and_open_run_their_actions(tmp_path):
    fake, app = _app(tmp_path)
    fake.exec_outputs["b2"] = [make_exec(1, "make", stdout=b"built\n")]
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await _command(pilot, "exec echo from the line")
        panel = app.screen.query_one(ExecPanel)
        await wait_until(pilot, lambda: "[exit 0]" in "\n".join(panel.query_one("#exec-output", Log).lines))
        assert ("exec", "b1", ("echo", "from", "the", "line")) in fake.calls
        await pilot.press("escape")
        app.screen.query_one(BoxTable).focus()
        await _command(pilot, "stop")
        assert isinstance(app.screen, ConfirmModal) and "web-api" in app.screen.question
        await pilot.press("n")
        await _command(pilot, "rm batch-jobs")
        assert isinstance(app.screen, ConfirmModal) and "batch-jobs" in app.screen.question
        await pilot.press("n")
        assert app.state.selected_box_id == "b2"
        await _command(pilot, "new")
        assert isinstance(app.screen, NewBoxScreen)
        await pilot.press("escape")
        await _command(pilot, "open")
        await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen) and app.screen.output is not None)
        assert app.screen.box.id == "b2"


async def test_shell_and_a_name_that_is_no_box(tmp_path, monkeypatch):
    opened: list[str] = []
    monkeypatch.setattr(shell, "shell_command", lambda box_name: opened.append(box_name))  # None: no pty
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await _started(app, pilot)
        await _command(pilot, "shell batch-jobs")
        await wait_until(pilot, lambda: opened == ["batch-jobs"])
        await _command(pilot, "stop nosuchbox")
        assert not isinstance(app.screen, ConfirmModal)
        assert any("no box named nosuchbox" in note.message for note in app._notifications)


async def test_help_lists_the_same_commands_as_the_table(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 60)) as pilot:
        await _started(app, pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one("#help-commands").content
        rows = [(str(usage), str(does)) for usage, does in zip(table.columns[0]._cells, table.columns[1]._cells,
                                                                strict=True)]
        assert rows == help_rows()


def test_docs_keys_md_lists_the_commands():
    text = (ROOT / "docs" / "keys.md").read_text(encoding="utf-8")
    for usage, does in help_rows():
        assert f"| `{usage}` | {does} |" in text

