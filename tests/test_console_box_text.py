"""The console shows box text literally: escape sequences escaped (``terminal_text``) and Rich or Textual markup
shown as the characters it is made of, in the event log, the exec panel, the box table and detail, the confirm
dialog, notifications, the banner and the command palette.  Pilot tests against ``FakeDaemonClient``.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from rich.text import Text
from textual.content import Content
from textual.geometry import Region
from textual.widgets import Label, Log, Static

from tests.console_fakes import (
    FakeDaemonClient,
    fixed_clock,
    make_box,
    make_event,
    quiet_settings,
    wait_until,
)
from tkbox_daemon.wire import Event
from tkbox_tui.client import DaemonError
from tkbox_tui.console.app import make_app
from tkbox_tui.console.messages import ConnectionChanged
from tkbox_tui.console.present import describe_data, event_line, rich_markup_literal, textual_markup_literal
from tkbox_tui.console.screens import ConfirmModal
from tkbox_tui.console.state import EventFilter
from tkbox_tui.console.widgets import BoxDetail, BoxTable, EventLog, ExecPanel
from tkbox_tui.terminal_text import ELLIPSIS, HIDDEN_RANGES, safe_text, unescape

MARKUP = "[bold red]x[/]"
CLICK = "[@click=app.quit]q[/]"
HOSTILE_NAME = f"{MARKUP}\x1b[2J\u202eevil"
SHOWN_NAME = f"{MARKUP}\\x1b[2J\\u202eevil"
HIDDEN = {chr(code) for first, last in HIDDEN_RANGES for code in range(first, last + 1)}


def _app(tmp_path: Path, fake: FakeDaemonClient):
    return make_app(fake, settings=quiet_settings(tmp_path / "config"), clock=fixed_clock)


def _hostile_boxes():
    return [make_box("b1", HOSTILE_NAME, reason=f"failed: {CLICK}\x1b]52;c;QQ==\x07",
                     workspace=f"/w/{MARKUP}\r", allow=[f"{MARKUP}.example"])]


async def _started(app, pilot) -> None:
    await wait_until(pilot, lambda: app.state.connected and app.client.stream_opened.is_set())


def rendered(widget) -> str:
    """What ``widget`` draws, line by line, as text (its styles dropped)."""
    strips = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


def _assert_nothing_hidden(text: str) -> None:
    assert not set(text) & (HIDDEN - {"\n"}), [hex(ord(c)) for c in set(text) & HIDDEN]


async def test_event_data_with_escape_sequences_and_markup_shows_literally_in_the_log(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "web")])
    app = _app(tmp_path, fake)
    async with app.run_test(size=(200, 36)) as pilot:
        await _started(app, pilot)
        fake.live.put_nowait(make_event(1, "b1", "exec.started", command=f"echo {MARKUP}\x1b[2K\rgone"))
        fake.live.put_nowait(make_event(2, "b1", "guest.protocol_error",
                                        reason=f"{CLICK} \x1b]8;;https://evil.example/\x1b\\link\x9b1A\u2066"))
        log = app.screen.query_one(EventLog)
        await wait_until(pilot, lambda: len(log.lines) == 2)
        await pilot.pause()
        lines = list(log.lines)
        drawn = rendered(log)
    assert f"command=echo {MARKUP}\\x1b[2K\\rgone" in lines[0]
    assert f"reason={CLICK} \\x1b]8;;https://evil.example/\\x1b\\\\link\\u009b1A\\u2066" in lines[1]
    assert MARKUP in drawn and CLICK in drawn  # shown as written, not applied
    _assert_nothing_hidden(drawn)


async def test_exec_output_with_escape_sequences_and_markup_shows_literally_in_the_exec_panel(tmp_path):
    fake = FakeDaemonClient([make_box("b1", "web")])
    chunks = [b"red \x1b[31m" + MARKUP.encode() + b"\x1b[0m\n", b"over\rwrite \xe2\x80", b"\xae rlo\n",
              b"bad \xff byte\tand tab\n"]

    def script(argv):
        return [{"type": "decision", "verdict": "allow", "reason": f"rule {MARKUP}\x1b[2J"},
                {"type": "started", "stdin_window": 0}, *[(1, chunk) for chunk in chunks[:3]], (2, chunks[3]),
                {"type": "exit", "exit_code": 0, "signal": None, "timed_out": False}, None]

    fake.exec_script = script
    app = _app(tmp_path, fake)
    async with app.run_test(size=(120, 40)) as pilot:
        await _started(app, pilot)
        await pilot.press("e", *"make", "enter")
        panel = app.screen.query_one(ExecPanel)
        output = panel.query_one("#exec-output", Log)
        await wait_until(pilot, lambda: not panel.running and any("[exit 0]" in line for line in output.lines))
        await pilot.pause()
        lines = list(output.lines)
        drawn = rendered(output)
    assert f"[decision: allow rule {MARKUP}\\x1b[2J]" in lines
    assert f"red \\x1b[31m{MARKUP}\\x1b[0m" in lines
    assert "over\\rwrite \\u202e rlo" in lines  # a character split between two chunks stays whole
    assert "bad \\xff byte\tand tab" in lines  # not UTF-8: the byte; a tab stays a tab
    assert MARKUP in drawn
    _assert_nothing_hidden(drawn)


async def test_box_table_detail_and_exec_title_show_a_hostile_box_literally(tmp_path):
    fake = FakeDaemonClient(_hostile_boxes())
    app = _app(tmp_path, fake)
    async with app.run_test(size=(200, 40)) as pilot:
        await _started(app, pilot)
        table, detail = app.screen.query_one(BoxTable), app.screen.query_one(BoxDetail)
        await wait_until(pilot, lambda: table.box_ids == ["b1"])
        await pilot.press("e")
        await pilot.pause()
        title = app.screen.query_one(ExecPanel).query_one("#exec-title", Label)
        drawn = {"table": rendered(table), "detail": rendered(detail), "title": rendered(title)}
    assert SHOWN_NAME in drawn["table"]
    assert SHOWN_NAME in drawn["detail"]
    assert f"running (failed: {CLICK}\\x1b]52;c;QQ==\\x07)" in " ".join(drawn["detail"].split())  # wrapped
    assert f"/w/{MARKUP}\\r" in drawn["detail"] and f"{MARKUP}.example" in drawn["detail"]
    assert f"exec in {MARKUP}\\x1b[2J\\u202e" in drawn["title"]  # the label is cut at the pane's width
    for text in drawn.values():
        _assert_nothing_hidden(text)


async def test_the_confirm_dialog_names_a_hostile_box_literally(tmp_path):
    fake = FakeDaemonClient(_hostile_boxes())
    app = _app(tmp_path, fake)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.pause()
        question = rendered(app.screen.query_one("#confirm-question", Label))
    assert f"Stop box {SHOWN_NAME}?" in " ".join(question.split())


async def test_notifications_and_the_banner_show_box_text_literally(tmp_path):
    fake = FakeDaemonClient(_hostile_boxes())

    async def refuse(ref):
        raise DaemonError("stop_failed", f"guest said {MARKUP}\x1b[2J", field=f"{CLICK}\x07")

    fake.stop_box = refuse  # type: ignore[method-assign]
    app = _app(tmp_path, fake)
    async with app.run_test(size=(160, 36)) as pilot:
        await _started(app, pilot)
        app._call_box_action("stop", "b1")
        await wait_until(pilot, lambda: any("stop failed" in n.message for n in app._notifications))
        app.post_message(ConnectionChanged(False, f"lost: {MARKUP}\x1b]0;title\x07", f"hint {MARKUP}\x07"))
        banner = app.screen.query_one("#connection-banner", Static)
        await wait_until(pilot, lambda: "DISCONNECTED" in rendered(banner))
        banner_text = rendered(banner)
        status_text = rendered(app.screen.query_one("#follow-status", Static))
    failure = next(n for n in app._notifications if "stop failed" in n.message)
    assert failure.markup is False
    assert failure.message == f"stop failed: guest said {MARKUP}\\x1b[2J (field {CLICK}\\x07)"
    assert f"lost: {MARKUP}\\x1b]0;title\\x07" in banner_text
    assert f"hint {MARKUP}\\x07" in banner_text and "lost:" not in status_text  # said once, in the banner
    _assert_nothing_hidden(banner_text + status_text)


async def test_the_command_palette_help_names_a_hostile_box_literally(tmp_path):
    fake = FakeDaemonClient(_hostile_boxes())
    app = _app(tmp_path, fake)
    async with app.run_test(size=(120, 36)) as pilot:
        await _started(app, pilot)
        helps = [command.help for command in app.get_system_commands(app.screen) if command.title.startswith("box:")]
    shown = [Content.from_markup(help_text).plain for help_text in helps]  # as the palette reads them
    assert f"Run a command in {SHOWN_NAME}" in shown and f"Stop {SHOWN_NAME} (asks first)" in shown


# -- the markup rules the widgets rely on ----------------------------------------------------------------------

markup_like = st.lists(st.sampled_from(["[", "]", "\\", "/", "$", "@", "bold", "red", "click=app.quit", "accent",
                                        " ", "x", "link=https://e.vil"])).map("".join)
# What the widgets are given: escaped box text (no control left), or markup-like text with bare backslashes.
shown_text = st.one_of(st.text().map(safe_text), markup_like)


@given(shown_text)
def test_textual_markup_literal_reads_back_as_the_text_it_was_given(text):
    assert Content.from_markup(textual_markup_literal(text)).plain == text


@given(st.one_of(st.text(st.characters(blacklist_characters=":")).map(safe_text), markup_like))
def test_rich_markup_literal_reads_back_as_the_text_it_was_given(text):
    assert Text.from_markup(rich_markup_literal(text), end="").plain == text  # as DataTable reads a str cell


def test_the_filter_searches_the_line_as_shown_so_an_escape_is_found_by_its_notation():
    rule = EventFilter.parse(r"\\x1b\[2J")  # the regex for the shown text \x1b[2J
    assert rule.matches(make_event(1, "b1", "exec.started", command="echo \x1b[2J"), "web")
    assert not rule.matches(make_event(2, "b1", "exec.started", command="echo [2J"), "web")


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)


@given(st.dictionaries(st.text(), json_values, max_size=4), st.text(), st.text(), st.text())
def test_an_event_line_holds_no_hidden_character_whatever_the_event_carries(data, kind, box_id, name):
    line = event_line(Event(1, "2025-03-01T11:00:00Z", box_id, kind, data), name or None)
    assert not set(line) & HIDDEN  # newlines too: one event is one line
    assert len(describe_data(data)) <= 120
    unescape(describe_data(data).removesuffix(ELLIPSIS))  # never cut inside an escape
