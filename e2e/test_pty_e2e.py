"""Interactive (pty) execs end to end: the real guest agent on a test host, then ``tkbox exec --tty`` on a real box.

The guest tests run the guest exactly as in a box (``GuestHost`` from ``guest_host``). The box test starts the
real signer and daemon with a bubblewrap box and runs the CLI under a real pty made by ``pty.fork()``. Nothing
sleeps: every wait reads until the expected bytes arrive, with a bounded safety-net timeout.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time

import pytest
from guest_host import WAIT, GuestHost, guest_on_empty_workspace

from e2e.daemon_process import daemon_process, events, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tkbox_guest import protocol as P

pytestmark = pytest.mark.e2e


@pytest.fixture
async def guest(tmp_path):
    async with guest_on_empty_workspace(tmp_path) as host:
        yield host


async def _pty_exec(host: GuestHost, argv: list[str], **size: int) -> int:
    ident = await host.request("exec", argv=argv, cwd="/", env={}, timeout_ms=0, pty=True, **size)
    response = await host.response(ident)
    assert response["ok"], response
    return ident


async def _read_until(host: GuestHost, ident: int, out: bytearray, needle: bytes) -> None:
    """Collect the exec's output into ``out`` until ``needle`` is in it (no EXIT, no STDERR on the way)."""
    while needle not in out:
        kind, value = await host.event(ident)
        assert kind == "stdout", (kind, value, bytes(out))
        out += value


async def _rest(host: GuestHost, ident: int, out: bytearray) -> dict:
    result = await host.outcome(ident)
    assert result["stderr"] == b""
    out += result["stdout"]
    return result


async def test_a_pty_exec_sees_a_terminal_of_the_asked_size(guest):
    ident = await _pty_exec(guest, ["sh", "-c", "test -t 0 && test -t 1 && test -t 2 && echo all-tty; stty size"],
                            rows=33, cols=101)
    out = bytearray()
    result = await _rest(guest, ident, out)
    assert result["exit_code"] == 0
    assert bytes(out) == b"all-tty\r\n33 101\r\n"  # a terminal's ONLCR: every newline arrives as \r\n


async def test_a_pty_exec_without_a_size_gets_24_by_80_and_a_term(guest):
    ident = await _pty_exec(guest, ["sh", "-c", 'stty size; echo "term=$TERM"'])
    out = bytearray()
    await _rest(guest, ident, out)
    assert bytes(out) == b"24 80\r\nterm=xterm-256color\r\n"


async def test_resize_changes_the_size_the_process_sees(guest):
    ident = await _pty_exec(guest, ["sh", "-c", "stty size; read line; stty size"], rows=10, cols=20)
    out = bytearray()
    await _read_until(guest, ident, out, b"10 20\r\n")
    assert (await guest.call("resize", target=ident, rows=50, cols=132))["ok"] is True
    await guest.feed(ident, b"go\n", eof=False)
    await _rest(guest, ident, out)
    assert bytes(out) == b"10 20\r\ngo\r\n50 132\r\n"  # the typed line is echoed by the terminal


async def test_input_round_trips_through_cat_and_ctrl_d_ends_it(guest):
    ident = await _pty_exec(guest, ["cat"])
    out = bytearray()
    await guest.feed(ident, b"hello pty\n", eof=False)
    await _read_until(guest, ident, out, b"hello pty\r\nhello pty\r\n")  # the echo, then cat's copy
    await guest.feed(ident, b"\x04", eof=True)
    result = await _rest(guest, ident, out)
    assert result["exit_code"] == 0 and bytes(out) == b"hello pty\r\nhello pty\r\n"


async def test_stdin_eof_closes_nothing_on_a_pty(guest):
    ident = await _pty_exec(guest, ["cat"])
    await guest.send_raw(P.encode_id_frame(P.STDIN_EOF, ident))
    assert (await guest.call("ping"))["ok"] is True  # the guest has handled the EOF by now
    assert (await guest.call("signal", target=ident, signal=int(signal.SIGTERM)))["ok"] is True  # cat still ran
    result = await _rest(guest, ident, bytearray())
    assert result["signal"] == signal.SIGTERM


async def test_ctrl_c_interrupts_the_foreground_process(guest):
    script = ("import sys, time\n"  # 'ready' inside the try: Ctrl-C may land while print is still returning
              "try:\n    print('ready', flush=True)\n    time.sleep(1000)\n"  # noqa: sleep-ok
              "except KeyboardInterrupt:\n    print('interrupted', flush=True)\n    sys.exit(5)\n")
    ident = await _pty_exec(guest, [sys.executable, "-I", "-S", "-c", script])
    out = bytearray()
    await _read_until(guest, ident, out, b"ready\r\n")
    await guest.feed(ident, b"\x03", eof=False)
    result = await _rest(guest, ident, out)
    assert result["exit_code"] == 5 and b"interrupted\r\n" in out


