"""The egress proxy's ClientHello reader on real hellos (Python's ssl, openssl s_client) and on hostile ones."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import pytest

from tests.tls_hellos import (
    BASIC_EXTENSIONS,
    client_hello,
    extension,
    handshake,
    handshake_of,
    openssl_hello,
    python_client,
    python_hello,
    records,
    server_context,
    sni,
    sni_data,
)
from tkbox_daemon.egress import tls_verdicts
from tkbox_daemon.egress.clienthello import ClientHelloReader, expected_server_name
from tkbox_daemon.egress.clienthello_parse import ECH_EXTENSIONS
from tkbox_daemon.egress.tls_verdicts import (
    BAD_CLIENTHELLO,
    BAD_SNI,
    CLIENTHELLO_TOO_LARGE,
    ECH,
    NOT_TLS,
    SNI_MISMATCH,
    SNI_MISSING,
    Admit,
    Refuse,
)
from tkbox_daemon.limits import EGRESS_CLIENTHELLO, EGRESS_CLIENTHELLO_RECORDS

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def verdict(connect_host: str, data: bytes) -> Admit | Refuse | None:
    return ClientHelloReader(connect_host).feed(data)


def refused(connect_host: str, data: bytes) -> Refuse:
    result = verdict(connect_host, data)
    assert isinstance(result, Refuse), result
    assert all(" " <= character <= "~" for character in result.message), result.message
    return result


def hello_for(*names: bytes, more: bytes = b"", name_type: int = 0) -> bytes:
    return records(client_hello(BASIC_EXTENSIONS + sni(*names, name_type=name_type) + more))


# ---- real hellos --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("maximum", [None, ssl.TLSVersion.TLSv1_2])
def test_a_python_hello_naming_the_connect_host_is_admitted_and_forwarded_exactly(maximum):
    hello = python_hello("pypi.org", maximum=maximum, alpn=["h2", "http/1.1"])
    result = verdict("pypi.org", hello)
    assert isinstance(result, Admit)
    assert (result.forward, result.rest, result.server_name) == (hello, b"", "pypi.org")
    assert not result.after_retry


@pytest.mark.parametrize(("connect_host", "sent"), [("Example.COM", "example.com"), ("example.com", "EXAMPLE.com"),
                                                    ("example.com", "example.com."),
                                                    ("example.com.", "example.com")])
def test_names_are_compared_ignoring_ascii_case_and_one_trailing_dot(connect_host, sent):
    result = verdict(connect_host, python_hello(sent))
    assert isinstance(result, Admit) and result.server_name == "example.com"


@needs_openssl
def test_an_openssl_s_client_hello_is_admitted():
    hello = openssl_hello("files.pythonhosted.org")
    result = verdict("files.pythonhosted.org", hello)
    assert isinstance(result, Admit) and result.forward == hello


@needs_openssl
def test_an_openssl_hello_without_sni_is_admitted_only_for_an_ip_connect_host():
    hello = openssl_hello(None)
    result = verdict("192.0.2.7", hello)
    assert isinstance(result, Admit) and result.server_name is None
    assert refused("example.com", hello).rule == SNI_MISSING


@pytest.mark.parametrize("connect_host", ["192.0.2.7", "2001:db8::1", "[2001:db8::1]"])
def test_an_ip_connect_host_requires_no_server_name(connect_host):
    assert isinstance(verdict(connect_host, python_hello(None)), Admit)
    assert isinstance(verdict(connect_host, records(client_hello(None))), Admit)  # no extensions at all
    refusal = refused(connect_host, python_hello("example.com"))
    assert refusal.rule == SNI_MISMATCH and "RFC 6066" in refusal.message


def test_one_byte_records_fed_one_byte_at_a_time_are_reassembled():
    message = handshake_of(python_hello("example.com"))
    stream = records(message, [1] * len(message))
    reader = ClientHelloReader("example.com")
    results = [reader.feed(bytes([byte])) for byte in stream]
    assert results[:-1] == [None] * (len(stream) - 1)
    assert isinstance(results[-1], Admit) and results[-1].forward == stream


def test_a_large_hello_like_a_post_quantum_one_is_admitted():
    key_share = extension(0x0033, (1222).to_bytes(2, "big") + b"\x11\xec" + (1216).to_bytes(2, "big")
                          + bytes(1216))
    hello = records(client_hello(BASIC_EXTENSIONS + sni(b"example.com") + key_share))
    assert len(hello) > 1300
    assert isinstance(verdict("example.com", hello), Admit)


def test_bytes_after_the_hello_are_returned_apart():
    hello = python_hello("example.com")
    result = verdict("example.com", hello + b"\x14\x03\x03\x00\x01\x01" + b"more")
    assert isinstance(result, Admit) and result.forward == hello
    assert result.rest == b"\x14\x03\x03\x00\x01\x01more"


# ---- the server name --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("data", "rule", "words"), [
    (hello_for(b"example.com", b"evil.com"), BAD_SNI, "more than one entry"),
    (hello_for(b"evil.com", b"example.com"), BAD_SNI, "more than one entry"),
    (hello_for(b"example.com", name_type=1), BAD_SNI, "name type 1"),
    (hello_for(b""), BAD_SNI, "empty"),
    (records(client_hello(BASIC_EXTENSIONS + extension(0, b"\x00\x00"))), BAD_SNI, "server_name_list is 0 bytes"),
    (records(client_hello(BASIC_EXTENSIONS + extension(0, b""))), BAD_SNI, "needs 2 bytes"),
    (records(client_hello(BASIC_EXTENSIONS + extension(0, sni_data(b"example.com") + b"x"))), BAD_SNI,
     "follow its list"),
    (hello_for(b"example.com\x00.evil.com"), BAD_SNI, "NUL"),
    (hello_for(b"example.com\x00"), BAD_SNI, "NUL"),
    (hello_for(b"exa_mple.com"), BAD_SNI, "not a letter, digit"),
    (hello_for(b"ex ample.com"), BAD_SNI, "not a letter, digit"),
    (hello_for("exämple.com".encode()), BAD_SNI, "not a letter, digit"),
    (hello_for(b"example.com.."), BAD_SNI, "label of 0 bytes"),
    (hello_for(b"."), BAD_SNI, "empty"),
    (hello_for(b"a" * 64 + b".com"), BAD_SNI, "label of 64"),
    (hello_for((b"a" * 60 + b".") * 5 + b"com"), BAD_SNI, "over 253"),
    (hello_for(b"192.0.2.7"), BAD_SNI, "IP address literal"),
    (hello_for(b"0x7f000001"), BAD_SNI, "IP address literal"),
    (hello_for(b"evil.com"), SNI_MISMATCH, "not the CONNECT host"),
    (hello_for(b"example.com.evil.com"), SNI_MISMATCH, "not the CONNECT host"),
    (hello_for(b"www.example.com"), SNI_MISMATCH, "not the CONNECT host"),
    (hello_for(b"example.co"), SNI_MISMATCH, "not the CONNECT host"),
    (records(client_hello(BASIC_EXTENSIONS)), SNI_MISSING, "no server_name"),
    (records(client_hello(None)), SNI_MISSING, "no server_name"),
    (records(client_hello(BASIC_EXTENSIONS + sni(b"example.com") + sni(b"evil.com"))), BAD_CLIENTHELLO, "twice"),
    (records(client_hello(BASIC_EXTENSIONS + sni(b"example.com") + sni(b"example.com"))), BAD_CLIENTHELLO,
     "twice"),
])
def test_a_hostile_server_name_is_refused(data, rule, words):
    refusal = refused("example.com", data)
    assert refusal.rule == rule and words in refusal.message


def test_names_in_messages_are_escaped():
    refusal = refused("example.com", hello_for(b"\x1b[31mred\x1b[0m.example.com\x00"))
    assert "\\x1b[31mred" in refusal.message and "\x1b" not in refusal.message
    refusal = refused("example.com", hello_for(b"x" * 300))
    assert "(the first 80 of 300 bytes)" in refusal.message


@pytest.mark.parametrize("kind", sorted(ECH_EXTENSIONS))
def test_an_encrypted_client_hello_is_refused(kind):
    refusal = refused("example.com", hello_for(b"example.com", more=extension(kind, b"\x00\x01\x02")))
    assert refusal.rule == ECH and f"0x{kind:04x}" in refusal.message


# ---- records and framing ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("data", "words"), [
    (b"GET http://example.com/ HTTP/1.1\r\n", '"G"'),
    (b"SSH-2.0-OpenSSH_9.6\r\n", '"S"'),
    (b"\x80\x2e\x01\x03\x01\x00\x15", "SSLv2"),
    (b"\x15\x03\x03\x00\x02\x02\x28", "0x15"),  # an alert
    (b"\x14\x03\x03\x00\x01\x01", "0x14"),  # change_cipher_spec
    (b"\x17\x03\x03\x00\x05hello", "0x17"),  # application data
    (b"\x16\x02\x00\x00\x05hello", "version bytes 0200"),
    (b"\x16\x03\x04\x00\x05hello", "version bytes 0304"),
    (b"\x16\x03\x00\x00\x05hello", "version bytes 0300"),
])
def test_first_bytes_that_are_not_a_tls_handshake_record_are_not_tls(data, words):
    refusal = refused("example.com", data)
    assert refusal.rule == NOT_TLS and words in refusal.message
    assert refusal.received == data


def test_not_tls_is_known_from_the_first_byte_and_every_byte_fed_is_kept():
    reader = ClientHelloReader("example.com")
    result = reader.feed(b"P")
    assert isinstance(result, Refuse) and result.rule == NOT_TLS and result.received == b"P"


@pytest.mark.parametrize(("data", "words"), [
    (b"\x16\x03\x01\x00\x00", "zero-length handshake record"),
    (b"\x16\x03\x01\x40\x01" + bytes(0x4001), "over TLS's 16384"),
    (records(b"\x01\x00\x00\x10" + bytes(6)) + b"\x15\x03\x03\x00\x02\x02\x28", "alert record comes before"),
    (records(b"\x01\x00\x00\x10" + bytes(6)) + b"\x17\x03\x03\x00\x01x", "application_data record comes before"),
    (records(b"\x01\x00\x00\x10" + bytes(6)) + b"\x16\x03\x05", "version bytes 0305"),
    (records(handshake(b"\x03\x03" + bytes(34), message_type=2)), "type 2, not a ClientHello"),
    (records(client_hello(None, version=0x0300)), "legacy_version is 0x0300"),
    (records(client_hello(None, version=0x0304)), "legacy_version is 0x0304"),
    (records(client_hello(None, session_id=bytes(33))), "legacy_session_id is 33 bytes"),
    (records(client_hello(None, suites=b"\x13\x01\x13")), "odd count"),
    (records(client_hello(None, suites=b"")), "cipher_suites is 0 bytes"),
    (records(client_hello(None, compression=b"")), "legacy_compression_methods is 0 bytes"),
    (records(client_hello(None, compression=b"\x01")), "lacks null"),
    (records(client_hello(BASIC_EXTENSIONS + sni(b"example.com")) + b"\x01"), "1 more handshake bytes"),
    (records(handshake(client_hello(BASIC_EXTENSIONS + sni(b"example.com"))[4:] + b"\x00")), "1 bytes follow"),
    (records(handshake(client_hello(BASIC_EXTENSIONS)[4:-3])), "needs"),
    (records(client_hello(BASIC_EXTENSIONS + extension(0x000A, b"\x00\x02\x00\x1d"))), "0x000a twice"),
    (records(client_hello(BASIC_EXTENSIONS + extension(0x0029, b"") + sni(b"example.com"))), "pre_shared_key"),
])
def test_malformed_tls_is_a_bad_clienthello(data, words):
    refusal = refused("example.com", data)
    assert refusal.rule == BAD_CLIENTHELLO and words in refusal.message


def test_a_truncated_hello_waits_for_more():
    hello = python_hello("example.com")
    reader = ClientHelloReader("example.com")
    assert reader.feed(hello[:-1]) is None
    assert isinstance(reader.feed(hello[-1:]), Admit)


def test_a_hello_stating_more_than_the_limit_is_refused_from_its_header():
    refusal = refused("example.com", b"\x16\x03\x01\x00\x04\x01\x00\x40\x00")
    assert refusal.rule == CLIENTHELLO_TOO_LARGE
    assert EGRESS_CLIENTHELLO.name in refusal.message and EGRESS_CLIENTHELLO.how_to_raise in refusal.message


def test_records_adding_up_past_the_limit_are_refused():
    message = handshake_of(python_hello("example.com"))
    padded = client_hello(BASIC_EXTENSIONS + sni(b"example.com") + extension(0x0015, bytes(8000)))
    assert len(padded) < EGRESS_CLIENTHELLO.default
    stream = records(padded, [1] * len(padded))
    assert len(stream) > EGRESS_CLIENTHELLO_RECORDS.default
    refusal = refused("example.com", stream)
    assert refusal.rule == CLIENTHELLO_TOO_LARGE and EGRESS_CLIENTHELLO_RECORDS.name in refusal.message
    assert isinstance(verdict("example.com", records(message, [1] * len(message))), Admit)


def test_the_reader_gives_one_verdict():
    reader = ClientHelloReader("example.com")
    reader.feed(python_hello("example.com"))
    with pytest.raises(RuntimeError):
        reader.feed(b"x")
    with pytest.raises(RuntimeError):
        ClientHelloReader("example.com").expect_second_hello()


@pytest.mark.parametrize("connect_host", ["exämple.com", "a..b", "1.2.3", "a_b.com", ""])
def test_a_connect_host_no_target_parser_lets_through_is_a_caller_error(connect_host):
    with pytest.raises(ValueError):
        expected_server_name(connect_host)


# ---- the second hello, after a HelloRetryRequest ----------------------------------------------------------------

def _retry_transcript(name: str) -> tuple[bytes, bytes, bytes]:
    """A real TLS 1.3 exchange where the server asks for another key share: (hello, retry request, second hello)."""
    client = python_client(name)
    server_context_ = server_context(groups="secp384r1")
    server_context_.sni_callback = None
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context_.wrap_bio(incoming, outgoing, server_side=True)
    incoming.write(client.hello)
    with pytest.raises(ssl.SSLWantReadError):
        server.do_handshake()
    retry = outgoing.read()
    return client.hello, retry, client.answer(retry)


def test_the_second_hello_is_checked_against_the_same_host():
    hello, _retry, second = _retry_transcript("example.com")
    reader = ClientHelloReader("example.com")
    assert isinstance(reader.feed(hello), Admit)
    assert second.startswith(b"\x14\x03\x03\x00\x01\x01")  # change_cipher_spec, then the hello
    result = reader.expect_second_hello().feed(second)
    assert isinstance(result, Admit) and result.after_retry and result.forward == second
    with pytest.raises(RuntimeError):
        reader.expect_second_hello().expect_second_hello()


def test_a_second_hello_naming_another_server_is_refused():
    reader = ClientHelloReader("example.com")
    reader.feed(hello_for(b"example.com"))
    refusal = reader.expect_second_hello().feed(b"\x14\x03\x03\x00\x01\x01" + hello_for(b"evil.com"))
    assert isinstance(refusal, Refuse) and refusal.rule == SNI_MISMATCH and "second ClientHello" in refusal.message


@pytest.mark.parametrize(("before", "words"), [(b"\x14\x03\x03\x00\x01\x02", "not the single byte"),
                                               (b"\x14\x03\x03\x00\x02\x01\x01", "not the single byte"),
                                               (b"\x17\x03\x03\x00\x03abc", "application_data record"),
                                               (b"\x15\x03\x03\x00\x02\x01\x00", "alert record")])
def test_only_change_cipher_spec_may_come_before_the_second_hello(before, words):
    reader = ClientHelloReader("example.com")
    reader.feed(hello_for(b"example.com"))
    refusal = reader.expect_second_hello().feed(before + hello_for(b"example.com"))
    assert isinstance(refusal, Refuse) and refusal.rule == BAD_CLIENTHELLO and words in refusal.message


def test_early_data_may_come_before_the_second_hello_when_the_first_offered_it():
    reader = ClientHelloReader("example.com")
    first = reader.feed(hello_for(b"example.com", more=extension(0x002A, b"")))
    assert isinstance(first, Admit) and first.offers_early_data
    stream = b"\x14\x03\x03\x00\x01\x01\x17\x03\x03\x00\x03abc" + hello_for(b"example.com")
    result = reader.expect_second_hello().feed(stream)
    assert isinstance(result, Admit) and result.forward == stream


def test_the_tls_rules_in_the_docs_are_the_ones_the_code_gives():
    text = (Path(__file__).resolve().parents[1] / "docs" / "egress.md").read_text()
    table = text.split("<!-- tls-rules:begin -->\n", 1)[1].split("<!-- tls-rules:end -->", 1)[0]
    assert table == tls_verdicts.markdown_table(), "regenerate with: python -m tkbox_daemon.egress.tls_verdicts"
    for rule in tls_verdicts.RULE_HINTS:
        assert f"`{rule}`" in text.split("## TLS: what the proxy reads before forwarding", 1)[1]
