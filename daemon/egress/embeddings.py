"""The IPv4 addresses an IPv6 address carries inside it, by the transition mechanisms that would deliver a
connection to them: a box must not reach 169.254.169.254 by dialling ``::ffff:169.254.169.254``.

Unwrapped (each found address is checked as well as the outer one):

- IPv4-mapped ``::ffff:0:0/96`` (RFC 4291 §2.5.5.2): a dual-stack socket connects to the IPv4 address.
- IPv4-compatible ``::/96`` (RFC 4291 §2.5.5.1, deprecated), except ``::`` and ``::1``, which are not.
- IPv4-translated ``::ffff:0:0:0/96`` (RFC 2765 §2.1, SIIT).
- NAT64 well-known prefix ``64:ff9b::/96`` (RFC 6052): the translator connects to the low 32 bits.
- NAT64 local-use ``64:ff9b:1::/48`` (RFC 8215): the operator picks the prefix length inside the /48, so every
  RFC 6052 §2.2 layout that fits is read (/48, /56 and /64 skipping the reserved "u" octet, bits 64-71, which
  must be zero; /96 in the last 32 bits), and every candidate is checked.
- 6to4 ``2002::/16`` (RFC 3056): bits 16-47.
- Teredo ``2001::/32`` (RFC 4380): the server in bits 32-63, and the client, stored inverted, in bits 96-127.

Not unwrapped: ISATAP interface identifiers (``::5efe:a.b.c.d``) inside other prefixes, which route to the
prefix's owner, not to the IPv4 address.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, IPv6Network

IPV4_MAPPED = IPv6Network("::ffff:0:0/96")
IPV4_COMPATIBLE = IPv6Network("::/96")
IPV4_TRANSLATED = IPv6Network("::ffff:0:0:0/96")
NAT64_WELL_KNOWN = IPv6Network("64:ff9b::/96")
NAT64_LOCAL_USE = IPv6Network("64:ff9b:1::/48")
SIX_TO_FOUR = IPv6Network("2002::/16")
TEREDO = IPv6Network("2001::/32")

_LOW32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Embedded:
    """An IPv4 address found inside an IPv6 one, and how it sits there."""

    address: IPv4Address
    how: str  # e.g. "IPv4-mapped", "Teredo client (obfuscated)"


def embedded_ipv4(address: IPv6Address) -> tuple[Embedded, ...]:
    """Every IPv4 address ``address`` carries, in a fixed order; empty when it carries none."""
    value = int(address)
    found: list[Embedded] = []
    if address in IPV4_MAPPED:
        found.append(Embedded(IPv4Address(value & _LOW32), "IPv4-mapped"))
    elif address in IPV4_TRANSLATED:
        found.append(Embedded(IPv4Address(value & _LOW32), "IPv4-translated"))
    elif address in IPV4_COMPATIBLE and value > 1:
        found.append(Embedded(IPv4Address(value & _LOW32), "IPv4-compatible"))
    elif address in NAT64_WELL_KNOWN:
        found.append(Embedded(IPv4Address(value & _LOW32), "NAT64 (64:ff9b::/96)"))
    elif address in NAT64_LOCAL_USE:
        found.extend(_nat64_local_use(value))
    elif address in SIX_TO_FOUR:
        found.append(Embedded(IPv4Address((value >> 80) & _LOW32), "6to4"))
    elif address in TEREDO:
        found.append(Embedded(IPv4Address((value >> 64) & _LOW32), "Teredo server"))
        found.append(Embedded(IPv4Address((value & _LOW32) ^ _LOW32), "Teredo client (obfuscated)"))
    return tuple(found)


def _nat64_local_use(value: int) -> list[Embedded]:
    """The candidates of RFC 6052 §2.2's layouts for a prefix of 48, 56, 64 or 96 bits inside 64:ff9b:1::/48."""
    octets = value.to_bytes(16, "big")
    found = [Embedded(IPv4Address(octets[12:16]), "NAT64 local-use (64:ff9b:1::/48, as a /96)")]
    if octets[8] == 0:  # the "u" octet; the shorter layouts skip it
        layouts = ((48, octets[6:8] + octets[9:11]), (56, octets[7:8] + octets[9:12]), (64, octets[9:13]))
        for length, packed in layouts:
            found.append(Embedded(IPv4Address(packed), f"NAT64 local-use (64:ff9b:1::/48, as a /{length})"))
    return found


def embed(address: IPv4Address, how: str) -> IPv6Address:
    """``address`` placed inside IPv6 as ``how`` names (one of the mechanisms above), for tests and docs.

    Teredo and the NAT64 local-use layouts get fixed, arbitrary values in their other fields.
    """
    v4 = int(address)
    packed = address.packed
    if how == "IPv4-mapped":
        return IPv6Address(int(IPV4_MAPPED.network_address) | v4)
    if how == "IPv4-translated":
        return IPv6Address(int(IPV4_TRANSLATED.network_address) | v4)
    if how == "IPv4-compatible":
        return IPv6Address(v4)
    if how == "NAT64 (64:ff9b::/96)":
        return IPv6Address(int(NAT64_WELL_KNOWN.network_address) | v4)
    if how.startswith("NAT64 local-use"):
        prefix = NAT64_LOCAL_USE.network_address.packed
        length = int(how.rsplit("/", 1)[1].rstrip(")"))
        layouts = {48: prefix[:6] + packed[:2] + b"\0" + packed[2:] + b"\0" * 5,
                   56: prefix[:6] + b"\x07" + packed[:1] + b"\0" + packed[1:] + b"\0" * 4,
                   64: prefix[:6] + b"\x07\x08" + b"\0" + packed + b"\0" * 3,
                   96: prefix[:6] + b"\x07\x08" + b"\0" * 4 + packed}
        return IPv6Address(layouts[length])
    if how == "6to4":
        return IPv6Address(int(SIX_TO_FOUR.network_address) | (v4 << 80) | 1)
    if how == "Teredo client (obfuscated)":
        server = int(IPv4Address("192.0.2.45"))  # an arbitrary server; RFC 4380's own example
        return IPv6Address(int(TEREDO.network_address) | (server << 64) | (0x8000 << 48) | (0xFFFF << 32)
                           | (v4 ^ _LOW32))
    if how == "Teredo server":
        return IPv6Address(int(TEREDO.network_address) | (v4 << 64) | 0x0123)
    raise ValueError(f"unknown embedding {how!r}")


EMBEDDINGS = ("IPv4-mapped", "IPv4-translated", "IPv4-compatible", "NAT64 (64:ff9b::/96)",
              "NAT64 local-use (64:ff9b:1::/48, as a /48)", "NAT64 local-use (64:ff9b:1::/48, as a /56)",
              "NAT64 local-use (64:ff9b:1::/48, as a /64)", "NAT64 local-use (64:ff9b:1::/48, as a /96)",
              "6to4", "Teredo server", "Teredo client (obfuscated)")
