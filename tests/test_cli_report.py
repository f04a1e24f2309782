"""How the CLI reports, in process: the guard around every command (Ctrl+C, a bug), the help of every command, the
parts of the command line that ask for JSON, the refusals of the commands whose code is in the daemon package, the
client's words for a daemon that is missing or hangs up, and the settings the daemon refuses for doors not built.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.boxes.settings import SettingsError, parse_settings
from tkbox_daemon.tasks import spawn
from tkbox_tui.cli import daemon_side, main
from tkbox_tui.cli.report import EXIT_INTERRUPTED, CliError, wants_json
from tkbox_tui.client import NO_DAEMON_HINT, DaemonClient, DaemonError, DaemonUnreachable

words = st.lists(st.sampled_from(["--json", "--", "ls", "-e", "x", "--help"]), max_size=8)


def _raising(exc: BaseException):
    def run(argv: list[str]) -> int:
        raise exc

    return run


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_ctrl_c_in_any_command_is_one_line_and_130(monkeypatch, capsys, as_json):
    monkeypatch.setitem(main.COMMANDS, "ls", _raising(KeyboardInterrupt()))
    assert main.main(["ls", *(["--json"] if as_json else [])]) == EXIT_INTERRUPTED
    out, err = capsys.readouterr()
    if as_json:
        assert err == "" and json.loads(out) == {"error": {"code": "interrupted", "message": "stopped by Ctrl+C",
                                                           "hint": None}}
    else:
        assert out == "" and err == "tkbox ls: stopped by Ctrl+C\n"


def test_a_bug_is_one_line_not_a_traceback_unless_asked(monkeypatch, capsys):
    monkeypatch.setitem(main.COMMANDS, "ls", _raising(KeyError("boxes")))
    monkeypatch.delenv("TKBOX_TRACEBACK", raising=False)
    assert main.main(["ls"]) == main.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tkbox ls: KeyError: 'boxes'; a bug in tkbox")
    monkeypatch.setenv("TKBOX_TRACEBACK", "1")
    with pytest.raises(KeyError):
        main.main(["ls"])


@pytest.mark.parametrize("words", main.command_lines(), ids=" ".join)
def test_every_help_says_what_the_command_does_in_plain_text(words, capsys):
    assert main.main([*words, "--help"]) == 0
    text = capsys.readouterr().out
    assert "``" not in text  # no reST markup
    paragraphs = text.split("\n\n")
    assert paragraphs[0].startswith("usage:")
    description = paragraphs[1].strip()
    assert description and not description.endswith(":"), f"tkbox {' '.join(words)} --help has no description"
    assert description.endswith((".", ")")), f"cut mid-sentence: {description!r}"


@pytest.mark.parametrize("words", main.command_lines(), ids=" ".join)
def test_every_command_gives_a_wrong_command_line_as_one_line(words, capsys):
    assert main.main([*words, "--no-such-option"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"tkbox {words[0]}: ") and "--help" in err and "Traceback" not in err


def test_the_top_level_help_and_an_unknown_command(capsys):
    assert main.main(["--help"]) == 0
    assert "``" not in capsys.readouterr().out
    assert main.main(["frobnicate", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "usage"


@given(words, words)
def test_only_the_words_before_a_double_dash_can_ask_for_json(before, after):
    """After ``--`` the words belong to the command ``tkbox exec`` runs: its ``--json`` is not the CLI's."""
    before = [word for word in before if word != "--"]
    assert wants_json([*before, "--", *after]) == ("--json" in before)


def test_a_refusal_printed_by_a_daemon_side_command_becomes_one_error(capsys):
    def refuses(argv: list[str]) -> int:
        print("a warning before it", file=__import__("sys").stderr)
        print("tkbox signer export: no such run\nask: tkbox signer status", file=__import__("sys").stderr)
        return 2

    with pytest.raises(CliError) as raised:
        daemon_side.run_captured("signer", refuses, ["export", "--json"])
    assert (raised.value.code, raised.value.message, raised.value.hint) == (
        "failed", "no such run", "ask: tkbox signer status")
    assert capsys.readouterr().err == "a warning before it\n"  # what came before the refusal is passed on


def test_a_usage_error_of_a_daemon_side_parser_drops_the_usage_block():
    def argparse_error(argv: list[str]) -> int:
        import sys

        sys.stderr.write("usage: tkbox verify [-h] --trust TRUST\n"
                         "                    bundle\ntkbox verify: error: the following arguments are required\n")
        raise SystemExit(2)

    with pytest.raises(CliError) as raised:
        daemon_side.run_captured("verify", argparse_error, [])
    assert (raised.value.code, raised.value.hint) == ("usage", "see: tkbox verify --help")
    assert raised.value.message == "the following arguments are required"


async def test_no_daemon_reads_the_same_from_every_call(tmp_path):
    client = DaemonClient(tmp_path / "api.sock")
    async with client:
        failures = []
        for call in (client.boxes(), client.stored_events(), client.diff_patch("x")):
            with pytest.raises(DaemonUnreachable) as raised:
                await call
            failures.append(raised.value)
        with pytest.raises(DaemonUnreachable) as raised:
            async for _ in client.events():
                pass
        failures.append(raised.value)
        with pytest.raises(DaemonUnreachable) as raised:
            await client.exec("x").start(["true"])
        failures.append(raised.value)
    expected = f"no daemon answers at {tmp_path / 'api.sock'} (No such file or directory)"
    assert {(error.code, error.message, error.extra["hint"]) for error in failures} == {
        ("no_daemon", expected, NO_DAEMON_HINT)}


