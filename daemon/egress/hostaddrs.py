"""The host's own addresses, which a box never reaches, read from the kernel at most every 5 seconds.

IPv4: the ``LOCAL`` routes of ``/proc/net/fib_trie`` (every address of every interface, secondary ones and
``ip route add local`` prefixes included, as networks).  IPv6: ``/proc/net/if_inet6`` (every interface address,
as /128; IPv6 ``local`` routes beyond those are not read).  Both describe the network namespace of the process
reading them, which is the namespace the egress proxy dials from.  Standard library only; each file is read
up to a bound and a file past it is an error, so a router's full routing table fails closed rather than slowly.

An address added to an interface is seen within ``EGRESS_HOST_ADDRESSES_AGE`` (5 s); a public address that is
NATed onto the host and on no interface (some cloud VMs) is not: the operator passes it with ``--egress-block``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from ipaddress import IPv4Network, IPv6Address, IPv6Network, ip_network
from pathlib import Path

from ..limits import EGRESS_HOST_ADDRESSES_AGE

IPNetwork = IPv4Network | IPv6Network

FIB_TRIE = Path("/proc/net/fib_trie")
IF_INET6 = Path("/proc/net/if_inet6")
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_ADDRESSES = 65536


class HostAddressesUnreadable(OSError):
    """The host's own addresses could not be read; the caller refuses connections until they can be."""


def parse_fib_trie(text: str) -> set[IPv4Network]:
    """The networks of the ``LOCAL`` routes in ``/proc/net/fib_trie`` text.

    A leaf line ``|-- 10.0.0.5`` is followed by one line per route at it, ``/32 host LOCAL``; the prefix length
    and the type ``LOCAL`` make the network the host answers on.
    """
    found: set[IPv4Network] = set()
    leaf = None
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "|--":
            leaf = words[1]
        elif len(words) == 3 and words[0].startswith("/") and words[2] == "LOCAL" and leaf is not None:
            network = ip_network(f"{leaf}{words[0]}", strict=False)
            if isinstance(network, IPv4Network):
                found.add(network)
        if len(found) > MAX_ADDRESSES:
            raise HostAddressesUnreadable(f"more than {MAX_ADDRESSES} local IPv4 routes")
    return found


def parse_if_inet6(text: str) -> set[IPv6Network]:
    """The addresses in ``/proc/net/if_inet6`` text (32 hex digits, then index, prefix, scope, flags, name)."""
    found: set[IPv6Network] = set()
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if len(words[0]) != 32:
            raise HostAddressesUnreadable(f"unexpected line in {IF_INET6}: {line[:80]!r}")
        found.add(IPv6Network(IPv6Address(int(words[0], 16))))
        if len(found) > MAX_ADDRESSES:
            raise HostAddressesUnreadable(f"more than {MAX_ADDRESSES} IPv6 addresses")
    return found


def _read_bounded(path: Path, *, missing_is_empty: bool) -> str:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        if missing_is_empty:
            return ""
        raise HostAddressesUnreadable(f"cannot read {path}: it does not exist") from None
    except OSError as error:
        raise HostAddressesUnreadable(f"cannot read {path}: {error}") from None
    if len(data) > MAX_FILE_BYTES:
        raise HostAddressesUnreadable(f"{path} is over {MAX_FILE_BYTES} bytes")
    return data.decode("ascii", "replace")


def read_host_addresses(fib_trie: Path = FIB_TRIE, if_inet6: Path = IF_INET6) -> frozenset[IPNetwork]:
    """The host's own addresses now.  ``if_inet6`` is absent when IPv6 is off, and then there are none."""
    try:
        networks: set[IPNetwork] = set(parse_fib_trie(_read_bounded(fib_trie, missing_is_empty=False)))
        networks |= parse_if_inet6(_read_bounded(if_inet6, missing_is_empty=True))
    except ValueError as error:
        raise HostAddressesUnreadable(f"cannot parse the host's addresses: {error}") from None
    return frozenset(networks)


class HostAddresses:
    """The host's own addresses, re-read when the copy is ``max_age`` seconds old (``EGRESS_HOST_ADDRESSES_AGE``).

    ``reader`` and ``clock`` (monotonic seconds) are injectable for tests.  A failed read is not cached: it
    raises ``HostAddressesUnreadable`` to the caller, which refuses the connection.
    """

    def __init__(self, reader: Callable[[], frozenset[IPNetwork]] = read_host_addresses,
                 clock: Callable[[], float] = time.monotonic,
                 max_age: float = EGRESS_HOST_ADDRESSES_AGE.default) -> None:
        self._reader = reader
        self._clock = clock
        self._max_age = max_age
        self._addresses: frozenset[IPNetwork] | None = None
        self._read_at = 0.0

    def current(self) -> frozenset[IPNetwork]:
        now = self._clock()
        if self._addresses is None or not 0 <= now - self._read_at < self._max_age:
            self._addresses = None
            addresses = self._reader()
            self._addresses, self._read_at = addresses, now
        return self._addresses
