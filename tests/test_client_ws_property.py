"""Properties of what the API client parses from the daemon over an exec's WebSocket (``client_ws``,
``client_exec``): messages within the cap come out whole and exact, whatever their fragmentation into frames and
however the socket cuts the bytes, with pings answered on the way; a message over the cap is refused with
``reply_too_large``; a connection that ends is the end of the messages; a text message that is not a JSON object
is ``bad_reply``."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wsproto import ConnectionType
from wsproto.connection import Connection

from tests.ws_server_frames import server_bytes
from tkbox_tui.client_errors import DaemonError
from tkbox_tui.client_exec import exec_message
from tkbox_tui.client_ws import WebSocketChannel

CAP = 300


class FakeWriter:
    """What the channel writes (pongs, its close frame), kept."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    async def wait_closed(self) -> None:
        return None


# A message as the daemon could send it: text or bytes, in 1..4 fragments, and whether a ping comes before it.
messages = st.lists(st.tuples(st.one_of(st.text(max_size=70), st.binary(max_size=CAP)),
                              st.integers(min_value=1, max_value=4), st.booleans()), max_size=8)


def received(data: bytes, cuts: list[int], cap: int = CAP) -> tuple[list[str | bytes], FakeWriter]:
    async def run() -> tuple[list[str | bytes], FakeWriter]:
        reader = asyncio.StreamReader()
        position = 0
        for cut in cuts:
            reader.feed_data(data[position: position + cut])
            position += cut
        reader.feed_data(data[position:])
        reader.feed_eof()
        writer = FakeWriter()
        channel = WebSocketChannel(reader, writer, cap)  # type: ignore[arg-type]
        out: list[str | bytes] = []
        while (message := await channel.receive()) is not None:
            out.append(message)
        return out, writer

    return asyncio.run(run())


cuts = st.lists(st.integers(min_value=1, max_value=64), max_size=30)


@given(messages, cuts)
def test_messages_within_the_cap_come_out_whole_and_exact_and_pings_are_answered(items, cuts):
    text_fits = all(len(data.encode() if isinstance(data, str) else data) <= CAP for data, _, _ in items)
    out, writer = received(server_bytes(items), cuts)
    assert text_fits and out == [data for data, _, _ in items]  # 70 characters are at most 280 bytes
    pings = sum(1 for _, _, ping in items if ping)
    client = Connection(ConnectionType.SERVER)  # reads what the client wrote: its pongs, then its closing
    client.receive_data(bytes(writer.written))
    assert [type(event).__name__ for event in client.events()].count("Pong") == pings
    assert writer.closed  # the end of the connection closed the channel


@given(st.one_of(st.text(min_size=CAP // 4 + 1, max_size=2 * CAP), st.binary(min_size=CAP + 1, max_size=2 * CAP)),
       st.integers(min_value=1, max_value=4), cuts)
def test_a_message_over_the_cap_is_refused(data, fragments, cuts):
    if isinstance(data, str) and len(data.encode()) <= CAP:
        data = data + "x" * (CAP + 1 - len(data.encode()))
    with pytest.raises(DaemonError) as raised:
        received(server_bytes([(data, fragments, False)]), cuts)
    assert raised.value.code == "reply_too_large" and str(CAP) in raised.value.message


@given(st.binary(max_size=400), cuts)
def test_bytes_that_are_not_websocket_frames_end_the_messages_or_are_a_daemon_error(data, cuts):
    try:
        out, _ = received(data, cuts)
    except DaemonError as error:
        assert error.code in ("reply_too_large", "daemon_lost")
    else:
        assert all(isinstance(message, str | bytes) for message in out)


@given(st.one_of(st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=10), max_size=5)))
def test_a_json_object_message_is_given_exactly(value):
    assert exec_message(json.dumps(value)) == value


@given(st.one_of(st.text(max_size=40), st.lists(st.integers(), max_size=3).map(json.dumps),
                 st.integers().map(json.dumps), st.just("null")))
def test_a_text_message_that_is_not_a_json_object_is_a_bad_reply(text):
    try:
        decoded = json.loads(text)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        return
    with pytest.raises(DaemonError) as raised:
        exec_message(text)
    assert raised.value.code == "bad_reply"
