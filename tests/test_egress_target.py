"""The egress target parser's contract beyond the hostile table: the decision url it writes and reads back, what
its refusals say, and the bounds it keeps."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address
from pathlib import Path

import pytest

from tkbox_daemon.egress import refusals
from tkbox_daemon.egress.hostnames import parse_host, parse_ip_text
from tkbox_daemon.egress.refusals import RULES, EgressRefused
from tkbox_daemon.egress.target import Target, ipv6_text, parse_absolute, parse_connect, parse_decision_url
from tkbox_daemon.limits import EGRESS_TARGET_LENGTH

ROOT = Path(__file__).resolve().parents[1]


def test_a_connect_target_is_decided_as_https_or_tcp_and_reads_back_the_same():
    target = parse_connect(b"Example.COM.:8443")
    assert target == Target("connect", "example.com", 8443)
    assert target.decision_url(tls=True) == "https://example.com:8443"
    assert target.decision_url(tls=False) == "tcp://example.com:8443"
    with pytest.raises(ValueError, match="tls="):
        target.decision_url()
    for url in (target.decision_url(tls=True), target.decision_url(tls=False)):
        again = parse_decision_url(url)
        assert (again.host, again.port, again.decision_url()) == (target.host, target.port, url)


def test_an_absolute_form_target_keeps_its_path_and_is_decided_as_http():
    target = parse_absolute(b"http://[2606:4700::1]:8080/simple/pip/?x=1", [b"[2606:4700:0::1]:8080"])
    assert target == Target("http", IPv6Address("2606:4700::1"), 8080, "/simple/pip/?x=1")
    assert target.decision_url() == "http://[2606:4700::1]:8080"
    with pytest.raises(ValueError):
        target.decision_url(tls=True)


def test_ipv4_mapped_text_is_the_same_on_every_python():
    assert ipv6_text(IPv6Address("::ffff:1.2.3.4")) == "::ffff:1.2.3.4"
    assert Target("tcp", IPv6Address("::ffff:102:304"), 1).decision_url() == "tcp://[::ffff:1.2.3.4]:1"
    assert parse_decision_url("tcp://[::ffff:1.2.3.4]:1").host == IPv6Address("::ffff:1.2.3.4")


def test_a_refusal_names_its_rule_and_the_advice_and_escapes_what_the_box_sent():
    with pytest.raises(EgressRefused) as refused:
        parse_connect("evil\x1b[2J.com:443")
    message = str(refused.value)
    assert refused.value.rule == "target-control"
    assert "\x1b" not in message and "\\x1b" in message
    assert message.endswith(f"{RULES['target-control']} (rule target-control)")


def test_long_box_text_is_cut_short_in_messages():
    with pytest.raises(EgressRefused) as refused:
        parse_connect("a" * 500 + "_.com:443")
    assert refused.value.rule == "host-chars"
    assert len(str(refused.value)) < 400 and "(505 characters)" in str(refused.value)


def test_targets_over_the_length_limit_or_not_utf8_are_refused_before_they_are_read():
    too_long = b"a." * (EGRESS_TARGET_LENGTH.default // 2) + b"com:443"
    for reader in (lambda text: parse_connect(text), lambda text: parse_absolute(b"http://" + text + b"/", [b"a"])):
        with pytest.raises(EgressRefused) as refused:
            reader(too_long)
        assert refused.value.rule == "target-length" and EGRESS_TARGET_LENGTH.name in str(refused.value)
    with pytest.raises(EgressRefused) as refused:
        parse_connect(b"caf\xe9.com:443")
    assert refused.value.rule == "target-encoding"


def test_host_headers_must_be_a_list_of_values():
    with pytest.raises(TypeError):
        parse_absolute("http://example.com/", "example.com")  # type: ignore[arg-type]


def test_bare_address_text_is_read_strictly():
    assert parse_ip_text("93.184.216.34") == IPv4Address("93.184.216.34")
    assert parse_ip_text("2606:4700::1") == IPv6Address("2606:4700::1")
    for text, rule in (("0x5db8d822", "ipv4-form"), ("fe80::1%eth0", "ipv6-zone"), ("[::1]", "ipv6-form"),
                       ("93.184.216.034", "ipv4-form"), ("1" * 60, "ipv6-form")):
        with pytest.raises(EgressRefused) as refused:
            parse_ip_text(text)
        assert refused.value.rule == rule


def test_parse_host_reads_its_own_output_back_unchanged():
    for text in ("Bücher.DE", "xn--bcher-kva.de.", "[2606:4700:0:0::1]", "8.8.8.8", "r3---sn-x.example.com"):
        host = parse_host(text)
        shown_host = f"[{ipv6_text(host)}]" if isinstance(host, IPv6Address) else str(host)
        assert parse_host(shown_host) == host


def test_an_unknown_rule_is_a_programming_error():
    with pytest.raises(KeyError):
        EgressRefused("no-such-rule", "x")


def test_the_rules_table_in_the_docs_is_the_one_the_code_uses():
    text = (ROOT / "docs" / "egress.md").read_text()
    table = text.split("<!-- egress-rules:begin -->\n", 1)[1].split("<!-- egress-rules:end -->", 1)[0]
    assert table == refusals.markdown_table(), "regenerate with: python -m tkbox_daemon.egress.refusals"
