"""A tunnel's TLS opening: the server's first answer read (ServerHello or HelloRetryRequest), the client's bytes held
until it is known, the second hello checked; driven with real Python ssl clients and servers on memory BIOs."""

from __future__ import annotations

import pytest

from tests.tls_hellos import (
    BASIC_EXTENSIONS,
    client_hello,
    python_client,
    python_hello,
    python_server,
    records,
    server_context,
    sni,
)
from tkbox_daemon.egress.serverhello import ServerAnswerKind, ServerHelloReader
from tkbox_daemon.egress.tls_opening import Step, TlsOpening
from tkbox_daemon.egress.tls_verdicts import BAD_SERVERHELLO, HELD_TOO_MUCH, SNI_MISMATCH

CCS = b"\x14\x03\x03\x00\x01\x01"
ALERT = b"\x15\x03\x03\x00\x02\x02\x28"


def _server_first_answer(retry: bool) -> tuple[bytes, bytes]:
    """(the client's hello, the server's first bytes): a ServerHello, or a HelloRetryRequest when ``retry``."""
    hello = python_hello("example.com")
    server = python_server(server_context(groups="secp384r1" if retry else None))
    return hello, server.answer(hello)


def _kinds(answers):
    return [answer.kind for answer in answers]


# ---- the server's first answer ------------------------------------------------------------------------------

@pytest.mark.parametrize(("retry", "kind"), [(False, ServerAnswerKind.SERVER_HELLO),
                                             (True, ServerAnswerKind.HELLO_RETRY_REQUEST)])
def test_a_real_server_answer_is_read_whatever_the_split(retry, kind):
    _hello, answer = _server_first_answer(retry)
    assert _kinds(ServerHelloReader().feed(answer)) == [kind]
    reader = ServerHelloReader()
    assert [k for byte in answer for k in _kinds(reader.feed(bytes([byte])))] == [kind]


def test_after_a_retry_request_the_next_server_hello_is_read():
    client = python_client("example.com")
    server = python_server(server_context(groups="secp384r1"))
    retry = server.answer(client.hello)
    hello_again = server.answer(client.answer(retry))
    reader = ServerHelloReader()
    assert _kinds(reader.feed(retry)) == [ServerAnswerKind.HELLO_RETRY_REQUEST]
    assert retry.endswith(CCS)  # skipped between the two answers
    assert _kinds(reader.feed(hello_again)) == [ServerAnswerKind.SERVER_HELLO]
    assert reader.finished and reader.feed(b"anything") == ()


@pytest.mark.parametrize(("answer", "words"), [
    (ALERT, "alert"),
    (b"HTTP/1.1 400 Bad Request\r\n", "not TLS's"),
    (b"\x17\x03\x03\x00\x05hello", "type 23"),
    (records(b"\x0b\x00\x00\x02ab"), "type 11, not a ServerHello"),
    (records(b"\x02\x00\x00\x02ab"), "too few"),
    (b"\x14\x03\x03\x00\x01\x02", "not the byte 0x01"),
])
def test_anything_but_a_server_hello_is_not_one(answer, words):
    answers = ServerHelloReader().feed(answer)
    assert _kinds(answers) == [ServerAnswerKind.NOT_SERVER_HELLO] and words in answers[0].detail


# ---- the opening ------------------------------------------------------------------------------------------------

def _handshake_through(opening: TlsOpening, client, server) -> list[Step]:
    """Relay a whole handshake through ``opening`` the way the proxy does; returns every step."""
    steps = []
    from_client, to_server, to_client = client.hello, b"", b""
    for _ in range(20):
        if from_client:
            steps.append(opening.from_client(from_client))
            to_server += steps[-1].to_server
            from_client = b""
        if to_server:
            answer = server.answer(to_server)
            to_server = b""
            if answer:
                steps.append(opening.from_server(answer))
                to_server += steps[-1].to_server
                to_client += answer
        if to_client:
            from_client = client.answer(to_client)
            to_client = b""
        if any(step.refused for step in steps) or client.done and server.done and not from_client:
            break
    return steps


