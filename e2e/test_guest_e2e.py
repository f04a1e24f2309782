"""The real guest agent process against a test host (``guest_host.GuestHost``): exec, stdin flow control, signals,
timeouts, limits, shutdown and protocol errors.  No box is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import pytest
from guest_host import WAIT, GuestHost, gone_or_zombie, guest_on_empty_workspace, shutdown_guest

from tkbox_guest import protocol as P

pytestmark = pytest.mark.e2e


@pytest.fixture
async def guest(tmp_path):
    async with guest_on_empty_workspace(tmp_path) as host:
        yield host


# -- exec -------------------------------------------------------------------------------------------------------


async def test_echo_stdout_stderr_and_exit_code(guest):
    result = await guest.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert result["stdout"] == b"out\n" and result["stderr"] == b"err\n"
    assert (result["exit_code"], result["signal"], result["timed_out"]) == (3, None, False)


async def test_cat_streams_more_stdin_than_the_window_back_unchanged(guest):
    data = os.urandom(3 * P.STDIN_WINDOW + 12345)
    result = await guest.run(["cat"], stdin=data)
    assert result["stdout"] == data and result["exit_code"] == 0


async def test_env_cwd_and_boot_env_reach_the_process(guest, tmp_path):
    result = await guest.run(["sh", "-c", 'echo "$FOO:$LC_ALL:$(pwd)"'], cwd=str(tmp_path), env={"FOO": "bar"})
    assert result["stdout"] == f"bar:C:{tmp_path}\n".encode()


async def test_a_program_that_cannot_start_gets_an_error_response(guest, tmp_path):
    _, missing = await guest.exec(["/nonexistent/program"])
    assert missing["ok"] is False and missing["error"]["code"] == "ENOENT"
    _, bad_cwd = await guest.exec(["true"], cwd=str(tmp_path / "nope"))
    assert bad_cwd["ok"] is False and bad_cwd["error"]["code"] == "CWD_ENOENT"  # the cwd's, not the program's
    pty = await guest.call("exec", argv=["true"], cwd="/", env={}, timeout_ms=0, pty=True)
    assert pty["ok"] is True  # pty execs are supported (e2e/test_pty_e2e.py)
    assert (await guest.call("ping"))["ok"] is True


async def test_sigint_stops_a_sleep(guest):
    ident, response = await guest.exec(["sleep", "1000"], stdin=None)
    assert response["ok"] and response["pid"] > 0
    assert (await guest.call("signal", target=ident, signal=int(signal.SIGINT)))["ok"] is True
    result = await guest.outcome(ident)
    assert (result["exit_code"], result["signal"], result["timed_out"]) == (None, signal.SIGINT, False)
    late = await guest.call("signal", target=ident, signal=int(signal.SIGTERM))
    assert late["ok"] is False and late["error"]["code"] == "ESRCH"


async def test_timeout_kills_the_process_group(guest):
    ident, _ = await guest.exec(["sh", "-c", "sleep 1000 & sleep 1000; echo never"], stdin=None, timeout_ms=200)
    result = await guest.outcome(ident)
    assert result["timed_out"] is True and result["signal"] == signal.SIGKILL and result["stdout"] == b""


async def _stuck_on_stdin(guest: GuestHost) -> tuple[int, int, asyncio.Task[Any]]:
    """A process that never reads stdin while the host tries to send it 2 MB; returns once the host is blocked."""
    ident, response = await guest.exec(["sleep", "1000"], stdin=None)
    feeder = guest.spawn(guest.feed(ident, b"x" * (2 * 1000 * 1000)))
    window = guest.windows[ident]
    async with guest.credit:
        await asyncio.wait_for(guest.credit.wait_for(lambda: window.available == 0), WAIT)
    assert not feeder.done()
    assert (await guest.call("ping"))["ok"] is True  # the request loop is not stuck behind stdin
    return ident, response["pid"], feeder


async def test_a_process_that_never_reads_stdin_is_stopped_by_signal(guest):
    ident, _, feeder = await _stuck_on_stdin(guest)
    assert (await guest.call("signal", target=ident, signal=int(signal.SIGTERM)))["ok"] is True
    result = await guest.outcome(ident)
    assert result["signal"] == signal.SIGTERM
    feeder.cancel()
    assert (await guest.call("ping"))["ok"] is True


async def test_a_process_that_never_reads_stdin_is_killed_when_the_channel_closes(guest):
    _, pid, feeder = await _stuck_on_stdin(guest)
    feeder.cancel()
    guest.writer.close()
    status, err = await guest.stop()
    assert status == 0, err
    assert gone_or_zombie(pid)


async def test_stdin_for_a_process_that_exits_without_reading_it_is_dropped(guest):
    result = await guest.run(["true"], stdin=b"z" * (3 * P.STDIN_WINDOW))
    assert result["exit_code"] == 0
    assert (await guest.call("ping"))["ok"] is True


async def test_sigterm_to_the_guest_stops_it_and_its_processes(guest):
    _, response = await guest.exec(["sleep", "1000"], stdin=None)
    guest.proc.send_signal(signal.SIGTERM)
    status, err = await guest.stop()
    assert status == 0, err
    assert gone_or_zombie(response["pid"])


async def test_many_concurrent_execs_keep_their_streams_apart(guest):
    async def one(n: int) -> None:
        result = await guest.run(["sh", "-c", 'read x; echo "$x-$N"; echo "e$N" >&2'], stdin=f"in{n}\n".encode(),
                                 env={"N": str(n)})
        assert result["stdout"] == f"in{n}-{n}\n".encode() and result["stderr"] == f"e{n}\n".encode()

    await asyncio.gather(*(one(n) for n in range(64)))


async def test_exec_limit_refuses_extra_execs(tmp_path):
    host = await GuestHost(tmp_path, limits={"exec_timeout_ms": 0, "max_execs": 2}).start()
    try:
        first, _ = await host.exec(["sleep", "1000"], stdin=None)
        second, _ = await host.exec(["sleep", "1000"], stdin=None)
        _, third = await host.exec(["true"])
        assert third["ok"] is False and third["error"]["code"] == "EAGAIN"
        for ident in (first, second):
            await host.call("signal", target=ident, signal=9)
            await host.outcome(ident)
        assert (await host.run(["true"]))["exit_code"] == 0
    finally:
        await host.aclose()


async def test_boot_limit_caps_the_timeout(tmp_path):
    host = await GuestHost(tmp_path, limits={"exec_timeout_ms": 200, "max_execs": 4}).start()
    try:
        result = await host.run(["sleep", "1000"], stdin=None, timeout_ms=0)
        assert result["timed_out"] is True
    finally:
        await host.aclose()


async def test_a_background_grandchild_holding_the_pipes_does_not_hang_exit(guest):
    result = await guest.run(["sh", "-c", "sleep 1000 & echo started"])
    assert result["stdout"] == b"started\n" and result["exit_code"] == 0
    status, err = await shutdown_guest(guest)
    assert status == 0, err


async def test_large_output_arrives_in_order_in_bounded_frames(guest):
    result = await guest.run(["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a; echo; seq 1 20000 >&2"])
    assert result["stdout"] == b"a" * 3_000_000 + b"\n"
    assert result["stderr"] == "".join(f"{n}\n" for n in range(1, 20001)).encode()


# -- shutdown and errors ----------------------------------------------------------------------------------------


async def test_shutdown_ends_running_execs_then_the_guest(guest):
    ident, response = await guest.exec(["sleep", "1000"], stdin=None)
    shutdown = await guest.request("shutdown")
    result = await guest.outcome(ident)
    assert result["signal"] == signal.SIGTERM
    assert (await guest.response(shutdown))["ok"] is True
    status, err = await guest.stop()
    assert status == 0, err
    assert gone_or_zombie(response["pid"])


async def test_a_bad_boot_config_stops_the_guest_at_once(tmp_path):
    host = await GuestHost(tmp_path, raw_boot=b'{"box_id": "x", "box_id": "y"}').start(connect=False)
    status, err = await host.stop()
    assert status == 1 and "duplicate JSON key" in err


def _frame(ftype: int, payload: bytes) -> bytes:
    return bytes([ftype]) + len(payload).to_bytes(4, "big") + payload


MALFORMED = {
    "unknown type": _frame(99, b"{}"),
    "guest-only type": _frame(P.STDOUT, b"\0\0\0\1x"),
    "oversize length": bytes([P.REQUEST]) + (P.MAX_PAYLOAD + 1).to_bytes(4, "big"),
    "not json": _frame(P.REQUEST, b"{nope"),
    "not an object": _frame(P.REQUEST, b"[1,2]"),
    "float": _frame(P.REQUEST, b'{"id":1.5,"op":"ping"}'),
    "unknown op": _frame(P.REQUEST, b'{"id":1,"op":"reboot"}'),
    "unknown field": _frame(P.REQUEST, b'{"id":1,"op":"ping","x":1}'),
    "stdin for no exec": _frame(P.STDIN, b"\0\0\0\7data"),
    "short STDIN_EOF": _frame(P.STDIN_EOF, b"\0\0"),
    "cut in the middle": _frame(P.REQUEST, b'{"id":1,"op":"ping"}')[:9],
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
async def test_malformed_frames_make_the_guest_exit_with_an_error(guest, name):
    await guest.send_raw(MALFORMED[name])
    if name == "cut in the middle":
        guest.writer.close()
    status, err = await guest.stop()
    assert status == 2 and "protocol error" in err, err


async def test_a_request_id_in_use_is_a_protocol_error(guest):
    ident, _ = await guest.exec(["sleep", "1000"], stdin=None)
    await guest.send_raw(P.encode_json_frame(P.REQUEST, {"id": ident, "op": "ping"}))
    status, err = await guest.stop()
    assert status == 2 and "already in use" in err


async def test_stdin_beyond_the_window_is_a_protocol_error(guest):
    ident, response = await guest.exec(["sleep", "1000"], stdin=None)
    with contextlib.suppress(ConnectionError):  # the guest hangs up as soon as it sees the overflow
        for _ in range(4):  # 4 MiB with no regard for credit: far more than the pipe and the window hold
            await guest.send_raw(P.encode_id_frame(P.STDIN, ident, b"y" * P.MAX_ID_DATA))
    status, err = await guest.stop()
    assert status == 2 and "window" in err
    assert gone_or_zombie(response["pid"])
