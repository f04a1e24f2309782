"""Pinned names (``--resolve NAME=ADDR``, ``resolve:`` in tkbox.yaml): names the proxy resolves from the box's own
table instead of the host's resolver, for air-gapped operators and for tests (sans-IO).

A pin only replaces the lookup: the pinned addresses pass the same address checks as looked-up ones (special
ranges, the host's own addresses, ``--egress-block``), and a pinned name is allowed or held like any other. A pin
to an address in a special range the proxy refuses (``ranges``) is refused when it is made: every connection to
the name would be refused. Text is read by the target parser's rules (``hostnames``): a name as allowlist entries
write it (no wildcard, no port, no IP literal); an IPv4 address as four decimal numbers 0-255 without leading
zeros; an IPv6 address with or without brackets, without a zone id. Up to ``RESOLVE_ADDRESSES`` addresses per
name and ``RESOLVE_NAMES`` names per box.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from ..limits import RESOLVE_ADDRESSES, RESOLVE_NAMES
from .allowlist import EntryError, normalise_name
from .hostnames import parse_ip_text
from .ranges import classify
from .refusals import EgressRefused, shown
from .target import ipv6_text

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
FORMS = "NAME=ADDR[,ADDR…] (a list of them), or a mapping of NAME to an address or a list of addresses"


class PinError(ValueError):
    """A pin is wrong; the message says which and what to write."""


def parse_address(text: Any) -> Address:
    """One pinned address, read as the target parser reads an address (``hostnames.parse_ip_text``), brackets
    allowed around IPv6; raises PinError."""
    if not isinstance(text, str):
        raise PinError(f"an address is text, not {type(text).__name__}")
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return parse_ip_text(bare, where="the pinned address")
    except EgressRefused as exc:
        raise PinError(str(exc)) from None
    except ValueError:  # a text the parser let through to ipaddress, which refused it: refused here too
        raise PinError(f"the pinned address {shown(text)} is not an address tkbox reads") from None


def _name(text: Any) -> str:
    if not isinstance(text, str):
        raise PinError(f"a pinned name is text, not {type(text).__name__}")
    if text.startswith("*.") or ":" in text:
        raise PinError(f"{shown(text)}: pin a host name, not a wildcard, a port or an address")
    try:
        return normalise_name(text, where="the pinned name")
    except EntryError as exc:
        raise PinError(str(exc)) from None


def parse_pins(value: Any) -> dict[str, tuple[str, ...]]:
    """Pins from a mapping (tkbox.yaml, the API) or a list of ``NAME=ADDR[,ADDR…]`` texts (``tkbox run
    --resolve``, repeated); the result maps each name to its addresses' canonical texts, in order, once each."""
    pairs: list[tuple[Any, Any]] = []
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, list):
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise PinError(f"{shown(str(item))} is not NAME=ADDR; each pin is {FORMS}")
            name, _, addresses = item.partition("=")
            pairs.append((name, addresses.split(",")))
    else:
        raise PinError(f"pins are {FORMS}")
    pins: dict[str, list[str]] = {}
    for raw_name, raw_addresses in pairs:
        name = _name(raw_name)
        addresses = [raw_addresses] if isinstance(raw_addresses, str) else raw_addresses
        if not isinstance(addresses, list) or not addresses:
            raise PinError(f"{name}: give one address or a list of addresses")
        known = pins.setdefault(name, [])
        for text in addresses:
            address = parse_address(text)
            if (refusal := classify(address)) is not None:
                raise PinError(f"the pin {name}={text} would refuse every connection to {name}: {refusal.what}, "
                               "and the proxy refuses it whatever the allowlist says; pin an address it can reach")
            canonical = ipv6_text(address) if isinstance(address, ipaddress.IPv6Address) else str(address)
            if canonical not in known:
                known.append(canonical)
        if len(known) > RESOLVE_ADDRESSES.default:
            raise PinError(RESOLVE_ADDRESSES.refusal(f"{len(known)} addresses for {name}"))
    if len(pins) > RESOLVE_NAMES.default:
        raise PinError(RESOLVE_NAMES.refusal(f"{len(pins)} names"))
    return {name: tuple(addresses) for name, addresses in pins.items()}


def pinned(pins: Mapping[str, tuple[str, ...]], name: str) -> list[Address] | None:
    """The addresses pinned for ``name`` (a target's lower-case name), or None when it is not pinned."""
    addresses = pins.get(name.lower() if name.isascii() else name)
    return None if addresses is None else [ipaddress.ip_address(text) for text in addresses]
