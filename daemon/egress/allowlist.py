"""A box's egress allowlist: its entries, parsed strictly, and the one matcher the proxy asks (sans-IO).

Entries, as written in ``--allow``, ``allow:`` in tkbox.yaml and ``tkbox allow``/``tkbox block``:

- ``host``: HTTPS to ``host`` on 443 and plain HTTP on 80, nothing else;
- ``host:port``: that port only, whatever it carries (HTTPS, plain HTTP, or a tunnel that is not TLS);
- ``*.host``: every name *under* ``host`` (``a.host``, ``a.b.host``), never ``host`` itself, on 443 and 80;
  ``*.host:port`` the same names on that port only. ``*.`` needs at least two labels after it (``*.com`` is
  refused) and is only ever the whole first label;
- an IP literal: ``93.184.216.34`` (four decimal numbers 0-255, no leading zeros: no octal, hex or short forms)
  or ``[2606:2800:220:1::1]`` (brackets always; printed in RFC 5952 form), with an optional ``:port``. An allow
  entry for an address the proxy refuses whatever the list says (``ranges``: private, loopback, documentation,
  metadata, ...) is refused when it is added (``refused_address``): it could let nothing through;
- ``!`` before any of them: a *block* (written by ``tkbox block`` when a wider entry still covers the host). A
  block wins over every allow entry, and a block without a port covers every port of its names.

A host in an entry is read by exactly the rules that read a connection's target (``hostnames.parse_host``), so
an entry and a target cannot disagree on what a text names: names become lower-case ASCII A-labels without a
trailing dot (IDNA 2008, no UTS #46 mapping), with at least two labels, letters, digits and ``-`` only; a name that
ends in a number (``1.2.3``, ``host.0x7f``) is an IPv4 address spelt a way tkbox refuses; special-use names
(``localhost``, ``*.internal``, …) are refused.

Matching is exact on whole labels and case-insensitive on ASCII: ``evil-allowed.com`` and
``allowed.com.evil.com`` never match ``allowed.com``; text that is not ASCII never matches anything. A target host
is compared as given (the target parser has already made it a lower-case A-label or an IP literal's text); an IPv6
target matches only an IPv6 entry of the same address (an IPv4-mapped address is not its IPv4 address here: the
proxy's address checks unwrap it, the allowlist does not widen). A name that a block covers is not on the list: the
proxy treats it as off the list (held for a person, or refused in an ``inspect: all`` box).

``replay`` answers what a new entry would have let through: of a box's earlier attempts that were kept in because
of the list (held, rejected, expired, withdrawn or refused as off the list), those the changed list admits and the
old one did not. Attempts refused for any other reason (a blocked address, the ClientHello, the policy) are never
counted: a new entry does not change them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address

from ..limits import ALLOWLIST_ENTRIES
from .hostnames import Host, parse_host
from .ranges import classify
from .refusals import EgressRefused, shown
from .target import ipv6_text

SCHEMES = ("https", "http", "tcp")
"""What a connection is: ``https`` (a CONNECT tunnel carrying TLS), ``http`` (plain HTTP in absolute form), ``tcp``
(a CONNECT tunnel that is not TLS: allowed only by an entry that names its port)."""
DEFAULT_PORTS = {"https": 443, "http": 80}
ALL_PORTS = frozenset(range(1, 65536))
PORT = re.compile(r"[1-9][0-9]{0,4}\Z", re.ASCII)
MAX_ENTRY_TEXT = 300
ENTRY_FORMS = "host, host:port, *.host, *.host:port, an IPv4 address or [IPv6 address], each with an optional :port"


class EntryError(ValueError):
    """An entry is not one tkbox accepts; the message says what is wrong and what to write."""


@dataclass(frozen=True)
class Entry:
    """One entry: ``host`` is a lower-case A-label name (the base name for a wildcard) or an IP address's text
    (IPv6 without brackets); ``kind`` is ``name``, ``ipv4`` or ``ipv6``; ``port`` None means the default ports
    (443 for HTTPS, 80 for HTTP) for an allow entry, and every port for a block."""

    host: str
    kind: str = "name"
    wildcard: bool = False
    port: int | None = None
    block: bool = False

    @property
    def text(self) -> str:
        """The entry as it is written and printed; ``parse_entry(e.text) == e``."""
        host = f"[{self.host}]" if self.kind == "ipv6" else self.host
        port = "" if self.port is None else f":{self.port}"
        return f"{'!' if self.block else ''}{'*.' if self.wildcard else ''}{host}{port}"

    def __str__(self) -> str:
        return self.text

    @property
    def ports(self) -> frozenset[int]:
        """The port numbers the entry speaks for (for an allow entry without a port: 443 and 80, each for its
        own scheme only)."""
        if self.port is not None:
            return frozenset({self.port})
        return ALL_PORTS if self.block else frozenset(DEFAULT_PORTS.values())

    def covers_host(self, host: str) -> bool:
        """Whether ``host`` (a target key: lower-case ASCII name or canonical IP text) is one of this entry's names."""
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def covers(self, host: str, port: int, scheme: str) -> bool:
        if not self.covers_host(host):
            return False
        if self.block or self.port is not None:
            return port in self.ports
        return DEFAULT_PORTS.get(scheme) == port

    def specificity(self) -> tuple[int, int, int]:
        """Higher is narrower: an exact name over a wildcard, a longer base over a shorter one, a port over none."""
        return (0 if self.wildcard else 1, self.host.count("."), 0 if self.port is None else 1)


