"""Properties of ``classify`` and the host-address cache.

(a) A refused IPv4 address stays refused inside every IPv6 embedding (mapped, compatible, translated, NAT64 in
    each layout, 6to4, Teredo server and obfuscated client), read from its text or built directly; through the
    NAT64 well-known prefix, which is not refused itself, an IPv4 address is refused exactly when it is refused
    bare.
(b) tkbox is never more permissive than Python: an address ``classify`` lets through is one
    ``ipaddress.is_global`` calls global (the converse fails on purpose; tests/test_egress_ranges.py lists where).
(c) An operator's ``--egress-block`` range and the host's own addresses refuse every address in them, bare or
    embedded, whatever else the table says; an address outside them gets the answer it gets without them.
(d) ``embedded_ipv4`` agrees with what Python's ``ipaddress`` reads for mapped, 6to4 and Teredo addresses.
(e) The host-address cache reads at most once per 5 seconds of its clock and never answers with a copy older
    than that; a failed read is never kept.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, ip_address, ip_network

from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.egress.embeddings import EMBEDDINGS, embed, embedded_ipv4
from tkbox_daemon.egress.hostaddrs import HostAddresses, HostAddressesUnreadable
from tkbox_daemon.egress.ranges import SPECIAL_RANGES, classify
from tkbox_daemon.egress.target import Target, parse_connect, parse_decision_url
from tkbox_daemon.limits import EGRESS_HOST_ADDRESSES_AGE

REFUSED_V4 = [entry.network for entry in SPECIAL_RANGES if entry.refused and entry.network.version == 4]
IPV4 = st.integers(0, 2**32 - 1).map(IPv4Address)
IPV6 = st.integers(0, 2**128 - 1).map(IPv6Address)


@st.composite
def refused_ipv4(draw: st.DrawFn) -> IPv4Address:
    network = draw(st.sampled_from(REFUSED_V4))
    return network[draw(st.integers(0, network.num_addresses - 1))]


@given(inner=refused_ipv4() | IPV4.filter(lambda address: classify(address) is not None),
       how=st.sampled_from(EMBEDDINGS))
def test_a_refused_ipv4_address_is_refused_inside_every_embedding(inner, how):
    outer = embed(inner, how)
    assert classify(outer) is not None
    assert classify(parse_connect(f"[{outer}]:443").host) is not None
    assert classify(parse_decision_url(Target("tcp", outer, 22).decision_url()).host) is not None


@given(inner=IPV4 | refused_ipv4())
def test_through_the_nat64_prefix_an_address_is_refused_exactly_when_it_is_refused_bare(inner):
    outer = embed(inner, "NAT64 (64:ff9b::/96)")
    assert (classify(outer) is None) == (classify(inner) is None)


@given(address=IPV4 | IPV6 | refused_ipv4())
def test_what_classify_lets_through_python_calls_global(address):
    if classify(address) is None:
        assert address.is_global


@st.composite
def network_and_member(draw: st.DrawFn) -> tuple:
    version = draw(st.sampled_from([4, 6]))
    bits = 32 if version == 4 else 128
    address = ip_address(draw(st.integers(0, 2**bits - 1))) if version == 4 else \
        IPv6Address(draw(st.integers(0, 2**bits - 1)))
    network = ip_network(f"{address}/{draw(st.integers(bits // 2, bits))}", strict=False)
    member = network[draw(st.integers(0, network.num_addresses - 1))]
    return network, member


@given(pair=network_and_member(), how=st.sampled_from([None, *EMBEDDINGS]), as_host=st.booleans(),
       other=IPV4 | IPV6)
def test_operator_and_host_ranges_refuse_everything_in_them_and_nothing_else(pair, how, as_host, other):
    network, member = pair
    if how is not None and network.version == 4:
        member = embed(member, how)
    option = {"host_addresses": [network]} if as_host else {"extra_blocked": [network]}
    assert classify(member, **option) is not None
    bare = classify(other)
    embedded = [found.address for found in embedded_ipv4(other)] if isinstance(other, IPv6Address) else []
    inside = any(candidate in network for candidate in [other, *embedded] if candidate.version == network.version)
    if not inside:
        with_option = classify(other, **option)
        assert (bare and bare.rule) == (with_option and with_option.rule)


@given(address=IPV6)
def test_embedded_ipv4_agrees_with_python(address):
    found = {how: inner for inner, how in ((item.address, item.how) for item in embedded_ipv4(address))}
    if address.ipv4_mapped is not None:
        assert found == {"IPv4-mapped": address.ipv4_mapped}
    if address.sixtofour is not None:
        assert found == {"6to4": address.sixtofour}
    if address.teredo is not None:
        server, client = address.teredo
        assert found == {"Teredo server": server, "Teredo client (obfuscated)": client}


@given(steps=st.lists(st.floats(0, 12, allow_nan=False) | st.sampled_from([4.999, 5.0, 5.001]), max_size=40),
       failures=st.sets(st.integers(0, 40)))
def test_the_host_address_cache_reads_at_most_every_five_seconds(steps, failures):
    now = [0.0]
    reads: list[float] = []

    def reader() -> frozenset:
        reads.append(now[0])
        if len(reads) - 1 in failures:
            raise HostAddressesUnreadable("unreadable")
        return frozenset({IPv4Network(f"198.51.100.{len(reads) % 256}/32")})

    cache = HostAddresses(reader, lambda: now[0])
    served_from: float | None = None
    for step in [0.0, *steps]:
        now[0] += step
        before = len(reads)
        try:
            cache.current()
        except HostAddressesUnreadable:
            assert len(reads) == before + 1, "a failure comes from a read, never from a kept copy"
            served_from = None
            continue
        if len(reads) > before:
            served_from = reads[-1]
        assert served_from is not None and 0 <= now[0] - served_from < EGRESS_HOST_ADDRESSES_AGE.default
    for index in range(1, len(reads)):
        if index - 1 not in failures:  # after a good read, the next comes only once the copy is 5 s old
            assert reads[index] - reads[index - 1] >= EGRESS_HOST_ADDRESSES_AGE.default