@pytest.mark.parametrize("retry", [False, True])
def test_a_real_handshake_through_the_opening_completes(retry):
    client = python_client("example.com")
    server = python_server(server_context(groups="secp384r1" if retry else None))
    opening = TlsOpening("example.com")
    steps = _handshake_through(opening, client, server)
    assert client.done and server.done and not any(step.refused for step in steps)
    assert opening.state == "open" and steps[-1].open
    assert [admitted.after_retry for admitted in opening.admitted] == ([False, True] if retry else [False])
    assert server.names == ["example.com"] * len(opening.admitted)


def test_a_second_hello_sent_right_behind_the_first_is_held_then_checked():
    hello, retry = _server_first_answer(retry=True)
    evil = CCS + records(client_hello(BASIC_EXTENSIONS + sni(b"evil.example.net")))
    opening = TlsOpening("example.com")
    step = opening.from_client(hello + evil)
    assert step.to_server == hello and not step.refused
    step = opening.from_server(retry)
    assert step.refused is not None and step.refused.rule == SNI_MISMATCH and step.to_server == b""
    with pytest.raises(RuntimeError):
        opening.from_client(b"more")


def test_bytes_behind_the_hello_go_out_once_the_server_hello_came():
    hello, server_hello = _server_first_answer(retry=False)
    early = b"\x17\x03\x03\x00\x04data"
    opening = TlsOpening("example.com")
    assert opening.from_client(hello + early[:3]) == Step(to_server=hello)
    assert opening.from_client(early[3:]) == Step()
    assert opening.from_server(server_hello) == Step(to_server=early, open=True)
    assert opening.from_client(b"next") == Step(to_server=b"next", open=True)


def test_a_client_that_sends_too_much_before_the_server_answers_is_refused():
    opening = TlsOpening("example.com", held_limit=100)
    opening.from_client(python_hello("example.com"))
    assert opening.from_client(bytes(100)) == Step()
    step = opening.from_client(b"x")
    assert step.refused is not None and step.refused.rule == HELD_TOO_MUCH


def test_a_server_that_does_not_answer_with_a_server_hello_closes_the_tunnel():
    opening = TlsOpening("example.com")
    opening.from_client(python_hello("example.com") + b"held")
    step = opening.from_server(ALERT)
    assert step.refused is not None and step.refused.rule == BAD_SERVERHELLO and step.to_server == b""


def test_a_second_retry_request_is_refused():
    client = python_client("example.com")
    server = python_server(server_context(groups="secp384r1"))
    retry = server.answer(client.hello)
    opening = TlsOpening("example.com")
    opening.from_client(client.hello)
    opening.from_server(retry)
    second = client.answer(retry)
    assert opening.from_client(second).to_server == second
    step = opening.from_server(retry[:-len(CCS)])
    assert step.refused is not None and "second HelloRetryRequest" in step.refused.message


def test_a_server_answer_before_the_second_hello_was_forwarded_is_refused():
    client = python_client("example.com")
    server = python_server(server_context(groups="secp384r1"))
    retry = server.answer(client.hello)
    _hello, server_hello = _server_first_answer(retry=False)
    opening = TlsOpening("example.com")
    opening.from_client(client.hello)
    second = client.answer(retry)
    assert opening.from_server(retry) == Step()
    assert opening.from_client(second[:20]) == Step()
    step = opening.from_server(server_hello)
    assert step.refused is not None and "before it had the client's second ClientHello" in step.refused.message
    opening = TlsOpening("example.com")
    opening.from_client(client.hello)
    step = opening.from_server(retry + server_hello)
    assert step.refused is not None and step.refused.rule == BAD_SERVERHELLO


def test_a_refused_first_hello_forwards_nothing():
    opening = TlsOpening("example.com")
    step = opening.from_client(python_hello("evil.example.net"))
    assert step.to_server == b"" and step.refused is not None and step.refused.rule == SNI_MISMATCH
