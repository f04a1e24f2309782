"""The CLI never shows a traceback: every command, run as the operator runs it (the real ``tkbox`` console script
in a subprocess), ends quietly when its reader goes away, reports an error as one line on stderr or, with
``--json``, as one JSON object on stdout, and says the same thing for no daemon and for a box that does not exist.

The commands come from the dispatch tables and the groups' own parsers (``command_lines``), so a new command is
covered without touching this file.  The processes of a test run in parallel, a few at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.daemon_harness import make_workspace, running_daemon
from tkbox_tui.cli import boxes
from tkbox_tui.cli.main import command_lines, version
from tkbox_tui.cli.report import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED
from tkbox_tui.client import NO_DAEMON_HINT

TKBOX = str(Path(sys.executable).parent / "tkbox")
AT_ONCE = 6  # processes started together: enough to overlap start-up on two cores, few enough not to thrash
DEADLINE_S = 120  # a host deadline on every wait for a process
COMMANDS = command_lines()
# What makes each command that needs the daemon call it.  Every such command must be here: a new box command (or
# one that stops being one) fails test_this_table_names_every_command_that_needs_the_daemon until it is.
NEEDS_DAEMON: dict[str, list[str]] = {
    "run": ["run", "--name", "fresh"], "exec": ["exec", "nope", "--", "true"], "ls": ["ls"], "stop": ["stop", "nope"],
    "rm": ["rm", "nope"], "diff": ["diff", "nope"], "events": ["events", "nope"], "console": ["console"],
    "approvals": ["approvals"], "approve": ["approve", "apr-0000000000000000"],
    "reject": ["reject", "apr-0000000000000000"], "forget": ["forget", "nope", "rem-000000000000"],
    "export": ["export", "nope", "-o", f"/tmp/tkbox-cli-errors-{os.getpid()}.tkb"],  # a file that is not there
    "apply": ["apply", "nope"], "allow": ["allow", "nope", "a.test"], "block": ["block", "nope", "a.test"],
    "allowlist": ["allowlist", "nope"],
}
NAMES_A_BOX = [argv for argv in NEEDS_DAEMON.values() if "nope" in argv]
TAKES_NO_JSON = {"console"}  # interactive: nothing it prints is a result


@dataclass
class Ran:
    argv: list[str]
    status: int
    out: bytes
    err: bytes

    def json(self) -> dict:
        lines = self.out.decode().splitlines()
        assert len(lines) == 1, f"{self.argv}: not one line of JSON: {self.out!r}"
        return json.loads(lines[0])

    def one_line_on_stderr(self) -> str:
        text = self.err.decode()
        assert text.endswith("\n") and text.count("\n") == 1, f"{self.argv}: not one line: {text!r}"
        assert not self.out, f"{self.argv}: an error also wrote to stdout: {self.out!r}"
        return text.rstrip("\n")


@pytest.fixture
def no_daemon_env() -> Iterator[dict[str, str]]:
    """The environment the tests use, pointed at empty runtime directories: no daemon, no signer answers."""
    root = tempfile.mkdtemp(prefix="tkc-", dir="/tmp")  # short: a Unix socket path is at most 108 bytes
    yield {**os.environ, "TKBOX_DAEMON_RUNTIME_DIR": f"{root}/d", "TKBOX_DAEMON_STATE_DIR": f"{root}/ds",
           "TKBOX_SIGNER_RUNTIME_DIR": f"{root}/s", "TKBOX_SIGNER_DATA_DIR": f"{root}/sd"}
    shutil.rmtree(root, ignore_errors=True)


def _daemon_env(daemon) -> dict[str, str]:
    return {**os.environ, "TKBOX_DAEMON_RUNTIME_DIR": str(daemon.config.paths.runtime_dir)}


def _with_json(argv: list[str]) -> list[str]:
    return [argv[0], "--json", *argv[1:]]  # before any "--": after it, words belong to the command exec runs


async def tkbox_all(env: dict[str, str], argvs: list[list[str]], *, reader_gone: bool = False) -> list[Ran]:
    """Run ``tkbox ARGV`` for each argv, a few at a time.  ``reader_gone``: stdout is a pipe whose reading end is
    already closed, as when ``head`` has read what it wanted and exited (every write fails with EPIPE)."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(argv: list[str]) -> Ran:
        async with gate:
            stdout: int = asyncio.subprocess.PIPE
            if reader_gone:
                read_end, stdout = os.pipe()
                os.close(read_end)
            try:
                process = await asyncio.create_subprocess_exec(
                    TKBOX, *argv, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=stdout,
                    stderr=asyncio.subprocess.PIPE)
            finally:
                if reader_gone:
                    os.close(stdout)
            out, err = await asyncio.wait_for(process.communicate(), DEADLINE_S)
            assert process.returncode is not None
            return Ran(argv, process.returncode, out or b"", err)

    return list(await asyncio.gather(*(one(argv) for argv in argvs)))