async def test_a_daemon_that_hangs_up_is_a_daemon_error_not_aiohttps(tmp_path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "api.sock"))
    listener.listen()
    listener.setblocking(False)

    async def hang_up() -> None:  # accept, read the request, close without a word; again (aiohttp may retry once)
        loop = asyncio.get_running_loop()
        while True:
            connection, _ = await loop.sock_accept(listener)
            await loop.sock_recv(connection, 65536)
            connection.close()

    server = spawn(hang_up(), name="hang-up")
    try:
        async with DaemonClient(tmp_path / "api.sock") as client:
            with pytest.raises(DaemonError) as raised:
                await asyncio.wait_for(client.boxes(), 60)
    finally:
        server.cancel()
        listener.close()
    assert raised.value.code == "daemon_lost" and raised.value.extra["hint"]


async def test_a_reply_that_is_not_the_error_shape_is_quoted_as_json_text(tmp_path):
    from aiohttp import web

    app = web.Application()
    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=500, body=b"oops \xff\x1b[2J")

    app.router.add_get("/v1/boxes", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(tmp_path / "api.sock")).start()
    try:
        async with DaemonClient(tmp_path / "api.sock") as client:
            with pytest.raises(DaemonError) as raised:
                await client.boxes()
    finally:
        await runner.cleanup()
    assert raised.value.code == "http_error"
    assert raised.value.message == 'the daemon answered 500: "oops \\ufffd\\u001b[2J"'  # never b'...'


# Values no message could contain by chance, so "not echoed" is a real check.
door_values = st.lists(st.text(alphabet="QXZJ0123456789=@.:", min_size=6, max_size=40), min_size=1, max_size=3)


@given(st.sampled_from(["secrets"]), door_values)
def test_a_door_not_built_yet_is_refused_whatever_it_is_given(key, values):
    with pytest.raises(SettingsError) as raised:
        parse_settings({"workspace": str(Path.cwd()), key: values}, default_name="b", environ={})
    assert raised.value.field == key and "not built yet" in str(raised.value)
    assert not any(value in str(raised.value) for value in values)  # a pasted secret value is never echoed


def test_an_empty_door_setting_is_no_door(tmp_path):
    settings = parse_settings({"workspace": str(tmp_path), "allow": [], "secrets": []}, default_name="b", environ={})
    assert settings.allow == () and settings.secrets == ()


@pytest.mark.parametrize(("raw", "shown"), [({"name": False}, "false"), ({"image": None}, "null"),
                                            ({"limits": {"memory": True}}, "true"), ({"name": "Big"}, '"Big"')])
def test_a_wrong_setting_is_quoted_in_json_spelling(tmp_path, raw, shown):
    with pytest.raises(SettingsError) as raised:
        parse_settings({"workspace": str(tmp_path), **raw}, default_name="b", environ={})
    message = str(raised.value)
    assert f"{shown} " in message and "None" not in message and "False" not in message and "True" not in message


def test_up_without_a_terminal_is_refused_before_anything_starts(monkeypatch, capsys):
    started = []
    monkeypatch.setattr("tkbox_tui.cli.up.signer_up", lambda *args, **kwargs: started.append("signer"))
    assert main.main(["up"]) == 2  # pytest's stdin and stdout are not terminals
    assert "add --no-console" in capsys.readouterr().err and started == []


def test_ctrl_c_interrupts_the_command_then_kills_it_then_stops_waiting():
    from tests.exec_fakes import ScriptedExec
    from tkbox_tui.cli.exec_command import drive_exec

    call = ScriptedExec([None])  # a daemon that never answers again: only Ctrl+C ends the wait
    seen: list[list[str]] = []

    def operator() -> None:  # the driver runs in the main thread, where the signal is delivered
        assert call.waiting.wait(30)
        for _ in range(2):
            call.signalled.clear()
            os.kill(os.getpid(), signal.SIGINT)
            assert call.signalled.wait(30)
            seen.append(list(call.signals))
        os.kill(os.getpid(), signal.SIGINT)

    helper = threading.Thread(target=operator, daemon=True)
    helper.start()
    assert drive_exec(call, stream=False) == EXIT_INTERRUPTED and call.closed
    helper.join(30)
    assert seen == [["INT"], ["INT", "KILL"]]


@pytest.mark.parametrize("ref", ["a/b", "x?y=1", "p#q", "sp ace", "%2e%2e", "ü", "..x"])
async def test_a_box_reference_reaches_the_daemon_as_one_segment_whatever_it_holds(tmp_path, ref):
    from aiohttp import web

    seen: list[tuple[str, str]] = []

    async def one_box(request: web.Request) -> web.Response:
        seen.append((request.method, request.match_info["ref"]))
        return web.json_response({"error": {"code": "not_found", "message": "box not found", "hint": ""}},
                                 status=404)

    app = web.Application()
    app.router.add_get("/v1/boxes/{ref}", one_box)
    app.router.add_post("/v1/boxes/{ref}/stop", one_box)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(tmp_path / "api.sock")).start()
    try:
        async with DaemonClient(tmp_path / "api.sock") as client:
            for call in (client.box(ref), client.stop_box(ref)):
                with pytest.raises(DaemonError) as raised:
                    await call
                assert raised.value.code == "not_found"
    finally:
        await runner.cleanup()
    assert seen == [("GET", ref), ("POST", ref)]


@pytest.mark.parametrize("ref", ["", ".", ".."])
async def test_a_reference_a_url_would_resolve_away_is_not_found_without_asking(tmp_path, ref):
    async with DaemonClient(tmp_path / "api.sock") as client:  # no daemon: nothing was asked
        with pytest.raises(DaemonError) as raised:
            await client.remove_box(ref)
    assert raised.value.code == "not_found" and f"box {ref!r} not found" in raised.value.message
