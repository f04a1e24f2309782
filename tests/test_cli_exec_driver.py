"""``tkbox exec``'s loop without asyncio (``exec_driver``) and its blocking WebSocket (``client_ws_blocking``): stdin
goes up in pieces never larger than the daemon's credit, whole and in order, then its end; what a server writes
comes out of the blocking channel exactly, with pings answered, however the socket cuts it; a message over the cap
is ``reply_too_large``; a connection that ends is the end of the messages."""

from __future__ import annotations

import os
import socket
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType
from wsproto.connection import Connection

from tests.ws_server_frames import server_bytes
from tkbox_tui.cli.exec_driver import drive_exec
from tkbox_tui.client_errors import DaemonError
from tkbox_tui.client_ws_blocking import BlockingWebSocket


class CreditExec:
    """A daemon that grants stdin credit a few bytes at a time, as the command takes them, and ends the exec with
    the number of bytes it got once stdin has ended."""

    def __init__(self, window: int, grant: int) -> None:
        self.grant = grant
        self.credit = 0
        self.got = bytearray()
        self.pieces: list[tuple[int, int]] = []  # (size, credit when it was sent)
        self.pending: list[dict] = [{"type": "started", "stdin_window": window}]
        self.granted = [window]
        self.closed = False
        self._read, self._write = os.pipe()
        os.write(self._write, b"x")

    def fileno(self) -> int:
        return self._read

    @property
    def ready(self) -> bool:
        return bool(self.pending)

    def receive_ready(self) -> list[dict]:
        out, self.pending = self.pending, []
        for message in out:
            self.credit += message.get("stdin_window", 0) + message.get("bytes", 0)
        return out

    def send_stdin(self, data: bytes) -> None:
        assert 0 < len(data) <= self.credit
        self.pieces.append((len(data), self.credit))
        self.credit -= len(data)
        self.got += data
        if self.credit == 0:
            self.pending.append({"type": "stdin_credit", "bytes": self.grant})

    def close_stdin(self) -> None:
        self.pending.append({"type": "exit", "exit_code": len(self.got) % 256})

    def signal(self, name: str) -> None:
        raise AssertionError("no signal here")

    def close(self) -> None:
        self.closed = True
        os.close(self._read)
        os.close(self._write)


class _Stdin:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=3000), st.integers(min_value=1, max_value=700), st.integers(min_value=1, max_value=700))
def test_stdin_goes_up_whole_within_the_credit_then_its_end(data, window, grant):
    read, write = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write, data), os.close(write)), daemon=True)
    writer.start()
    call = CreditExec(window, grant)
    original = sys.stdin
    sys.stdin = _Stdin(read)  # type: ignore[assignment]
    try:
        status = drive_exec(call, stream=True)
    finally:
        sys.stdin = original
        os.close(read)
        writer.join(10)
    assert bytes(call.got) == data and status == len(data) % 256 and call.closed
    assert all(size <= credit for size, credit in call.pieces)


def blocking_received(data: bytes, cap: int = 300) -> tuple[list[str | bytes], bytes]:
    ours, theirs = socket.socketpair()
    theirs.sendall(data)
    theirs.shutdown(socket.SHUT_WR)
    channel = BlockingWebSocket(ours, cap)
    out: list[str | bytes] = []
    try:
        while (messages := channel.receive_ready()) is not None:
            out += messages
    finally:
        channel.close()
    written = bytearray()
    while chunk := theirs.recv(65536):
        written += chunk
    theirs.close()
    return out, bytes(written)


messages = st.lists(st.tuples(st.one_of(st.text(max_size=70), st.binary(max_size=300)),
                              st.integers(min_value=1, max_value=4), st.booleans()), max_size=8)


@given(messages)
def test_the_blocking_channel_gives_each_message_whole_and_answers_pings(items):
    out, written = blocking_received(server_bytes(items))
    assert out == [data for data, _, _ in items]
    client = Connection(ConnectionType.SERVER)
    client.receive_data(written)
    names = [type(event).__name__ for event in client.events()]
    assert names.count("Pong") == sum(1 for _, _, ping in items if ping)


@given(st.binary(min_size=301, max_size=700), st.integers(min_value=1, max_value=4))
def test_the_blocking_channel_refuses_a_message_over_its_cap(data, fragments):
    with pytest.raises(DaemonError) as raised:
        blocking_received(server_bytes([(data, fragments, False)]))
    assert raised.value.code == "reply_too_large"


@given(st.binary(max_size=400))
def test_any_bytes_end_the_blocking_channel_s_messages_or_are_a_daemon_error(data):
    try:
        out, _ = blocking_received(data)
    except DaemonError as error:
        assert error.code in ("reply_too_large", "daemon_lost")
    else:
        assert all(isinstance(message, str | bytes) for message in out)
