"""Properties of the egress target parser, with the address check the proxy runs after it.

(a) Any textual form of a blocked address (dotted quad, octal, hex, dotless and short forms, full-width digits,
    percent-encoded or Unicode dots, trailing dots; any RFC 4291 spelling of a blocked IPv6 address, bracketed or
    not, with zone ids; a blocked IPv4 address inside every IPv6 embedding) is refused wherever the parser reads
    a host: a CONNECT target, an absolute URL and its Host header, a decision url.  Nothing in the pipeline
    consults an allowlist, so no allowlist can admit one.
(b) Text accepted as an IP literal is checked as exactly that literal: an accepted IPv4 text is the canonical
    dotted quad of the address, an accepted IPv6 text denotes the address ``ipaddress`` reads; the parsed
    address's own text reads back as the same address, with the same ``classify`` answer and decision url.
(c) An accepted name is lower-case ASCII of at most 253 characters in valid labels, reads back unchanged, and
    is the host ``urllib.parse`` and ``yarl`` find in the same URL, with the same port and path.  A refusal's
    message is printable ASCII whatever the box sent.
"""

from __future__ import annotations

import urllib.parse
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest
import yarl
from hypothesis import event, given
from hypothesis import strategies as st

from tkbox_daemon.egress.embeddings import EMBEDDINGS, embed
from tkbox_daemon.egress.hostnames import dotted_quad
from tkbox_daemon.egress.ranges import SPECIAL_RANGES, classify
from tkbox_daemon.egress.refusals import EgressRefused
from tkbox_daemon.egress.target import Target, parse_absolute, parse_connect, parse_decision_url

REFUSED = [entry.network for entry in SPECIAL_RANGES if entry.refused]


@st.composite
def blocked_address(draw: st.DrawFn, version: int | None = None) -> IPv4Address | IPv6Address:
    networks = [network for network in REFUSED if version in (None, network.version)]
    network = draw(st.sampled_from(networks))
    offset = draw(st.integers(0, network.num_addresses - 1) | st.sampled_from([0, network.num_addresses - 1]))
    return network[offset]


def _number(value: int, draw: st.DrawFn) -> str:
    """``value`` as inet_aton reads a number: decimal, octal (leading 0) or hex (0x, either case)."""
    style = draw(st.sampled_from(["dec", "oct", "hex", "HEX", "zero-padded"]))
    if style == "oct":
        return "0" + format(value, "o")
    if style in ("hex", "HEX"):
        text = format(value, "x")
        return ("0x" if style == "hex" else "0X") + (text.upper() if draw(st.booleans()) else text)
    if style == "zero-padded":
        return "0" * draw(st.integers(1, 3)) + str(value)
    return str(value)


@st.composite
def ipv4_spelling(draw: st.DrawFn, address: IPv4Address) -> str:
    """One of the texts some reader takes for ``address``."""
    octets = list(address.packed)
    value = int(address)
    parts_count = draw(st.sampled_from([4, 4, 3, 2, 1]))
    if parts_count == 4:
        parts = [_number(octet, draw) for octet in octets]
    elif parts_count == 3:
        parts = [_number(octets[0], draw), _number(octets[1], draw), _number(value & 0xFFFF, draw)]
    elif parts_count == 2:
        parts = [_number(octets[0], draw), _number(value & 0xFFFFFF, draw)]
    else:
        parts = [_number(value, draw)]
    separator = draw(st.sampled_from([".", ".", ".", "%2e", "%2E", "\u3002", "\uff0e", "\uff61"]))
    text = separator.join(parts)
    if draw(st.booleans()):
        text = text.translate(str.maketrans("0123456789", "０１２３４５６７８９"))
    return text + draw(st.sampled_from(["", "", ".", ".."]))


