"""Pty execs through the daemon in one process: the exec WebSocket, the decision's ``tty`` flag, resize, Ctrl-C and
the ``tkbox exec --tty`` driver on a pty pair made by the test (the unisolated backend runs the guest on the host).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sys
import termios
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.daemon_harness import make_workspace, running_daemon
from tkbox_daemon.api.errors import ApiError
from tkbox_daemon.api.routes_exec import parse_start
from tkbox_daemon.doors.commands import ExecRequest, decision_args
from tkbox_daemon.policy.args import check_args
from tkbox_tui.cli import boxes as cli
from tkbox_tui.client import DaemonClient
from tkbox_tui.client_exec import BlockingExecCall

HOST_CWD = "/tmp"
WAIT = 60  # a safety net against hangs, never a timing assertion


def _spy_on_decisions(daemon, box: str) -> list[dict]:
    """Record the args of every decision the box asks the (real) signer for."""
    recorder = daemon.manager.get(box).recorder
    seen: list[dict] = []
    real = recorder.decide

    async def decide(tool, args):
        seen.append(dict(args))
        return await real(tool, args)

    recorder.decide = decide
    return seen


async def _until(call, out: bytearray, needle: bytes) -> None:
    async for message in call.messages():
        if isinstance(message, tuple):
            assert message[0] == 1, message  # a terminal has one output stream
            out += message[1]
            if needle in out:
                return
        else:
            assert message["type"] in ("decision", "started"), message
    raise AssertionError(f"the exec ended before {needle!r}: {bytes(out)!r}")


async def _to_exit(call, out: bytearray) -> dict:
    async for message in call.messages():
        if isinstance(message, tuple):
            out += message[1]
        elif message["type"] == "exit":
            return message
    raise AssertionError("no exit")


async def test_a_tty_exec_runs_on_a_terminal_is_decided_as_one_and_follows_resizes(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        decided = _spy_on_decisions(daemon, "t1")
        call = client.exec("t1")
        script = 'test -t 0 && echo tty; stty size; read line; stty size; echo "got $line"'
        await call.start(["sh", "-c", script], cwd=HOST_CWD, stream_stdin=True, tty=True, rows=30, cols=90)
        out = bytearray()
        await _until(call, out, b"30 90\r\n")
        await call.resize(40, 100)
        await call.send_stdin(b"hi\n")
        end = await asyncio.wait_for(_to_exit(call, out), WAIT)
        await call.close()
        assert bytes(out) == b"tty\r\n30 90\r\nhi\r\n40 100\r\ngot hi\r\n"
        assert end["exit_code"] == 0
        assert decided == [{"command": f"sh -c '{script}'", "cwd": HOST_CWD, "stdin": "streamed", "tty": True}]
        finished = (await client.stored_events(box="t1"))[-1]
        assert finished.kind == "exec.finished" and finished.data["stdin"]["size"] == 3


async def test_ctrl_c_typed_into_a_tty_exec_interrupts_it(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        call = client.exec("t1")
        await call.start(["sh", "-c", "echo ready; exec sleep 600"], cwd=HOST_CWD, stream_stdin=True, tty=True)
        out = bytearray()
        await _until(call, out, b"ready\r\n")
        await call.send_stdin(b"\x03")
        end = await asyncio.wait_for(_to_exit(call, out), WAIT)
        await call.close()
        assert end["signal"] == signal.SIGINT and end["exit_code"] == 130


async def test_an_exec_without_tty_is_decided_without_the_flag_and_ignores_resize(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
        decided = _spy_on_decisions(daemon, "t1")
        call = client.exec("t1")
        await call.start(["sh", "-c", "test -t 1 || echo pipe; read x; echo done"], cwd=HOST_CWD,
                         stream_stdin=True)
        out = bytearray()
        await _until(call, out, b"pipe\n")
        await call.resize(10, 10)  # ignored: not a terminal
        await call.send_stdin(b"x\n")
        end = await asyncio.wait_for(_to_exit(call, out), WAIT)
        await call.close()
        assert bytes(out) == b"pipe\ndone\n" and end["exit_code"] == 0
        assert "tty" not in decided[0]


# -- the start message and the decision ---------------------------------------------------------------------


def _start(**fields) -> str:
    return json.dumps({"type": "start", "argv": ["sh"], **fields})


def test_the_start_message_takes_tty_rows_and_cols():
    start = parse_start(_start(tty=True, rows=50, cols=200, stdin="stream"))
    assert (start.tty, start.rows, start.cols) == (True, 50, 200)
    assert (parse_start(_start(tty=True)).rows, parse_start(_start()).tty) == (None, False)


@pytest.mark.parametrize("fields", [
    {"tty": 1}, {"tty": "yes"}, {"rows": 10, "cols": 10}, {"tty": True, "rows": 10}, {"tty": True, "cols": 10},
    {"tty": True, "rows": 0, "cols": 10}, {"tty": True, "rows": 10, "cols": 1001}, {"tty": True, "rows": True,
                                                                                       "cols": 10},
])
def test_bad_tty_fields_are_refused(fields):
    with pytest.raises(ApiError):
        parse_start(_start(**fields))


@given(tty=st.one_of(st.booleans(), st.integers(), st.none(), st.text(max_size=3)),
       rows=st.one_of(st.none(), st.integers(-5, 1005), st.booleans(), st.text(max_size=2)),
       cols=st.one_of(st.none(), st.integers(-5, 1005), st.booleans()))
def test_parse_start_gives_a_bounded_size_or_an_api_error(tty, rows, cols):
    fields = {"tty": tty, **({"rows": rows} if rows is not None else {}), **({"cols": cols} if cols is not None else {})}
    try:
        start = parse_start(_start(**fields))
    except ApiError as error:
        assert error.status == 400
        return
    assert start.tty is tty
    if start.rows is not None:
        assert tty is True and 1 <= start.rows <= 1000 and 1 <= start.cols <= 1000
    else:
        assert start.cols is None


def test_the_decision_says_tty_and_the_shell_policy_accepts_it():
    args = decision_args(ExecRequest(argv=("/bin/sh",), stdin_streamed=True, tty=True))
    assert args == {"command": "/bin/sh", "cwd": "/workspace", "stdin": "streamed", "tty": True}
    assert check_args("shell", "Bash", args) is None
    assert "tty" not in decision_args(ExecRequest(argv=("/bin/sh",)))


# -- tkbox exec --tty ------------------------------------------------------------------------------------------


def test_tty_without_a_terminal_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert cli.box_command("exec", ["t1", "--tty", "--", "sh"]) == 2
    assert "--tty needs a terminal on stdin" in capsys.readouterr().err


class _Screen:
    """What the CLI writes to its stdout, with a wait (from another thread) for some bytes to appear."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.changed = threading.Condition()
        self.buffer = self

    def write(self, data: bytes) -> int:
        with self.changed:
            self.data += data
            self.changed.notify_all()
        return len(data)

    def flush(self) -> None:
        pass

    def until(self, needle: bytes) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: needle in self.data, WAIT), bytes(self.data)


