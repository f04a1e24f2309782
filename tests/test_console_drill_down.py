"""Enter drills in, Esc goes back: the box page (its execs, decision, end and whose word, output kept by the daemon)
and the event page (every field), ``y`` copying the escaped form.  Pilot tests against ``FakeDaemonClient``."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Log

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_event,
    make_exec,
    quiet_settings,
    two_boxes,
    wait_until,
)
from tkbox_daemon.wire import OutputTail
from tkbox_tui.console.app import make_app
from tkbox_tui.console.screens import BoxScreen, EventScreen, MainScreen
from tkbox_tui.console.screens import box_screen as box_screen_module
from tkbox_tui.console.widgets import BoxTable, EventLog

ESC_OUTPUT = b"\x1b]52;c;cm0gLXJmIC8K\x07ok\n\x1b[2Jdone\n"
LONG_VALUE = "make test " + "x" * 400 + " END"


def _app(tmp_path: Path, fake: FakeDaemonClient | None = None):
    fake = fake or FakeDaemonClient(two_boxes())
    fake.exec_outputs["b1"] = [
        make_exec(1, "ls /workspace", stdout=b"README.md\nsrc\n"),
        make_exec(2, "curl https://example.net", state="denied", verdict="deny", rule_ids=("net.deny", "TK-D001"),
                  reason="no network door yet", hint="ask for an egress rule", duration_ms=0, exit_code=None),
        make_exec(3, "sh -c 'printf evil'", stdout=ESC_OUTPUT, stderr=b"warning: \xff\n", exit_code=3),
    ]
    fake.history = [make_event(1, "b1", "box.created", name="web-api"), make_event(2, "b1", "box.started"),
                    make_event(3, "b1", "exec.finished", command=LONG_VALUE, exit_code=0, host={"outcome": "ok"},
                               stdin=None, timed_out=False),
                    make_event(4, "b2", "box.stopped")]
    return fake, make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)


async def _started(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.state.last_seq == 4)
    await wait_until(pilot, lambda: len(app.main_screen.query_one(EventLog).lines) == 4)


async def _box_page(app, pilot) -> BoxScreen:
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, BoxScreen) and app.screen.output is not None)
    return app.screen


async def test_enter_on_a_box_opens_its_page_with_every_exec_and_the_newest_selected(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(140, 44)) as pilot:
        await _started(app, pilot)
        assert isinstance(app.focused, BoxTable)
        page = await _box_page(app, pilot)
        assert page.box.id == "b1" and ("execs", "b1") in fake.calls
        table = page.query_one("#exec-table", DataTable)
        assert [str(cell) for cell in table.get_row("2")] == [
            "2", "11:52:00", "curl https://example.net", "deny", "net.deny, TK-D001", "denied", "-", "0ms",
            "0 B", "0 B"]
        assert [str(cell) for cell in table.get_row("1")][5:] == ["exit 0", "guest", "1.2s", "14 B", "0 B"]
        assert page.selected_exec == 3 and table.cursor_row == 2  # the newest, at the bottom
        detail = "\n".join(f"{k}: {v}" for k, v in page.detail)
        assert "exit 3, as the box's guest agent reported it (the box's word)" in detail
        output = "\n".join(page.query_one("#exec-page-output", Log).lines)
        assert "\x1b" not in output and "\\x1b]52;c;cm0gLXJmIC8K\\x07ok" in output and "\\x1b[2Jdone" in output
        assert "warning: \\xff" in output and "── stderr: 11 B ──" in output
        await pilot.press("up")  # the denied exec: its decision, rules, reason and hint
        await wait_until(pilot, lambda: page.output is not None and page.output.exec.id == 2)
        detail = "\n".join(f"{k}: {v}" for k, v in page.detail)
        assert "deny  rules: net.deny, TK-D001" in detail and "no network door yet" in detail
        assert "ask for an egress rule" in detail and "never ran" in detail
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen) and isinstance(app.focused, BoxTable)


async def test_enter_on_an_exec_focuses_its_output_and_esc_goes_back_one_level_at_a_time(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(140, 44)) as pilot:
        await _started(app, pilot)
        page = await _box_page(app, pilot)
        await pilot.press("enter")
        assert isinstance(app.focused, Log) and app.focused.id == "exec-page-output"
        await pilot.press("escape")
        assert isinstance(app.screen, BoxScreen) and app.focused.id == "exec-table"
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        assert page.loads == 1


async def test_y_on_the_box_page_copies_the_exec_escaped_never_the_raw_bytes(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(140, 44), notifications=True) as pilot:
        await _started(app, pilot)
        await _box_page(app, pilot)
        await pilot.press("y")
        copied = app.clipboard
        assert copied.startswith("exec #3\ncommand: sh -c 'printf evil'")
        assert "\x1b" not in copied and "\x07" not in copied and "\\x1b]52;c;cm0gLXJmIC8K\\x07ok" in copied
        assert any("OSC 52" in note.message and "escaped" in note.message for note in app._notifications)


async def test_a_truncated_and_a_dropped_output_say_so(tmp_path):
    fake, app = _app(tmp_path)
    fake.exec_outputs["b1"] = [
        make_exec(1, "yes", output_dropped=True, stdout_tail=OutputTail(0, 5_000_000)),
        make_exec(2, "seq 1 100000", stdout=b"99999\n100000\n", stdout_tail=OutputTail(262_144, 588_895)),
    ]
    async with app.run_test(size=(140, 44)) as pilot:
        await _started(app, pilot)
        page = await _box_page(app, pilot)
        table = page.query_one("#exec-table", DataTable)
        assert str(table.get_row("1")[8]) == "dropped (4.8 MiB)"
        assert str(table.get_row("2")[8]) == "256.0 KiB of 575.1 KiB"
        assert "the last 256.0 KiB of 575.1 KiB" in "\n".join(f"{k}: {v}" for k, v in page.detail)


async def test_the_box_page_reads_again_while_an_exec_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(box_screen_module, "REFRESH_WHILE_RUNNING", 0.01)
    fake, app = _app(tmp_path)
    fake.exec_outputs["b1"] = [make_exec(1, "make test", state="running", stdout=b"compiling\n")]
    async with app.run_test(size=(140, 44)) as pilot:
        await _started(app, pilot)
        page = await _box_page(app, pilot)
        assert str(page.query_one("#exec-table", DataTable).get_row("1")[5]) == "running"
        fake.exec_outputs["b1"] = [make_exec(1, "make test", stdout=b"compiling\nall tests passed\n")]
        # the page's own timer reads again: let the app run until it has (many rounds: a busy machine is slow)
        await wait_until(pilot, lambda: "all tests passed" in "\n".join(page.query_one("#exec-page-output", Log).lines),
                         rounds=20_000)
        await wait_until(pilot, lambda: str(page.query_one("#exec-table", DataTable).get_row("1")[5]) == "exit 0")
        loads = page.loads
        for _ in range(20):
            await pilot.pause()
        assert page.loads == loads  # nothing runs any more: no more reads


async def test_enter_in_the_event_log_opens_the_event_at_the_marker_with_every_field(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(140, 44), notifications=True) as pilot:
        await _started(app, pilot)
        log = app.main_screen.query_one(EventLog)
        log.focus()
        await pilot.press("n", "n", "n")  # the marker: first line, then the next two
        assert log.current_line == 2
        await pilot.press("enter")
        assert isinstance(app.screen, EventScreen) and app.screen.event.seq == 3
        shown = "\n".join(f"{k}: {v}" for k, v in app.screen.fields)
        assert "data.command" in shown and "END" in shown  # the whole value: the log cuts it at 120
        assert "data.stdin" in shown and "null" in shown and "false" in shown  # JSON spellings
        assert '{"outcome": "ok"}' in shown and "web-api (b1)" in shown
        await pilot.press("y")
        assert app.clipboard.startswith("seq: 3\ntime: 2025-03-01T11:00:03Z\nbox: web-api (b1)\nkind: exec.finished\n")
        assert LONG_VALUE in app.clipboard
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen) and isinstance(app.focused, EventLog)


async def test_without_a_marker_enter_opens_the_newest_event_in_view(tmp_path):
    fake, app = _app(tmp_path)
    async with app.run_test(size=(140, 44)) as pilot:
        await _started(app, pilot)
        app.main_screen.query_one(EventLog).focus()
        await pilot.press("enter")
        assert isinstance(app.screen, EventScreen) and app.screen.event.seq == 4
        assert app.screen.box_name == "batch-jobs"


async def test_an_event_page_escapes_box_text_in_keys_and_values(tmp_path):
    fake, app = _app(tmp_path)
    fake.history.append(make_event(5, "b1", "exec.denied", **{"com\x1bmand": "rm -rf /\x1b[8m hidden", "n": 1}))
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_until(pilot, lambda: app.state.last_seq == 5)
        await wait_until(pilot, lambda: len(app.main_screen.query_one(EventLog).lines) == 5)
        app.main_screen.query_one(EventLog).focus()
        await pilot.press("enter")
        shown = "\n".join(f"{k}: {v}" for k, v in app.screen.fields)
        assert "\x1b" not in shown and "data.com\\x1bmand" in shown and "rm -rf /\\x1b[8m hidden" in shown
