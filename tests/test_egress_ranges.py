"""The special-address table and ``classify``: where tkbox parts from ``ipaddress.is_global``, how embedded
IPv4 addresses are found, the operator's and the host's own ranges, and the 5-second host-address cache."""

from __future__ import annotations

import subprocess
import sys
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from pathlib import Path

import pytest

from tkbox_daemon.egress import ranges
from tkbox_daemon.egress.embeddings import EMBEDDINGS, embed, embedded_ipv4
from tkbox_daemon.egress.hostaddrs import (
    HostAddresses,
    HostAddressesUnreadable,
    parse_fib_trie,
    parse_if_inet6,
    read_host_addresses,
)
from tkbox_daemon.egress.ranges import SPECIAL_RANGES, classify, special_range
from tkbox_daemon.egress.refusals import EgressRefused
from tkbox_daemon.egress.resolved import check_address, check_resolved

ROOT = Path(__file__).resolve().parents[1]

# Addresses a box must never reach that Python 3.11's ipaddress calls global: all of them in 3.11.7 (pyenv), the
# rest but 192.0.0.192, 64:ff9b:1::/48 and 6to4 in Debian 12's 3.11.2, which has later fixes backported.
GLOBAL_TO_PYTHON_BUT_REFUSED = [
    "168.63.129.16",  # Azure WireServer
    "224.0.0.1",  # multicast
    "233.252.0.1",  # multicast documentation
    "192.88.99.1",  # 6to4 relay anycast
    "192.0.0.9",  # PCP anycast (IETF protocol assignments)
    "192.0.0.192",  # Oracle metadata
    "::127.0.0.1",  # IPv4-compatible loopback
    "::ffff:0:a9fe:a9fe",  # IPv4-translated metadata
    "64:ff9b::a9fe:a9fe",  # NAT64 of metadata
    "64:ff9b::7f00:1",  # NAT64 of loopback
    "64:ff9b:1::1",  # NAT64 local-use
    "2002:a9fe:a9fe::",  # 6to4 of metadata
    "2002:808:808::",  # 6to4 at all
    "3fff::1",  # documentation (RFC 9637)
    "5f00::1",  # SRv6 SIDs
    "4000::1",  # outside global unicast
    "fec0::1",  # deprecated site-local
]


@pytest.mark.parametrize("text", GLOBAL_TO_PYTHON_BUT_REFUSED)
def test_where_the_table_is_stricter_than_ipaddress_is_global(text):
    """Refused whatever this Python's ``is_global`` says: the table, not the standard library, decides."""
    assert classify(ip_address(text)) is not None


def test_the_examples_still_show_where_python_differs():
    """Most of the examples are global to every Python 3.11 tkbox runs on (if none were, they would show nothing)."""
    global_here = [text for text in GLOBAL_TO_PYTHON_BUT_REFUSED if ip_address(text).is_global]
    assert len(global_here) >= len(GLOBAL_TO_PYTHON_BUT_REFUSED) - 4, global_here


def test_the_table_is_well_formed_and_only_the_nat64_prefix_is_open_inside_a_refused_range():
    assert len({entry.network for entry in SPECIAL_RANGES}) == len(SPECIAL_RANGES)
    for entry in SPECIAL_RANGES:
        assert entry.name and entry.source and entry.rule in ("address-special", "address-metadata")
        assert entry.refused or entry.rule == "address-special"
    open_inside_refused = {entry.network for entry in SPECIAL_RANGES if not entry.refused and any(
        other.refused and other.network.version == entry.network.version and entry.network.subnet_of(other.network)
        for other in SPECIAL_RANGES)}
    assert open_inside_refused == {IPv6Network("64:ff9b::/96")}


def test_every_ipv6_address_outside_global_unicast_is_refused_but_the_nat64_prefix():
    # The first and last address of each /8 (and both ends of the NAT64 prefix, which is open).
    for top in range(256):
        for address in (IPv6Address(top << 120), IPv6Address(((top + 1) << 120) - 1)):
            inside_global_unicast = address in IPv6Network("2000::/3")
            assert (classify(address) is None) <= inside_global_unicast, address
    assert classify(IPv6Address("64:ff9b::808:808")) is None


def test_cloud_metadata_addresses_are_refused_by_their_own_rule_and_name():
    for text in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200", "168.63.129.16",
                 "192.0.0.192", "fd20:ce::254", "169.254.170.23", "fe80::a9fe:a9fe"):
        refusal = classify(ip_address(text))
        assert refusal is not None and refusal.rule == "address-metadata", text
        assert refusal.network == ip_network(text)


def test_the_most_specific_entry_decides():
    assert special_range(IPv4Address("192.0.0.9")).network == IPv4Network("192.0.0.0/24")
    assert special_range(IPv4Address("192.0.0.170")).name == "NAT64/DNS64 discovery"
    assert special_range(IPv6Address("100::1")).name == "discard-only"
    assert special_range(IPv4Address("8.8.8.8")) is None
    assert not special_range(IPv4Address("192.31.196.1")).refused  # AS112: special, but public


def test_an_embedded_address_is_named_in_the_refusal():
    refusal = classify(IPv6Address("::ffff:169.254.169.254"))
    assert (refusal.rule, refusal.address, refusal.how) == ("address-metadata", IPv4Address("169.254.169.254"),
                                                            "IPv4-mapped")
    assert "carries 169.254.169.254 (IPv4-mapped)" in refusal.what
    teredo = IPv6Address("2001:0:4136:e378:8000:63bf:3fff:fdd2")  # RFC 4380's example: client 192.0.2.45
    assert [(found.address, found.how) for found in embedded_ipv4(teredo)] == [
        (IPv4Address("65.54.227.120"), "Teredo server"), (IPv4Address("192.0.2.45"), "Teredo client (obfuscated)")]


