"""Pilot tests of the console against ``FakeDaemonClient``: each flow asserts recorded messages and state."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from textual.widgets import Input, Log

from tests.console_fakes import (
    DROP_STREAM,
    FakeDaemonClient,
    fixed_clock,
    make_event,
    quiet_settings,
    two_boxes,
    until_table_drawn,
    wait_until,
)
from tkbox_tui.client import DaemonError
from tkbox_tui.console.app import make_app
from tkbox_tui.console.messages import BoxActionFinished, ConnectionChanged, ExecEnded
from tkbox_tui.console.screens import ConfirmModal, HelpScreen, NewBoxScreen
from tkbox_tui.console.widgets import BoxTable, EventLog, ExecPanel


def _app(tmp_path: Path, fake: FakeDaemonClient | None = None, **overrides):
    fake = fake or FakeDaemonClient(two_boxes())
    return fake, make_app(fake, settings=quiet_settings(tmp_path / "config", **overrides), clock=fixed_clock)


async def test_boxes_table_is_keyed_by_id_and_updated_in_place(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        table = app.screen.query_one(BoxTable)
        assert table.box_ids == ["b1", "b2"]
        assert table.get_row("b1")[:3] == ["web-api", table.get_row("b1")[1], "host"]
        assert str(table.get_row("b1")[1]) == "running"
        assert table.get_row("b1")[3:5] == ["45m", "1h15m"]  # age and time left from the fixed clock
        added_rows = []
        table.add_row = lambda *a, **k: added_rows.append(a)  # type: ignore[method-assign]
        fake.box_list[0] = replace(fake.box_list[0], state="held", last_event="box.held")  # the daemon's truth
        fake.live.put_nowait(make_event(1, "b1", "box.held"))
        await wait_until(pilot, lambda: str(table.get_row("b1")[1]) == "held")
        assert added_rows == []  # an existing row changes cell by cell
        assert table.get_row("b1")[8] == "box.held"


async def test_a_new_box_event_adds_a_row_and_removed_takes_it_away(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        fake.live.put_nowait(make_event(1, "b9", "box.created", name="fresh", workspace="/w"))
        table = app.screen.query_one(BoxTable)
        await wait_until(pilot, lambda: "b9" in table.box_ids)
        fake.live.put_nowait(make_event(2, "b9", "box.removed"))
        await wait_until(pilot, lambda: "b9" not in table.box_ids)


async def test_create_a_box_from_the_form(tmp_path):
    recorded: list = []
    fake, app = _app(tmp_path)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with app.run_test(size=(120, 40), message_hook=recorded.append) as pilot:
        await until_table_drawn(app, pilot)
        await pilot.press("n")
        assert isinstance(app.screen, NewBoxScreen)
        form = app.screen
        form.query_one("#field-name", Input).value = "Bad Name"
        form.query_one("#field-workspace", Input).value = str(workspace)
        form.query_one("#field-memory", Input).value = "lots"
        await pilot.pause()
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, NewBoxScreen)  # problems keep the form open
        assert "a-z, 0-9" in str(form.query_one("#problem-name").render())
        assert "512M" in str(form.query_one("#problem-memory").render())
        assert not any(call[0] == "create_box" for call in fake.calls)
        form.query_one("#field-name", Input).value = "my-box"
        form.query_one("#field-memory", Input).value = "2G"
        assert not form.query("#field-allow") and not form.query("#field-secrets")  # doors not built: not offered
        await pilot.pause()
        assert str(form.query_one("#problem-name").render()) == ""
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: any(isinstance(m, BoxActionFinished) for m in recorded))
    created = [call[1] for call in fake.calls if call[0] == "create_box"]
    assert created == [{"workspace": str(workspace), "name": "my-box", "limits": {"memory": "2G"}}]
    finished = [m for m in recorded if isinstance(m, BoxActionFinished)]
    assert [(m.action, m.error) for m in finished] == [("create", "")]
    assert "b3" in app.state.boxes


async def test_a_refused_create_is_reported_with_its_field(tmp_path):
    fake, app = _app(tmp_path)
    fake.create_error = DaemonError("invalid_settings", "not a directory", 400, field="workspace")
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await until_table_drawn(app, pilot)
        await pilot.press("n")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: any("field workspace" in n.message for n in app._notifications))


async def test_exec_shows_output_and_its_event(tmp_path):
    recorded: list = []
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40), message_hook=recorded.append) as pilot:
        await until_table_drawn(app, pilot)
        await pilot.press("e")
        panel = app.screen.query_one(ExecPanel)
        assert panel.has_class("-open")
        await pilot.press(*"echo hi", "enter")
        await wait_until(pilot, lambda: any(isinstance(m, ExecEnded) for m in recorded))
        fake.live.put_nowait(make_event(1, "b1", "exec.finished", command="echo hi", exit_code=0))
        await wait_until(pilot, lambda: app.state.last_seq == 1)
        await wait_until(pilot, lambda: "exec.finished" in "\n".join(app.screen.query_one(EventLog).lines))
        output = "\n".join(panel.query_one("#exec-output", Log).lines)
    assert ("exec", "b1", ("echo", "hi")) in fake.calls
    assert "[decision: allow rule dev.read]" in output and "echo hi" in output and "[exit 0]" in output
    assert [m.exit_code for m in recorded if isinstance(m, ExecEnded)] == [0]


async def test_ctrl_c_interrupts_the_running_exec(tmp_path):
    recorded: list = []
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40), message_hook=recorded.append) as pilot:
        await until_table_drawn(app, pilot)
        await pilot.press("e", *"sleep 100", "enter")
        await wait_until(pilot, lambda: app.screen.query_one(ExecPanel).running and fake.exec_calls
                         and fake.exec_calls[0].argv == ["sleep", "100"])
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: any(isinstance(m, ExecEnded) for m in recorded))
    assert fake.exec_calls[0].signals == ["INT"]
    assert [m.exit_code for m in recorded if isinstance(m, ExecEnded)] == [130]


async def test_stop_asks_first_and_no_or_escape_do_not_stop(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        for refuse in ("n", "escape", "enter"):  # enter presses the focused safe button
            await pilot.press("x")
            assert isinstance(app.screen, ConfirmModal)
            assert app.screen.focused is app.screen.query_one("#confirm-no")
            await pilot.press(refuse)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmModal)
        assert not any(call[0] == "stop_box" for call in fake.calls)
        await pilot.press("x", "y")
        await wait_until(pilot, lambda: app.state.boxes["b1"].state == "stopped")
    assert [call for call in fake.calls if call[0] == "stop_box"] == [("stop_box", "b1")]


async def test_remove_asks_first_then_removes_the_row(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        await pilot.press("j")  # second box
        assert app.state.selected_box_id == "b2"
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmModal)
        await pilot.press("y")
        await wait_until(pilot, lambda: "b2" not in app.screen.query_one(BoxTable).box_ids)
    assert [call for call in fake.calls if call[0] == "remove_box"] == [("remove_box", "b2")]


async def test_filter_by_box_kind_and_text(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        fake.live.put_nowait(make_event(1, "b1", "exec.started", command="make test"))
        fake.live.put_nowait(make_event(2, "b2", "box.stopped"))
        fake.live.put_nowait(make_event(3, "b1", "exec.denied", command="curl evil"))
        await wait_until(pilot, lambda: app.state.last_seq == 3)
        log = app.screen.query_one(EventLog)
        await pilot.press("slash", *"kind:exec evil", "enter")
        await wait_until(pilot, lambda: len(log.lines) == 1)
        assert "#3" in log.lines[0]
        await pilot.press("slash")
        app.screen.query_one("#command-bar", Input).value = "box:batch-jobs"
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(log.lines) == 1 and "#2" in log.lines[0])
        await pilot.press("slash")
        app.screen.query_one("#command-bar", Input).value = ""
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(log.lines) == 3)


async def test_scrolling_up_pauses_counts_new_and_f_resumes(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        for seq in range(1, 61):
            fake.live.put_nowait(make_event(seq))
        await wait_until(pilot, lambda: app.state.last_seq == 60)
        log = app.screen.query_one(EventLog)
        log.focus()
        await pilot.press("k")  # scrolling up pauses following
        assert not app.state.following
        for seq in range(61, 66):
            fake.live.put_nowait(make_event(seq))
        await wait_until(pilot, lambda: app.state.new_while_paused == 5)
        await wait_until(pilot, lambda: "+5 new" in str(app.screen.query_one("#follow-status").render()))
        await pilot.press("f")
        assert app.state.following and app.state.new_while_paused == 0
        await pilot.pause()
        assert log.auto_scroll and log.scroll_y == log.max_scroll_y
        await pilot.press("k")
        await pilot.press("G")
        assert app.state.following


async def test_command_mode_aliases(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await until_table_drawn(app, pilot)
        await pilot.press("colon", *"box batch-jobs", "enter")
        assert app.state.selected_box_id == "b2"
        await pilot.press("colon", *"events", "enter")
        assert isinstance(app.focused, EventLog)
        await pilot.press("colon", *"boxes", "enter")
        assert isinstance(app.focused, BoxTable)
        await pilot.press("colon", *"theme tkbox-light", "enter")
        assert app.theme == "tkbox-light"
        await pilot.press("colon", *"frobnicate", "enter")
        assert any("unknown command" in n.message for n in app._notifications)
        await pilot.press("colon", "q", "enter")
        await pilot.pause()
    assert app.return_code == 0


async def test_help_lists_every_binding_of_the_current_screen(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_table_drawn(app, pilot)
        main_ids = {active.binding.id for active in app.screen.active_bindings.values() if active.binding.id}
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        listed = {binding_id for _, ids, _ in app.screen.rows() for binding_id in ids.split(", ")}
        assert main_ids <= listed
        assert {"box.stop", "box.remove", "log.filter", "app.help", "app.command"} <= listed
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_palette_offers_box_commands_only_with_a_selection_and_every_theme(tmp_path):
    fake, app = _app(tmp_path, FakeDaemonClient([]))
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "box: Stop" not in titles and "box: New" in titles
        assert {"theme: tkbox-dark", "theme: tkbox-light", "theme: tkbox-high-contrast"} <= set(titles)
        fake.box_list.extend(two_boxes())
        fake.live.put_nowait(DROP_STREAM)  # the resync after reconnect brings the boxes
        await wait_until(pilot, lambda: app.state.selected_box is not None)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "box: Stop" in titles and "box: Remove" in titles


async def test_reconnect_resumes_from_the_last_seq_without_gap_or_duplicate(tmp_path):
    recorded: list = []
    fake, app = _app(tmp_path)
    fake.unreachable_times = 1  # the daemon is not there at first
    async with app.run_test(size=(120, 36), message_hook=recorded.append) as pilot:
        await until_table_drawn(app, pilot)
        for seq in range(1, 6):
            fake.live.put_nowait(make_event(seq))
        fake.live.put_nowait(DROP_STREAM)  # daemon restart mid-way
        fake.unreachable_times = 2
        for seq in range(6, 11):
            fake.live.put_nowait(make_event(seq))
        await wait_until(pilot, lambda: app.state.last_seq == 10)
    seqs = [event.seq for event in app.state.events]
    assert seqs == list(range(1, 11))
    assert fake.events_after == [0, 5]
    changes = [m.connected for m in recorded if isinstance(m, ConnectionChanged)]
    assert changes[:2] == [False, True] and changes[2:5] == [False, False, False] and changes[-1] is True


async def test_while_disconnected_the_console_says_so_and_stays_usable(tmp_path):
    fake, app = _app(tmp_path, reconnect_initial=60.0, reconnect_maximum=60.0)
    fake.unreachable_times = 1
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_until(pilot, lambda: app.state.disconnect_reason != "")
        await wait_until(pilot, lambda: "DISCONNECTED" in str(app.screen.query_one("#connection-banner").render()))
        assert app.has_class("-disconnected")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)


async def test_shell_without_pty_support_says_so(tmp_path, monkeypatch):
    from tkbox_tui.console import shell

    monkeypatch.setattr(shell, "exec_supports_tty", lambda: False)
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        await until_table_drawn(app, pilot)
        await pilot.press("s")
        await wait_until(pilot, lambda: any(shell.NO_PTY_MESSAGE in n.message for n in app._notifications))


async def test_keys_typed_ahead_of_the_confirm_never_land_on_yes(tmp_path):
    from textual import events

    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await until_table_drawn(app, pilot)
        for key, character in (("d", "d"), ("space", " "), ("enter", "\r")):  # all queued before any is handled
            app.post_message(events.Key(key, character))
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmModal))
        await pilot.pause()
    assert not any(call[0] == "remove_box" for call in fake.calls)


def test_a_refused_shell_is_reported_with_its_reason():
    from tkbox_tui.console.shell import describe_exit

    assert "refused" in describe_exit(126) and "rule" in describe_exit(126)
    assert describe_exit(0) == "shell ended (exit 0)"
    assert "cannot suspend" in describe_exit(None)


async def test_a_render_tick_while_the_widgets_are_gone_draws_nothing_and_keeps_the_work(tmp_path):
    # On exit Textual removes the screen's widgets while the app's render timer can still tick.
    fake, app = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        await until_table_drawn(app, pilot)
        await app.main_screen.query_one(BoxTable).remove()
        app._render_dirty = True
        await app._render_if_dirty()  # no crash: there is nothing to draw into
        assert app._render_dirty  # kept for a later tick