def test_the_commands_are_read_from_the_parsers():
    assert ["ls"] in COMMANDS and ["signer", "up"] in COMMANDS and ["signer", "serve"] in COMMANDS
    assert ["policy", "check"] in COMMANDS and ["exec"] in COMMANDS


def test_this_table_names_every_command_that_needs_the_daemon():
    assert set(NEEDS_DAEMON) == set(boxes.COMMANDS) | {"console"}


async def test_every_command_ends_quietly_when_its_reader_has_gone(no_daemon_env):
    runs = await tkbox_all(no_daemon_env, [[*words, "--help"] for words in COMMANDS]
                           + [["--help"], ["--version"], ["policy", "check", "--tool", "Bash", "--args", "ls"],
                              ["ls", "--json"]], reader_gone=True)
    for ran in runs:
        assert ran.err == b"", f"{ran.argv}: {ran.err.decode()}"  # no traceback, no "Exception ignored"
        assert ran.status == EXIT_BROKEN_PIPE, ran.argv


async def test_every_command_gives_its_errors_as_one_json_object(no_daemon_env):
    """(Without --json the same error is one line on stderr: tests/test_cli_report.py, in process.)"""
    runs = await tkbox_all(no_daemon_env, [_with_json([*words, "--no-such-option"]) for words in COMMANDS])
    for ran in runs:
        assert ran.status == 2 and ran.err == b"", (ran.argv, ran.err)
        error = ran.json()["error"]
        assert error["code"] == "usage" and error["message"], ran.argv
        assert isinstance(error["hint"], str) and "--help" in error["hint"], ran.argv


async def test_with_no_daemon_every_command_says_how_to_start_one(no_daemon_env):
    argvs = list(NEEDS_DAEMON.values())
    json_argvs = [_with_json(argv) for name, argv in NEEDS_DAEMON.items() if name not in TAKES_NO_JSON]
    runs = await tkbox_all(no_daemon_env, argvs + json_argvs)
    socket = f"{no_daemon_env['TKBOX_DAEMON_RUNTIME_DIR']}/api.sock"
    for ran in runs[: len(argvs)]:
        assert ran.status == 2
        assert ran.one_line_on_stderr() == (f"tkbox {ran.argv[0]}: no daemon answers at {socket} "
                                            f"(No such file or directory); {NO_DAEMON_HINT}")
    for ran in runs[len(argvs):]:
        assert ran.status == 2 and ran.err == b""
        assert ran.json() == {"error": {"code": "no_daemon", "hint": NO_DAEMON_HINT,
                                        "message": f"no daemon answers at {socket} (No such file or directory)"}}


async def test_the_daemon_without_a_signer_says_its_hint_once(no_daemon_env):
    (ran,) = await tkbox_all(no_daemon_env, [["daemon"]])
    assert ran.status == 2
    line = ran.one_line_on_stderr()
    assert line.count("tkbox signer up") == 1 and "tkbox daemon --unrecorded" in line


async def test_version():
    (ran,) = await tkbox_all(dict(os.environ), [["--version"]])
    assert ran.status == 0 and ran.out.decode() == f"tkbox {version()}\n" and version()[0].isdigit()


async def test_every_box_that_does_not_exist_reads_the_same(tmp_path):
    async with running_daemon(tmp_path) as daemon:
        runs = await tkbox_all(_daemon_env(daemon), NAMES_A_BOX + [_with_json(argv) for argv in NAMES_A_BOX])
    assert {ran.argv[0] for ran in runs} == {"exec", "stop", "rm", "diff", "events", "forget", "export", "apply",
                                             "allow", "block", "allowlist"}
    for ran in runs[: len(NAMES_A_BOX)]:
        assert ran.status == 2
        assert ran.one_line_on_stderr() == f"tkbox {ran.argv[0]}: box 'nope' not found; list the boxes with: tkbox ls"
    for ran in runs[len(NAMES_A_BOX):]:
        assert ran.status == 2 and ran.err == b""
        assert ran.json() == {"error": {"code": "not_found", "message": "box 'nope' not found",
                                        "hint": "list the boxes with: tkbox ls"}}