SIZE_ON_WINCH = """
import os, signal, sys
def show(*_):
    size = os.get_terminal_size(0)
    os.write(1, f"{size.lines} {size.columns}\\n".encode())  # unbuffered: the handler may interrupt a print
signal.signal(signal.SIGWINCH, show)
show()
print("got", sys.stdin.readline().strip(), flush=True)
sys.exit(3)
"""


def test_the_cli_driver_runs_raw_forwards_keys_and_resizes_then_restores_the_terminal(tmp_path, monkeypatch):
    master, slave = os.openpty()  # the operator's terminal: the CLI gets the slave, the test types on the master
    serving, finished = threading.Event(), threading.Event()
    sockets: list[Path] = []

    def serve() -> None:  # the daemon on its own loop; the CLI's driver runs in the main thread, as tkbox exec does
        async def run() -> None:
            async with running_daemon(tmp_path) as daemon, daemon.client() as client:
                await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
                sockets.append(client.socket_path)
                serving.set()
                await asyncio.to_thread(finished.wait)

        asyncio.run(run())

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        assert serving.wait(WAIT)
        cooked = termios.tcgetattr(slave)
        screen = _Screen()
        monkeypatch.setattr(sys, "stdout", screen)
        call = BlockingExecCall(DaemonClient(sockets[0]), "t1")
        call.start([sys.executable, "-I", "-S", "-c", SIZE_ON_WINCH], cwd=HOST_CWD, stream_stdin=True, tty=True,
                   rows=20, cols=70)
        failures: list[BaseException] = []

        def operator() -> None:
            try:
                screen.until(b"20 70\r\n")
                assert termios.tcgetattr(slave)[3] & termios.ICANON == 0  # the local terminal is raw now
                termios.tcsetwinsize(slave, (44, 120))
                os.kill(os.getpid(), signal.SIGWINCH)
                screen.until(b"44 120\r\n")
                os.write(master, b"ok\r")  # raw: Enter is \r, passed on as typed; the box's terminal makes it \n
            except BaseException as failure:  # seen by the test below
                failures.append(failure)

        helper = threading.Thread(target=operator, daemon=True)
        helper.start()
        status = cli.drive_exec(call, True, cli.RawTerminal(slave))
        helper.join(WAIT)
        assert failures == []
        assert status == 3
        assert bytes(screen.data) == b"20 70\r\n44 120\r\nok\r\ngot ok\r\n"
        assert termios.tcgetattr(slave) == cooked  # restored
    finally:
        finished.set()
        server.join(WAIT)
        os.close(master)
        os.close(slave)