@pytest.mark.parametrize("how", EMBEDDINGS)
def test_each_embedding_is_found_where_embed_puts_it(how):
    inner = IPv4Address("93.184.216.34")
    outer = embed(inner, how)
    assert (inner, how) in [(found.address, found.how) for found in embedded_ipv4(outer)]


def test_python_reads_the_embeddings_it_knows_the_same_way():
    inner = IPv4Address("93.184.216.34")
    assert embed(inner, "IPv4-mapped").ipv4_mapped == inner
    assert embed(inner, "6to4").sixtofour == inner
    assert embed(inner, "Teredo client (obfuscated)").teredo[1] == inner
    assert embed(inner, "Teredo server").teredo[0] == inner


def test_zone_scoped_addresses_are_refused():
    refusal = classify(IPv6Address("2606:4700::1%eth0"))
    assert refusal is not None and refusal.rule == "address-zone"


def test_operator_blocks_and_host_addresses_refuse_embedded_forms_too():
    public = IPv4Address("93.184.216.34")
    for outer in (public, embed(public, "NAT64 (64:ff9b::/96)")):
        assert classify(outer) is None
        assert classify(outer, extra_blocked=[IPv4Network("93.184.216.0/24")]).rule == "address-operator-block"
        assert classify(outer, host_addresses=[public]).rule == "address-host"
        assert classify(outer, host_addresses=[IPv4Network("93.184.0.0/16")]).rule == "address-host"
    with pytest.raises(TypeError):
        classify("93.184.216.34")  # type: ignore[arg-type]


def test_check_resolved_refuses_when_any_address_is_refused_and_dials_the_first_otherwise():
    name = "pypi.example.com"
    assert check_resolved(name, ["2606:4700::1", IPv4Address("93.184.216.34")]) == IPv6Address("2606:4700::1")
    with pytest.raises(EgressRefused) as refused:
        check_resolved(name, ["93.184.216.34", "93.184.216.35"], host_addresses=[IPv4Address("93.184.216.35")])
    assert refused.value.rule == "address-host" and name in str(refused.value)
    assert check_address(IPv4Address("8.8.8.8")) == IPv4Address("8.8.8.8")
    with pytest.raises(EgressRefused):
        check_address(IPv4Address("8.8.8.8"), extra_blocked=[IPv4Network("8.8.8.0/24")])


FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 198.51.100.0/24 2 0 2
        |-- 198.51.100.0
           /24 link UNICAST
        |-- 198.51.100.7
           /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 203.0.113.0
        /28 host LOCAL
"""
IF_INET6 = """00000000000000000000000000000001 01 80 10 80       lo
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
2a0011000000000100000000000000ff 05 40 00 00     eth1
"""


def test_the_host_addresses_are_the_local_routes_and_interface_addresses():
    assert parse_fib_trie(FIB_TRIE) == {IPv4Network("127.0.0.0/8"), IPv4Network("127.0.0.1/32"),
                                        IPv4Network("198.51.100.7/32"), IPv4Network("203.0.113.0/28")}
    assert parse_if_inet6(IF_INET6) == {IPv6Network("::1/128"), IPv6Network("fe80::fc:ff:fe00:1/128"),
                                        IPv6Network("2a00:1100:0:1::ff/128")}
    with pytest.raises(HostAddressesUnreadable):
        parse_if_inet6("not an address line\n")


def test_reading_this_machine_finds_its_loopback(tmp_path):
    addresses = read_host_addresses()
    assert any(IPv4Address("127.0.0.1") in network for network in addresses if network.version == 4)
    missing = tmp_path / "absent"
    assert read_host_addresses(if_inet6=missing) >= {net for net in addresses if net.version == 4}
    with pytest.raises(HostAddressesUnreadable):
        read_host_addresses(fib_trie=missing)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_host_addresses_are_read_at_most_every_five_seconds_and_failures_are_not_kept():
    clock, reads = FakeClock(), []
    answers = [frozenset({IPv4Network("198.51.100.7/32")}), frozenset({IPv4Network("198.51.100.8/32")})]

    def reader() -> frozenset:
        reads.append(clock.now)
        if isinstance(answers[0], Exception):
            raise answers.pop(0)
        return answers.pop(0) if len(answers) > 1 else answers[0]

    cache = HostAddresses(reader, clock)
    first = cache.current()
    clock.now += 4.9
    assert cache.current() is first and reads == [100.0]
    clock.now += 0.1
    assert cache.current() == {IPv4Network("198.51.100.8/32")} and reads == [100.0, 105.0]
    answers.insert(0, HostAddressesUnreadable("gone"))  # type: ignore[arg-type]
    clock.now += 5
    with pytest.raises(HostAddressesUnreadable):
        cache.current()
    assert cache.current() == {IPv4Network("198.51.100.8/32")} and len(reads) == 4


def test_the_special_ranges_table_in_the_docs_is_the_one_the_code_uses():
    text = (ROOT / "docs" / "egress.md").read_text()
    assert text.startswith("# The network door\n") and "\n## Special address ranges\n" in text
    table = text.split("<!-- special-ranges:begin -->\n", 1)[1].split("<!-- special-ranges:end -->", 1)[0]
    assert table == ranges.markdown_table(), "regenerate with: python -m tkbox_daemon.egress.ranges"


def test_the_module_prints_the_table():
    result = subprocess.run([sys.executable, "-m", "tkbox_daemon.egress.ranges"], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout == ranges.markdown_table()