def refused_address(entry: Entry) -> str | None:
    """Why an allow entry for an address could never let anything through (its address is in a range the proxy
    refuses whatever the list says), or None. Names are checked when they are resolved, and a block is never
    refused."""
    if entry.block or entry.kind == "name":
        return None
    refusal = classify(ip_address(entry.host))
    if refusal is None:
        return None
    return (f"the entry {entry.text} would let nothing through: {refusal.what}, and the proxy refuses it whatever "
            "the allowlist says; allow the host by a name or an address it can reach")


def check_reachable(entries: Iterable[Entry]) -> None:
    """Raise EntryError for the first entry ``refused_address`` refuses (where entries are added)."""
    for entry in entries:
        if (refused := refused_address(entry)) is not None:
            raise EntryError(refused)


def normalise_name(text: str, *, where: str = "the entry") -> str:
    """A host name as entries hold it, read by the target parser's own rules (``hostnames.parse_host``): lower-case
    ASCII A-labels, no trailing dot; raises EntryError for an address or anything that is not a name."""
    host = _host(text, where)
    if not isinstance(host, str):
        raise EntryError(f"{where} {shown(text)} is an address, not a host name")
    return host


def _host(text: str, where: str) -> Host:
    try:
        return parse_host(text, where=where)
    except EgressRefused as exc:
        raise EntryError(str(exc)) from None
    except ValueError:  # an address text the parser let through to ipaddress, which refused it: refused here too
        raise EntryError(f"{where} {shown(text)} is not a host name or an address tkbox reads") from None


def parse_port(text: str) -> int:
    if not PORT.match(text) or int(text) > 65535:
        raise EntryError(f"{shown(text)} is not a port: a decimal number 1-65535 without leading zeros")
    return int(text)


def parse_entry(text: str) -> Entry:
    """One entry from its text (``ENTRY_FORMS``, or a block: ``!`` and one of them); raises EntryError."""
    if not isinstance(text, str) or not text:
        raise EntryError(f"an entry is one of: {ENTRY_FORMS}")
    if len(text) > MAX_ENTRY_TEXT:
        raise EntryError(f"an entry is at most {MAX_ENTRY_TEXT} characters")
    block = text.startswith("!")
    rest = text[1:] if block else text
    if rest.startswith("["):
        inside, bracket, after = rest.partition("]")
        host_text = inside + bracket
        if after and not after.startswith(":"):
            raise EntryError(f"{shown(text)}: an IPv6 entry is [ADDRESS] or [ADDRESS]:PORT")
    elif rest.count(":") > 1:
        raise EntryError(f"{shown(text)}: write an IPv6 address in brackets, [2001:db8::1] or [2001:db8::1]:443")
    else:
        host_text, colon, port_text = rest.partition(":")
        after = colon + port_text
    port = parse_port(after[1:]) if after else None
    if host_text.startswith("*."):
        if "." not in host_text[2:].rstrip("."):
            raise EntryError(f"{shown(text)} would allow every name under a top-level domain; name a domain you "
                             "mean (*.example.com)")
        return Entry(normalise_name(host_text[2:]), "name", True, port, block)
    if "*" in host_text:
        raise EntryError(f"{shown(text)}: '*' is only ever the whole first label, as in *.example.com")
    host = _host(host_text, "the entry")
    if isinstance(host, IPv4Address):
        return Entry(str(host), "ipv4", False, port, block)
    if isinstance(host, IPv6Address):
        return Entry(ipv6_text(host), "ipv6", False, port, block)
    return Entry(host, "name", False, port, block)


def target_key(host: Host) -> str | None:
    """A target host as the matcher compares it: a name as the target parser gives it (lower-case ASCII; upper
    case is folded here too), an address's canonical text (IPv6 with or without brackets, or an address object);
    None for text no entry can match (not ASCII, empty, an IPv6 text that is not an address)."""
    if isinstance(host, IPv4Address):
        return str(host)
    if isinstance(host, IPv6Address):
        return ipv6_text(host)
    if not host or not host.isascii() or "%" in host:
        return None
    if ":" in host:
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        try:
            return ipv6_text(IPv6Address(bare))
        except ValueError:
            return None
    return host.lower()