async def test_signal_reaches_the_job_in_the_foreground_of_an_interactive_shell(guest):
    # An interactive shell puts each job in its own group and makes it the terminal's foreground group.
    ident = await _pty_exec(guest, ["sh", "-i"])
    out = bytearray()
    # The job says it runs (a word the echo of the typed line does not hold), so it is the foreground group now.
    await guest.feed(ident, b"sh -c \"printf 'job%s\\n' -ready; exec sleep 1000\"; echo status=$?\n", eof=False)
    await _read_until(guest, ident, out, b"job-ready\r\n")
    assert (await guest.call("signal", target=ident, signal=int(signal.SIGTERM)))["ok"] is True
    await _read_until(guest, ident, out, b"status=143")  # the job died of SIGTERM; the shell lives on
    await guest.feed(ident, b"exit 7\n", eof=False)
    result = await _rest(guest, ident, out)
    assert result["exit_code"] == 7


async def test_resize_is_refused_without_a_pty_or_a_running_exec(guest):
    ident, response = await guest.exec(["sleep", "1000"], stdin=None)
    assert response["ok"]
    no_pty = await guest.call("resize", target=ident, rows=10, cols=10)
    assert no_pty["ok"] is False and no_pty["error"]["code"] == "ENOTTY"
    missing = await guest.call("resize", target=9999, rows=10, cols=10)
    assert missing["ok"] is False and missing["error"]["code"] == "ESRCH"
    await guest.call("signal", target=ident, signal=int(signal.SIGKILL))
    await guest.outcome(ident)


async def test_shutdown_ends_a_pty_exec(guest):
    ident = await _pty_exec(guest, ["sh", "-c", "trap '' TERM; echo ready; while :; do read x; done"])
    await _read_until(guest, ident, bytearray(), b"ready\r\n")
    shutdown = await guest.request("shutdown")
    result = await guest.outcome(ident)
    assert result["signal"] == signal.SIGKILL
    assert (await guest.response(shutdown))["ok"] is True
    status, _ = await guest.stop()
    assert status == 0


# -- tkbox exec --tty on a real box ----------------------------------------------------------------------------


@pytest.fixture
def bwrap_box(tmp_path):
    tkbox("signer", "up")
    with daemon_process(backend="bwrap"):
        info = tkbox_json("run", "--name", "e2e", "--workspace", str(make_checkout(tmp_path)))
        assert info["state"] == "running"
        yield info
    tkbox("signer", "down", check=False)


def _read_pty_until(fd: int, needle: bytes, deadline: float) -> bytes:
    out = b""
    while needle not in out:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {needle!r} in time; got {out!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            assert chunk, f"the terminal closed before {needle!r}; got {out!r}"
            out += chunk
    return out


def _run_under_pty(argv: list[str], rows: int, cols: int) -> tuple[int, bytes]:
    """Run argv on a new pty of the given size (as an operator's terminal); returns (exit status, output)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: set the terminal's size, then become the CLI
        import fcntl
        import struct
        import termios

        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.execv(argv[0], argv)
    try:
        out = _read_pty_until(fd, b"END", time.monotonic() + WAIT)
        while True:  # the rest, up to EOF (EIO once the CLI has exited)
            ready, _, _ = select.select([fd], [], [], WAIT)
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                break
            out += chunk
    except OSError:
        pass
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), out


def test_tkbox_exec_tty_runs_on_a_terminal_of_the_operators_size(bwrap_box):
    status, out = _run_under_pty([TKBOX, "exec", "e2e", "--tty", "--", "sh", "-c", "stty size; tty; echo END; exit 4"],
                                 rows=37, cols=111)
    assert status == 4, out
    lines = out.replace(b"\r\n", b"\n").split(b"\n")
    assert b"37 111" in lines, out
    assert any(line.startswith(b"/dev/pts/") for line in lines), out
    started = [e for e in events("e2e") if e["kind"] == "exec.started"]
    assert started and started[-1]["data"]["command"].startswith("sh -c")


def test_tkbox_exec_tty_refuses_without_a_terminal(bwrap_box):
    import subprocess

    result = subprocess.run([TKBOX, "exec", "e2e", "--tty", "--", "true"], stdin=subprocess.DEVNULL,
                            capture_output=True, timeout=60)
    assert result.returncode == 2 and b"--tty needs a terminal" in result.stderr