@st.composite
def ipv6_text(draw: st.DrawFn, address: IPv6Address) -> str:
    """A valid RFC 4291 text for ``address``: any zero run compressed, any padding and case, maybe a dotted tail."""
    groups = [int.from_bytes(address.packed[i:i + 2], "big") for i in range(0, 16, 2)]
    dotted = draw(st.booleans())
    shown = [format(group, "x").zfill(draw(st.integers(1, 4))) for group in groups]
    shown = [text.upper() if draw(st.booleans()) else text for text in shown]
    if dotted:
        shown[6:8] = [str(IPv4Address(address.packed[12:]))]
    zero_runs = [(start, end) for start in range(len(shown)) for end in range(start + 1, len(shown) + 1)
                 if all(groups[i] == 0 for i in range(start, min(end, 6) if dotted else end))
                 and not (dotted and end > 6)]
    if zero_runs and draw(st.booleans()):
        start, end = draw(st.sampled_from(zero_runs))
        return ":".join(shown[:start]) + "::" + ":".join(shown[end:])
    return ":".join(shown)


@st.composite
def ipv6_spelling(draw: st.DrawFn, address: IPv6Address) -> str:
    text = draw(ipv6_text(address))
    form = draw(st.sampled_from(["bracketed", "bracketed", "bare", "zone", "encoded zone", "double"]))
    return {"bracketed": f"[{text}]", "bare": text, "zone": f"[{text}%eth0]", "encoded zone": f"[{text}%25lo]",
            "double": f"[[{text}]]"}[form]


@st.composite
def blocked_host_text(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["ipv4", "ipv6", "embedded"]))
    if kind == "ipv4":
        return draw(ipv4_spelling(draw(blocked_address(4))))
    if kind == "ipv6":
        return draw(ipv6_spelling(draw(blocked_address(6))))
    return draw(ipv6_spelling(embed(draw(blocked_address(4)), draw(st.sampled_from(EMBEDDINGS)))))


def admit(context: str, host_text: str) -> Target:
    """What the proxy does with ``host_text`` in ``context``: parse, then check an IP literal as written."""
    if context == "connect":
        target = parse_connect(f"{host_text}:443")
    elif context == "url":
        target = parse_absolute(f"http://{host_text}/x", [host_text])
    elif context == "url with port":
        target = parse_absolute(f"http://{host_text}:8080/x?y", [f"{host_text}:8080"])
    else:
        target = parse_decision_url(f"https://{host_text}:443")
    if not isinstance(target.host, str):
        refusal = classify(target.host)
        if refusal is not None:
            raise refusal.error()
    return target


CONTEXTS = st.sampled_from(["connect", "url", "url with port", "decision"])


@given(host_text=blocked_host_text(), context=CONTEXTS)
def test_no_spelling_of_a_blocked_address_is_admitted_anywhere_a_host_is_read(host_text, context):
    with pytest.raises(EgressRefused):
        admit(context, host_text)


@given(value=st.integers(0, 2**32 - 1), data=st.data())
def test_an_accepted_ipv4_text_is_the_canonical_dotted_quad(value, data):
    address = IPv4Address(value)
    text = data.draw(ipv4_spelling(address))
    try:
        target = parse_connect(f"{text}:443")
    except EgressRefused:
        event("refused")
        return
    event("accepted")
    assert text == str(address) and target.host == address


@given(value=st.integers(0, 2**32 - 1) | st.integers(0, 2**128 - 1), data=st.data())
def test_an_accepted_ip_literal_is_checked_as_that_literal_and_reads_back_the_same(value, data):
    address = ip_address(value)
    text = str(address) if address.version == 4 else f"[{data.draw(ipv6_text(address))}]"
    target = parse_connect(f"{text}:443")
    assert target.host == address == (dotted_quad(text) or ip_address(text.strip("[]")))
    again = parse_connect(target.authority)
    assert again == target
    decided = parse_decision_url(target.decision_url(tls=True))
    assert decided.host == address and decided.decision_url() == target.decision_url(tls=True)
    first, second = classify(target.host), classify(again.host)
    assert (first and (first.rule, first.network)) == (second and (second.rule, second.network))


PLAIN_LABELS = st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,8}[a-zA-Z0-9])?", fullmatch=True) | st.text(
    alphabet="abxyzAZ09-_", min_size=1, max_size=10)
LABELS = st.one_of(PLAIN_LABELS, PLAIN_LABELS, PLAIN_LABELS, st.sampled_from(
    ["xn--bcher-kva", "bücher", "faß", "BÜCHER", "аpple", "ｅｘａｍｐｌｅ", "a_b", "xn--zz", "r3---sn", "0x1f", "123",
     "e\u0301", "١٢٣", "βόλος", "ελλάδα", "x" * 64, "local", "localhost", "internal"]))