class Allowlist:
    """An immutable list of entries, in the order they were written (duplicates dropped); ``match`` is what the
    proxy asks on each new connection. Changes make a new Allowlist (``allowlist_edit``)."""

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        unique = tuple(dict.fromkeys(entries))
        if len(unique) > ALLOWLIST_ENTRIES.default:
            raise EntryError(ALLOWLIST_ENTRIES.refusal(f"{len(unique)} entries"))
        self.entries = unique
        self._exact: dict[str, list[Entry]] = {}
        self._wild: dict[str, list[Entry]] = {}
        for entry in unique:
            (self._wild if entry.wildcard else self._exact).setdefault(entry.host, []).append(entry)

    @classmethod
    def parse(cls, texts: Sequence[str]) -> Allowlist:
        """Entries from their texts; an EntryError names the entry that is wrong (``entry 3 'x': …``)."""
        entries = []
        for index, text in enumerate(texts, 1):
            try:
                entries.append(parse_entry(text))
            except EntryError as exc:
                quoted = shown(text) if isinstance(text, str) else type(text).__name__
                raise EntryError(f"entry {index} {quoted}: {exc}") from None
        return cls(entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Allowlist) and self.entries == other.entries

    def __hash__(self) -> int:
        return hash(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"Allowlist({self.texts()!r})"

    def texts(self) -> list[str]:
        return [entry.text for entry in self.entries]

    @property
    def allows(self) -> tuple[Entry, ...]:
        return tuple(entry for entry in self.entries if not entry.block)

    @property
    def blocks(self) -> tuple[Entry, ...]:
        return tuple(entry for entry in self.entries if entry.block)

    def _covering(self, key: str) -> list[Entry]:
        """Every entry one of whose names is ``key``: the exact ones, then the wildcards of each parent name."""
        found = list(self._exact.get(key, ()))
        labels = key.split(".")
        if ":" not in key:  # wildcards are names only
            for start in range(1, len(labels)):
                found.extend(self._wild.get(".".join(labels[start:]), ()))
        return found

    def blocked(self, host: Host, port: int) -> Entry | None:
        """The narrowest block that covers ``host`` on ``port``, if any (whatever the scheme)."""
        key = target_key(host)
        if key is None:
            return None
        blocks = [entry for entry in self._covering(key) if entry.block and port in entry.ports]
        return max(blocks, key=Entry.specificity, default=None)

    def match(self, host: Host, port: int, scheme: str) -> Entry | None:
        """The narrowest allow entry that lets ``scheme`` reach ``host`` on ``port`` (``SCHEMES``), or None: when a
        block covers it, when nothing does, and always for ``tcp`` unless the entry names ``port`` itself."""
        if scheme not in SCHEMES:
            raise ValueError(f"scheme is one of {', '.join(SCHEMES)}, not {scheme!r}")
        if not 1 <= port <= 65535:
            return None
        key = target_key(host)
        if key is None:
            return None
        covering = self._covering(key)
        if any(entry.block and port in entry.ports for entry in covering):
            return None
        allowed = [entry for entry in covering if not entry.block and (
            entry.port == port if scheme == "tcp" else entry.covers(key, port, scheme))]
        return max(allowed, key=Entry.specificity, default=None)

    def names_port(self, host: Host, port: int) -> Entry | None:
        """The allow entry that names ``port`` for ``host`` (what a tunnel that is not TLS needs), or None."""
        return self.match(host, port, "tcp")

    def admits(self, attempt: Attempt) -> Entry | None:
        return self.match(attempt.host, attempt.port, attempt.kind)


KEPT_IN_BY_LIST = ("held", "rejected", "expired", "withdrawn", "refused_off_list")
"""Outcomes of an attempt that an allow entry would have changed: held for a person (and how that ended), or
refused at once because the host was off the list (an ``inspect: all`` box)."""
ATTEMPT_OUTCOMES = ("allowed", "approved", *KEPT_IN_BY_LIST, "refused")


@dataclass(frozen=True)
class Attempt:
    """One earlier connection attempt of a box, as its proxy saw it: ``kind`` is one of ``SCHEMES``, ``outcome``
    one of ``ATTEMPT_OUTCOMES`` (``refused``: for a reason the list does not decide, such as a blocked address)."""

    host: str
    port: int
    kind: str
    outcome: str


def replay(before: Allowlist, after: Allowlist, attempts: Iterable[Attempt]) -> list[Attempt]:
    """The attempts that were kept in because of ``before`` and that ``after`` would have let through, in order."""
    return [attempt for attempt in attempts
            if attempt.outcome in KEPT_IN_BY_LIST and attempt.kind in SCHEMES
            and before.admits(attempt) is None and after.admits(attempt) is not None]
