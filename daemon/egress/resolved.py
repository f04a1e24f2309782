"""The exact address to dial for a target: an IP literal as written, or what a name resolved to, once.

A name is refused when ANY of its addresses is refused (a name that resolves to a public and a private address
is a rebinding attempt, whichever one a later lookup would return); otherwise the first address is the one to
dial, and the proxy dials it without resolving the name again, so the name cannot rebind between check and
connect.  Addresses are deduplicated in order first; more than ``EGRESS_RESOLVED_ADDRESSES`` is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv6Address

from ..limits import EGRESS_RESOLVED_ADDRESSES
from .hostnames import parse_host, parse_ip_text
from .ranges import IPAddress, IPNetwork, classify
from .refusals import EgressRefused, shown


def check_address(address: IPAddress, *, extra_blocked: Iterable[IPNetwork] = (),
                  host_addresses: Iterable[IPAddress | IPNetwork] = ()) -> IPAddress:
    """``address`` itself when a box may reach it; else raises ``EgressRefused``."""
    refusal = classify(address, extra_blocked=extra_blocked, host_addresses=host_addresses)
    if refusal is not None:
        raise refusal.error()
    return address


def check_resolved(name: str, addresses: Sequence[IPAddress | str], *, extra_blocked: Iterable[IPNetwork] = (),
                   host_addresses: Iterable[IPAddress | IPNetwork] = ()) -> IPAddress:
    """The address to dial for ``name`` (a normalised name, as a ``Target`` holds it), given every address it
    resolved to (``ipaddress`` objects, or bare address text as a resolver writes it).

    Raises ``EgressRefused`` when the name is not normalised, has no address or too many, or when any address
    is one a box may not reach.
    """
    if not isinstance(name, str) or parse_host(name, where="the resolved name") != name:
        raise EgressRefused("host-chars", f"the resolved name {shown(str(name))} is not a normalised host name")
    unique: list[IPAddress] = []
    for item in addresses:
        address = item if isinstance(item, (IPv4Address, IPv6Address)) else \
            parse_ip_text(item, where=f"an address of {name}")
        if address not in unique:
            unique.append(address)
        if len(unique) > EGRESS_RESOLVED_ADDRESSES.default:
            raise EgressRefused("resolved-too-many", f"{name} resolves to over {EGRESS_RESOLVED_ADDRESSES.default} "
                                                     f"addresses (limit {EGRESS_RESOLVED_ADDRESSES.name})")
    if not unique:
        raise EgressRefused("resolved-none", f"{name} resolves to no address")
    own = tuple(host_addresses)
    blocked = tuple(extra_blocked)
    for address in unique:
        refusal = classify(address, extra_blocked=blocked, host_addresses=own)
        if refusal is not None:
            raise EgressRefused(refusal.rule, f"{name} resolves to {len(unique)} address(es), one of which: "
                                              f"{refusal.what}")
    return unique[0]
