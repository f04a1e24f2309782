"""The addresses a box never reaches: the IANA special-purpose ranges, cloud metadata addresses, the host's own
addresses and the operator's ``--egress-block`` ranges, checked after unwrapping the IPv4 address inside IPv6
transition forms (``embeddings``).

The table is tkbox's own, from the IANA IPv4 and IPv6 Special-Purpose Address Registries and the IPv6 Address
Space registry, because Python 3.11's ``ipaddress.is_global`` calls several special ranges global (multicast
224.0.0.1, 6to4 relays, 192.0.0.0/24 anycast, Azure's 168.63.129.16, 3fff::/20, ``::127.0.0.1``, NAT64 forms of
private addresses).  The most specific entry holding an address decides, as a route would; the only entry that
is not refused inside a refused one is the NAT64 well-known prefix, whose embedded IPv4 address is checked
instead.  Every IPv6 address outside 2000::/3 (global unicast) is refused, except that prefix.

``python -m tkbox_daemon.egress.ranges`` prints the table for docs/egress.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network

from .embeddings import embedded_ipv4
from .refusals import EgressRefused

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

IANA_V4 = "IANA IPv4 special-purpose registry"
IANA_V6 = "IANA IPv6 special-purpose registry"
IANA_SPACE = "IANA IPv6 address space registry"
RESERVED = "reserved by the IETF (outside 2000::/3, global unicast)"


@dataclass(frozen=True)
class SpecialRange:
    """One entry of the table: a network, what it is, where that is written, and whether a box may reach it."""

    network: IPNetwork
    name: str
    source: str
    refused: bool = True
    rule: str = "address-special"  # or "address-metadata"


def _entry(network: str, name: str, source: str, *, refused: bool = True) -> SpecialRange:
    return SpecialRange(ip_network(network), name, source, refused)


def _metadata(network: str, name: str, source: str) -> SpecialRange:
    return SpecialRange(ip_network(network), name, source, rule="address-metadata")


SPECIAL_RANGES: tuple[SpecialRange, ...] = (
    _entry("0.0.0.0/8", '"this network"', f"RFC 791 §3.2; {IANA_V4}"),
    _entry("10.0.0.0/8", "private-use", "RFC 1918"),
    _entry("100.64.0.0/10", "shared address space (carrier-grade NAT)", "RFC 6598"),
    _entry("127.0.0.0/8", "loopback", "RFC 1122 §3.2.1.3"),
    _entry("169.254.0.0/16", "link-local", "RFC 3927"),
    _entry("172.16.0.0/12", "private-use", "RFC 1918"),
    _entry("192.0.0.0/24", "IETF protocol assignments (PCP and TURN anycast among them)", f"RFC 6890 §2.1; {IANA_V4}"),
    _entry("192.0.0.0/29", "IPv4 service continuity prefix (DS-Lite)", "RFC 7335"),
    _entry("192.0.0.8/32", "IPv4 dummy address", "RFC 7600"),
    _entry("192.0.0.170/31", "NAT64/DNS64 discovery", "RFC 7050 §2.2; RFC 8880 §7.1"),
    _entry("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737"),
    _entry("192.31.196.0/24", "AS112-v4 (public anycast DNS sink)", "RFC 7535", refused=False),
    _entry("192.52.193.0/24", "AMT relays (public anycast)", "RFC 7450", refused=False),
    _entry("192.88.99.0/24", "6to4 relay anycast (deprecated)", "RFC 7526"),
    _entry("192.168.0.0/16", "private-use", "RFC 1918"),
    _entry("192.175.48.0/24", "direct delegation AS112 service (public anycast DNS sink)", "RFC 7534",
           refused=False),
    _entry("198.18.0.0/15", "benchmarking", "RFC 2544"),
    _entry("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737"),
    _entry("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737"),
    _entry("224.0.0.0/4", "multicast", "RFC 5771"),
    _entry("233.252.0.0/24", "multicast documentation (MCAST-TEST-NET)", "RFC 6676"),
    _entry("240.0.0.0/4", "reserved", "RFC 1112 §4"),
    _entry("255.255.255.255/32", "limited broadcast", "RFC 919 §7; RFC 8190"),
    _metadata("169.254.169.254/32", "instance metadata: AWS, GCP (metadata.google.internal), Azure, Oracle OCI, "
                                    "OpenStack, DigitalOcean, Hetzner, Huawei and others",
              "AWS EC2 'Instance metadata'; Google Cloud 'About VM metadata'; Azure 'Instance Metadata Service'; "
              "OCI 'Getting Instance Metadata'; OpenStack Nova metadata"),
    _entry("169.254.169.253/32", "AWS VPC DNS resolver", "AWS VPC 'Amazon DNS server'"),
    _entry("169.254.169.123/32", "AWS time sync", "AWS EC2 'Amazon Time Sync Service'"),
    _metadata("169.254.170.2/32", "AWS ECS task metadata and credentials", "AWS ECS 'Task IAM role'"),
    _metadata("169.254.170.23/32", "AWS EKS Pod Identity agent (credentials)",
              "AWS EKS 'Set up the Amazon EKS Pod Identity Agent'"),
    _metadata("169.254.0.23/32", "Tencent Cloud metadata (metadata.tencentyun.com)", "Tencent Cloud CVM 'Instance "
                                                                                     "metadata'"),
    _metadata("100.100.100.200/32", "Alibaba Cloud metadata", "Alibaba Cloud ECS 'Overview of ECS instance "
                                                              "metadata'; cloud-init AliYun datasource"),
    _metadata("168.63.129.16/32", "Azure host node: WireServer, DNS, health probes (in public address space)",
              "Microsoft Learn 'What is IP address 168.63.129.16?'"),
    _metadata("192.0.0.192/32", "Oracle Cloud metadata (as SSRF references list it; OCI documents "
                                "169.254.169.254)", "tkbox issue 12; SSRF test lists"),
    _entry("::/128", "unspecified", "RFC 4291 §2.5.2"),
    _entry("::1/128", "loopback", "RFC 4291 §2.5.3"),
    _entry("::/96", "IPv4-compatible (deprecated; the embedded IPv4 address is checked too)", "RFC 4291 §2.5.5.1"),
    _entry("::ffff:0:0/96", "IPv4-mapped (the embedded IPv4 address is checked too)", f"RFC 4291 §2.5.5.2; {IANA_V6}"),
    _entry("::ffff:0:0:0/96", "IPv4-translated (the embedded IPv4 address is checked too)", "RFC 2765 §2.1"),
    _entry("::/8", RESERVED, IANA_SPACE),
    _entry("64:ff9b::/96", "NAT64 well-known prefix: not refused itself, its embedded IPv4 address is checked",
           f"RFC 6052; {IANA_V6}", refused=False),
    _entry("64:ff9b:1::/48", "NAT64 local-use prefix (the embedded IPv4 address is checked too)", "RFC 8215"),
    _entry("100::/64", "discard-only", "RFC 6666"),
    _entry("100::/8", RESERVED, IANA_SPACE),
    _entry("200::/7", RESERVED, IANA_SPACE),
    _entry("400::/6", RESERVED, IANA_SPACE),
    _entry("800::/5", RESERVED, IANA_SPACE),
    _entry("1000::/4", RESERVED, IANA_SPACE),
    _entry("2001::/23", "IETF protocol assignments (PCP, TURN, AMT and AS112 anycast among them)",
           f"RFC 2928; RFC 6890; {IANA_V6}"),
    _entry("2001::/32", "Teredo (the embedded server and client are checked too)", "RFC 4380"),
    _entry("2001:2::/48", "benchmarking", "RFC 5180"),
    _entry("2001:10::/28", "ORCHID (deprecated)", "RFC 4843"),
    _entry("2001:20::/28", "ORCHIDv2 (identifiers, not locators)", "RFC 7343"),
    _entry("2001:db8::/32", "documentation", "RFC 3849"),
    _entry("2002::/16", "6to4 (the embedded IPv4 address is checked too)", "RFC 3056; RFC 7526"),
    _entry("2620:4f:8000::/48", "direct delegation AS112 service (public anycast DNS sink)", "RFC 7534",
           refused=False),
    _entry("3fff::/20", "documentation", "RFC 9637"),
    _entry("4000::/2", RESERVED, IANA_SPACE),
    _entry("5f00::/16", "segment routing (SRv6) SIDs", "RFC 9602"),
    _entry("8000::/2", RESERVED, IANA_SPACE),
    _entry("c000::/3", RESERVED, IANA_SPACE),
    _entry("e000::/4", RESERVED, IANA_SPACE),
    _entry("f000::/5", RESERVED, IANA_SPACE),
    _entry("f800::/6", RESERVED, IANA_SPACE),
    _entry("fc00::/7", "unique-local", "RFC 4193"),
    _metadata("fd00:ec2::254/128", "AWS instance metadata (IPv6)", "AWS EC2 'Instance metadata'"),
    _metadata("fd00:ec2::23/128", "AWS EKS Pod Identity agent (IPv6)",
              "AWS EKS 'Set up the Amazon EKS Pod Identity Agent'"),
    _entry("fd00:ec2::253/128", "AWS VPC DNS resolver (IPv6)", "AWS VPC 'Amazon DNS server'"),
    _entry("fd00:ec2::123/128", "AWS time sync (IPv6)", "AWS EC2 'Amazon Time Sync Service'"),
    _metadata("fd20:ce::254/128", "GCP metadata server (IPv6)", "Google Cloud 'About VM metadata'"),
    _entry("fe00::/9", RESERVED, IANA_SPACE),
    _entry("fe80::/10", "link-local", "RFC 4291 §2.5.6"),
    _metadata("fe80::a9fe:a9fe/128", "OpenStack metadata (IPv6)",
              "OpenStack Neutron spec 'IPv6 support in Metadata service'"),
    _entry("fec0::/10", "site-local (deprecated)", "RFC 3879"),
    _entry("ff00::/8", "multicast", "RFC 4291 §2.7"),
)

# Most specific first: the first entry holding an address decides.
_MOST_SPECIFIC_FIRST = {version: tuple(sorted((entry for entry in SPECIAL_RANGES if entry.network.version == version),
                                              key=lambda entry: -entry.network.prefixlen))
                        for version in (4, 6)}


@dataclass(frozen=True)
class Refusal:
    """Why ``given`` is refused: ``address`` (``given`` itself, or an IPv4 address inside it) is in ``network``."""

    rule: str
    given: IPAddress
    address: IPAddress
    how: str  # how ``address`` sits inside ``given``; "" when it is ``given``
    network: IPNetwork | None
    name: str
    source: str = ""

    @property
    def what(self) -> str:
        """The refusal as a sentence about ``given``."""
        return f"{self.given} {self.predicate}"

    @property
    def predicate(self) -> str:
        """The same without its subject: ``is in NETWORK: NAME`` or ``carries ADDRESS (HOW), which is in ...``."""
        carries = f"carries {self.address} ({self.how}), which " if self.how else ""
        where = f"in {self.network}: " if self.network is not None else ""
        source = f" ({self.source})" if self.source else ""
        return f"{carries}is {where}{self.name}{source}"

    def error(self) -> EgressRefused:
        return EgressRefused(self.rule, self.what)


def special_range(address: IPAddress) -> SpecialRange | None:
    """The most specific table entry holding ``address``, refused or not."""
    return next((entry for entry in _MOST_SPECIFIC_FIRST[address.version] if address in entry.network), None)


def classify(address: IPAddress, *, extra_blocked: Iterable[IPNetwork] = (),
             host_addresses: Iterable[IPAddress | IPNetwork] = ()) -> Refusal | None:
    """Why a box may not reach ``address``, or None when it may.

    Checks ``address`` and every IPv4 address embedded in it against the table, the host's own addresses
    (``host_addresses``: addresses or networks, e.g. ``HostAddresses.current()``) and the operator's
    ``--egress-block`` ranges (``extra_blocked``).  When several refuse, an embedded address's refusal is the
    one given, since it names what the box was reaching for, and a cloud metadata refusal before any other (a
    NAT64 local-use address yields several candidates, one per layout).
    """
    if not isinstance(address, (IPv4Address, IPv6Address)):
        raise TypeError(f"classify takes an IPv4Address or IPv6Address, not {type(address).__name__}")
    if isinstance(address, IPv6Address) and address.scope_id is not None:
        return Refusal("address-zone", address, address, "", None, f"scoped to {ascii(address.scope_id)}")
    blocked = tuple(_network(network) for network in extra_blocked)
    own = tuple(_network(item) for item in host_addresses)
    candidates = [(found.address, found.how) for found in embedded_ipv4(address)] \
        if isinstance(address, IPv6Address) else []
    refusals = [refusal for candidate, how in [*candidates, (address, "")]
                if (refusal := _check_one(address, candidate, how, blocked, own)) is not None]
    metadata = [refusal for refusal in refusals if refusal.rule == "address-metadata"]
    return (metadata or refusals or [None])[0]


def _check_one(given: IPAddress, address: IPAddress, how: str, blocked: tuple[IPNetwork, ...],
               own: tuple[IPNetwork, ...]) -> Refusal | None:
    entry = special_range(address)
    if entry is not None and entry.refused:
        return Refusal(entry.rule, given, address, how, entry.network, entry.name, entry.source)
    for network in own:
        if address.version == network.version and address in network:
            return Refusal("address-host", given, address, how, network, "one of the host's own addresses")
    for network in blocked:
        if address.version == network.version and address in network:
            return Refusal("address-operator-block", given, address, how, network, "blocked by the operator")
    return None


def _network(item: IPAddress | IPNetwork) -> IPNetwork:
    if isinstance(item, (IPv4Network, IPv6Network)):
        return item
    if isinstance(item, (IPv4Address, IPv6Address)):
        return ip_network(item)
    raise TypeError(f"expected an address or network, not {type(item).__name__}")


def markdown_table() -> str:
    """The special ranges table of docs/egress.md (a test keeps the two equal)."""
    rows = ["| range | what | refused | source |", "|---|---|---|---|"]
    for entry in SPECIAL_RANGES:
        refused = ("yes, as cloud metadata" if entry.rule == "address-metadata" else "yes") if entry.refused else "no"
        rows.append(f"| `{entry.network}` | {entry.name} | {refused} | {entry.source} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