async def test_output_cut_short_by_its_reader_ends_quietly(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        box = await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        await client.create_box({"name": "t2", "workspace": str(tmp_path / "ws")})
        (daemon.manager.get("t2").layers.upper / "new.txt").write_text("a change to show\n")
        await client.stop_box("t2")
        for number in range(2000):  # far more than a pipe holds, so writing must meet the closed pipe
            daemon.events.emit(box.id, "guest.protocol_error", {"reason": f"filler {number}", "pad": "x" * 40})
        env = _daemon_env(daemon)
        closed = await tkbox_all(env, [["events"], ["events", "--json"], ["ls", "--json"], ["ls"], ["diff", "t2"],
                                       ["diff", "t2", "--json"], ["diff", "t2", "--raw"],
                                       ["exec", "t1", "--cwd", "/tmp", "--", "seq", "1", "100000"],
                                       ["exec", "t1", "--json", "--cwd", "/tmp", "--", "true"], ["ls", "--bogus"]],
                                 reader_gone=True)
        shell = await asyncio.create_subprocess_exec(
            "bash", "-c", f"set -o pipefail; {TKBOX} events | head -1; echo \"status ${{PIPESTATUS[0]}}\"",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(shell.communicate(), DEADLINE_S)
    for ran in closed:
        assert ran.err == b"" or ran.argv == ["ls", "--bogus"], (ran.argv, ran.err.decode())
        assert ran.status == (2 if ran.argv == ["ls", "--bogus"] else EXIT_BROKEN_PIPE), ran.argv
    assert err == b""  # no BrokenPipeError, no "Exception ignored"
    first, status = out.decode().splitlines()
    assert "daemon.started" in first and status == f"status {EXIT_BROKEN_PIPE}"


async def test_ctrl_c_stops_events_follow_with_one_line_and_130(tmp_path):
    async with running_daemon(tmp_path) as daemon:
        process = await asyncio.create_subprocess_exec(
            TKBOX, "events", "--follow", env=_daemon_env(daemon), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert process.stdout is not None
        first = await asyncio.wait_for(process.stdout.readline(), DEADLINE_S)  # it follows now
        process.send_signal(signal.SIGINT)
        rest, err = await asyncio.wait_for(process.communicate(), DEADLINE_S)
    assert b"daemon.started" in first
    assert process.returncode == EXIT_INTERRUPTED
    seq = int((first + rest).splitlines()[-1].split()[0])  # the last event it printed
    assert err.decode() == f"tkbox events: stopped by Ctrl+C; resume with: tkbox events --follow --after {seq}\n"


async def test_exec_json_is_one_result_object_for_an_agent(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        ran, denied, refused = await tkbox_all(_daemon_env(daemon), [
            ["exec", "t1", "--json", "--cwd", "/tmp", "--", "sh", "-c", "echo out; printf '\\033[2J\\377' >&2; exit 3"],
            ["exec", "t1", "--json", "--", "rm", "-rf", "/"],
            ["exec", "t1", "--json", "--tty", "--", "sh"]])
    assert ran.status == 3 and ran.err == b"" and ran.out.isascii()
    result = json.loads(ran.out)
    assert result["decision"]["decision"] == "allow" and result["exit_code"] == 3 and result["exit"]["exit_code"] == 3
    assert result["stdout"] == "out\n" and result["stderr"] == "\x1b[2J\ufffd" and result["stderr_bytes"] == 5
    assert result["argv"][:2] == ["sh", "-c"] and result["box"] == "t1" and result["output_cut"] is False
    assert denied.status == 126 and denied.err == b""
    decision = json.loads(denied.out)["decision"]
    assert decision["decision"] == "deny" and decision["rule_ids"] and decision["reason"] and decision["hint"]
    assert json.loads(denied.out)["exit_code"] == 126
    assert refused.status == 2 and refused.json()["error"]["code"] == "usage"


async def test_a_door_that_is_not_built_is_refused_not_ignored_and_a_wrong_allow_names_its_field(tmp_path):
    workspace = make_workspace(tmp_path)
    config = tmp_path / "tkbox.yaml"
    config.write_text("secrets: ['GH=env:GH_TOKEN@api.github.com']\n")
    async with running_daemon(tmp_path) as daemon:
        flag, flag_json, yaml = await tkbox_all(_daemon_env(daemon), [
            ["run", "--workspace", str(workspace), "--allow", "127.1"],
            ["run", "--workspace", str(workspace), "--allow", "pypi.org", "--resolve", "pypi.org", "--json"],
            ["run", "--workspace", str(workspace), "--config", str(config)]])
        assert daemon.manager.list() == []
    assert flag.status == 2 and "allow: entry 1 '127.1'" in flag.one_line_on_stderr()
    error = flag_json.json()["error"]
    assert error["code"] == "invalid_settings" and error["field"] == "resolve" and "NAME=ADDR" in error["message"]
    assert yaml.status == 2 and "secret door is not built yet" in yaml.one_line_on_stderr()