SEPARATORS = st.sampled_from(["."] * 60 + ["..", "。", "%2e", "．", "\\.", "@"])
HOSTILE = st.sampled_from(["@", "\\", " ", "\t", "\u200b", "\u00ad", ":", "[", "]", "#", "/", "?", "%", "\x00",
                           "\r\n", "%25", "。"])


@st.composite
def host_like(draw: st.DrawFn) -> str:
    """Mostly plausible names: labels joined by dots, now and then a hostile separator or character."""
    labels = draw(st.lists(LABELS, min_size=1, max_size=4))
    text = labels[0]
    for label in labels[1:]:
        text += draw(SEPARATORS) + label
    text += draw(st.sampled_from(["", "", "", ".", ".."]))
    if draw(st.integers(0, 7)) == 0:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(HOSTILE) + text[at:]
    return text


VALID_NAMES = st.lists(st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,6}[a-zA-Z0-9])?", fullmatch=True), min_size=2,
                       max_size=4).map(".".join)
ADDRESS_TEXTS = st.integers(0, 2**32 - 1).map(lambda value: str(IPv4Address(value))) | st.integers(
    0, 2**128 - 1).map(lambda value: f"[{IPv6Address(value)}]")


@given(text=host_like() | VALID_NAMES | st.text(max_size=40), context=CONTEXTS)
def test_an_accepted_name_is_lower_case_ascii_in_valid_labels_and_reads_back_unchanged(text, context):
    try:
        target = admit(context, text)
    except EgressRefused as refused:
        event(f"refused: {refused.rule}")
        message = str(refused)  # tkbox's own text may cite "RFC 6761 §6.3"; the box's is escaped to ASCII
        assert message.isprintable() and set(message.encode("ascii", "ignore").decode()) | {"§"} >= set(message)
        return
    if not isinstance(target.host, str):
        event("accepted: an address")
        return
    event("accepted: a name")
    name = target.host
    assert name.isascii() and name == name.lower() and len(name) <= 253
    labels = name.split(".")
    assert len(labels) >= 2 and all(0 < len(label) <= 63 for label in labels)
    assert all(set(label) <= set("abcdefghijklmnopqrstuvwxyz0123456789-") for label in labels)
    assert not any(label.startswith("-") or label.endswith("-") for label in labels)
    assert not labels[-1].isdigit()
    assert parse_connect(f"{name}:443").host == name
    assert parse_decision_url(f"https://{name}:443").host == name


PORTS = st.sampled_from(["", "", "", ":80", ":8080", ":65535"] + [":0", ":65536", ":080", ":+80", ":", ":80:80",
                                                                  ": 80"])
PATH_PIECES = st.sampled_from(list("/ab~;=,@:?!$&'()*+-._") * 3 + ["%2F", "%7e", "%zz", "%2e", ".", "..", "#", "\\",
                                                                    " ", "[", "]", "é", "<"])
PATHS = st.one_of(st.just(""), st.lists(PATH_PIECES, max_size=12).map(lambda pieces: "/" + "".join(pieces)),
                  st.lists(PATH_PIECES, max_size=6).map("".join))


@given(host=host_like() | VALID_NAMES | VALID_NAMES | ADDRESS_TEXTS, port=PORTS, path=PATHS)
def test_an_accepted_url_is_read_alike_by_urllib_and_yarl(host, port, path):
    url = f"http://{host}{port}{path}"
    try:  # the URL alone: whether the address may be reached is not the question here
        target = parse_absolute(url, [f"{host}{port}"])
    except EgressRefused:
        event("refused")
        return
    event("accepted")
    split = urllib.parse.urlsplit(url)
    parsed = yarl.URL(url)
    assert (split.port or 80) == target.port == parsed.port
    path_and_query = (split.path or "/") + (f"?{split.query}" if "?" in url else "")
    assert path_and_query == target.path
    if isinstance(target.host, str):
        if host.isascii():
            assert split.hostname.rstrip(".") == target.host
        assert parsed.raw_host.rstrip(".") == target.host
    else:
        assert ip_address(split.hostname) == target.host == ip_address(parsed.raw_host)
