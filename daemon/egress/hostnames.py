"""The host inside a connection target, read one way only: a host name, an IPv4 dotted quad or a bracketed IPv6
literal, or a refusal.

A URL parser (WHATWG, as in browsers, Node, yarl-style parsers), curl, Python's ``urllib.parse`` and the host's
resolver (``getaddrinfo``, ``inet_aton``) read some host texts differently; each such text is refused, never
guessed at:

- IPv4 other than four decimal octets without leading zeros: ``inet_aton`` and WHATWG read ``0177.0.0.1`` (octal),
  ``0x7f.1`` (hex), ``127.1`` (short) and ``2130706433`` (dotless) as 127.0.0.1, while ``urllib`` and a name
  matcher read them as names.  WHATWG treats any host whose last label is a number (``foo.123``, ``foo.0x1``) as
  IPv4 and fails it; so do we (``ipv4-form``).  ``1.2.3.4.`` (trailing dot) is refused too.
- IPv6 only in brackets and without a zone id (``%eth0``, ``%25eth0``): Python's ``ipaddress`` accepts zones,
  WHATWG refuses them, curl sends them to the kernel.  The text inside the brackets is checked by ``ipaddress``
  (at most four hex digits a group, one ``::``, an embedded IPv4 tail of four decimal octets).
- Backslash, ``@``, ``%``, control characters and spaces: WHATWG reads ``\\`` as ``/`` and ``@`` as the end of
  userinfo, decodes ``%2e``, strips tab/CR/LF; curl and ``urllib`` do not.
- Non-ASCII: accepted only when every label is valid IDNA 2008 (the ``idna`` package, without the UTS 46
  mapping) and round-trips exactly; the host becomes its A-labels.  So full-width digits (``１２７.０.０.１``,
  which UTS 46 maps to 127.0.0.1), full-width letters, upper-case non-ASCII letters, soft hyphens and zero-width
  characters are refused.  The IDNA 2003/2008 deviation characters (ß, ς, ZWJ, ZWNJ), which Python's
  ``encodings.idna`` maps away (``faß`` -> ``fass``) and IDNA 2008 keeps, are refused, as are the dots
  U+3002, U+FF0E and U+FF61 that UTS 46 and the ``idna`` package read as ``.`` and ``urllib`` does not.
  Limit: the Bidi rule is checked per label (``idna.alabel``), not across the labels of a name.
- Names: letters, digits and ``-`` only (``_`` is refused: resolvers accept it, IDNA and certificates do not),
  labels of 1-63 characters not starting or ending with ``-``, at most 253 characters, at most one trailing dot
  (dropped: names are absolute, and the resolver must be asked ``name + "."`` so that no search domain is
  appended).  An ASCII label starting ``xn--`` must be a valid A-label.  Labels with ``--`` in positions 3-4
  that are not ``xn--`` (``r3---sn-x.googlevideo.com``) are read alike by everyone and accepted.
- One-label names (``metadata``, ``intranet``) are refused: the resolver completes them with its search domains,
  so the name decided is not the name dialled.  Special-use names are refused before any lookup.
"""

from __future__ import annotations

import re
import unicodedata
from ipaddress import IPv4Address, IPv6Address

import idna

from .refusals import EgressRefused, escaped, shown

Host = str | IPv4Address | IPv6Address

MAX_NAME_LENGTH = 253
MAX_LABEL_LENGTH = 63
MAX_HOST_TEXT = 1024  # a bound on the text examined at all; anything this long is refused
MAX_BRACKETED_IPV6 = 47  # "[" + 45 characters (ffff:...:ffff:255.255.255.255) + "]"

UNICODE_DOTS = "\u3002\uff0e\uff61"
IDNA_DEVIATIONS = "\u00df\u03c2\u200c\u200d"  # ß ς ZWNJ ZWJ: IDNA 2003 and 2008 read them differently

# name suffix -> why it never names an outside service
SPECIAL_USE_NAMES: dict[str, str] = {
    "localhost": "RFC 6761 §6.3: the host itself",
    "local": "RFC 6762: multicast DNS on the host's own links",
    "internal": "ICANN private-use TLD (2024): internal networks, e.g. GCP's metadata.google.internal",
    "arpa": "RFC 3172: infrastructure, reverse mapping (in-addr.arpa, ip6.arpa) and home.arpa (RFC 8375)",
    "onion": "RFC 7686: Tor onion services",
    "invalid": "RFC 6761 §6.4: never resolves",
    "alt": "RFC 9476: names outside the DNS",
}

_OCTET = re.compile(r"(?:0|[1-9][0-9]{0,2})\Z", re.ASCII)
_LDH_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z", re.ASCII)
_LDH_CHARACTERS = re.compile(r"[a-z0-9-]*\Z", re.ASCII)
_NUMERIC_LABEL = re.compile(r"([0-9]+|0x[0-9a-f]*)\Z", re.ASCII)  # WHATWG's "ends in a number"
_IPV6_TEXT = re.compile(r"[0-9A-Fa-f:.]+\Z", re.ASCII)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def check_characters(text: str, where: str) -> None:
    """Refuse the characters no part of a target may hold: controls, spaces and invisible format characters."""
    for character in text:
        category = unicodedata.category(character)
        if category in ("Cc", "Cf", "Zs", "Zl", "Zp") or character.isspace():
            raise EgressRefused("target-control", f"{where} {shown(text)} holds U+{ord(character):04X}")


def parse_host(text: str, *, where: str = "the host") -> Host:
    """The host ``text`` names: a normalised name, an ``IPv4Address`` or an ``IPv6Address`` (from ``[...]``).

    Raises ``EgressRefused`` naming the rule broken.  ``where`` names the host's place in messages.
    """
    if len(text) > MAX_HOST_TEXT:
        raise EgressRefused("host-length", f"{where} is {len(text)} characters long")
    if not text:
        raise EgressRefused("host-empty", f"{where} is empty")
    check_characters(text, where)
    if "\\" in text:
        raise EgressRefused("target-backslash", f"{where} {shown(text)} holds a backslash")
    if "@" in text:
        raise EgressRefused("target-userinfo", f"{where} {shown(text)} holds '@'")
    if text.startswith("["):
        return _parse_bracketed_ipv6(text, where)
    if "%" in text:
        raise EgressRefused("target-percent", f"{where} {shown(text)} holds '%'")
    if "[" in text or "]" in text:
        raise EgressRefused("ipv6-form", f"{where} {shown(text)} has a bracket out of place")
    if ":" in text:
        raise EgressRefused("ipv6-form", f"{where} {shown(text)} looks like IPv6 without brackets")
    quad = dotted_quad(text)
    if quad is not None:
        return quad
    return _parse_name(text, where)


def dotted_quad(text: str) -> IPv4Address | None:
    """The address when ``text`` is exactly four decimal octets without leading zeros, else None."""
    parts = text.split(".")
    if len(parts) != 4 or not all(_OCTET.match(part) and int(part) <= 255 for part in parts):
        return None
    return IPv4Address(text)


def parse_ip_text(text: str, *, where: str = "the address") -> IPv4Address | IPv6Address:
    """An address written bare, as a resolver or ``--resolve NAME=ADDR`` gives it: a dotted quad or IPv6 text."""
    if len(text) > MAX_BRACKETED_IPV6:
        raise EgressRefused("ipv6-form", f"{where} {shown(text)} is too long for an address")
    quad = dotted_quad(text)
    if quad is not None:
        return quad
    if "%" in text:
        raise EgressRefused("ipv6-zone", f"{where} {shown(text)} has a zone id")
    if ":" not in text:
        raise EgressRefused("ipv4-form", f"{where} {shown(text)} is not a dotted quad")
    return _ipv6(text, text, where)


def _parse_bracketed_ipv6(text: str, where: str) -> IPv6Address:
    if not text.endswith("]") or text.count("[") != 1 or text.count("]") != 1:
        raise EgressRefused("ipv6-form", f"{where} {shown(text)} is not one bracketed IPv6 address")
    inner = text[1:-1]
    if "%" in inner:
        raise EgressRefused("ipv6-zone", f"{where} {shown(text)} has a zone id")
    if len(text) > MAX_BRACKETED_IPV6:
        raise EgressRefused("ipv6-form", f"{where} {shown(text)} is too long for an IPv6 address")
    return _ipv6(inner, text, where)


def _ipv6(inner: str, text: str, where: str) -> IPv6Address:
    if not _IPV6_TEXT.match(inner):
        raise EgressRefused("ipv6-form", f"{where} {shown(text)} holds characters IPv6 text does not")
    try:
        return IPv6Address(inner)
    except ValueError as error:
        raise EgressRefused("ipv6-form", f"{where} {shown(text)} is not IPv6: {escaped(str(error))}") from None


def _parse_name(text: str, where: str) -> str:
    if any(dot in text for dot in UNICODE_DOTS):
        raise EgressRefused("host-unicode-dot", f"{where} {shown(text)} separates labels with a non-ASCII dot")
    lowered = text.translate(_ASCII_LOWER)
    bare = lowered[:-1] if lowered.endswith(".") else lowered
    labels = bare.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        raise EgressRefused("ipv4-form", f"{where} {shown(text)} ends in a number but is not a dotted quad "
                                         "(octal, hex, short and dotless forms are refused)")
    if "" in labels:
        raise EgressRefused("host-label", f"{where} {shown(text)} has an empty label")
    name = ".".join(_a_label(label, text, where) for label in labels)
    if len(name) > MAX_NAME_LENGTH:
        raise EgressRefused("host-length", f"{where} {shown(text)} is {len(name)} characters as A-labels")
    if len(labels) == 1:
        raise EgressRefused("host-single-label", f"{where} {shown(text)} is a single label")
    for suffix, why in SPECIAL_USE_NAMES.items():
        if name == suffix or name.endswith("." + suffix):
            raise EgressRefused("host-special-use", f"{where} {shown(name)} is a special-use name ({why})")
    return name


def _a_label(label: str, text: str, where: str) -> str:
    """``label`` (ASCII letters already lower case) as its ASCII form, checked."""
    if label.isascii():
        if not _LDH_LABEL.match(label):
            rule = "host-label" if _LDH_CHARACTERS.match(label) else "host-chars"
            raise EgressRefused(rule, f"{where} {shown(text)} has the label {shown(label)}")
        if label.startswith("xn--"):
            try:
                unicode_label = idna.ulabel(label)
            except (idna.IDNAError, UnicodeError) as error:
                raise EgressRefused("host-idna", f"{where} {shown(text)}: {shown(label)} is not a valid "
                                                 f"A-label ({escaped(str(error))})") from None
            _check_u_label(unicode_label, label, text, where)
        return label
    return _check_u_label(label, None, text, where)


def _check_u_label(label: str, a_label: str | None, text: str, where: str) -> str:
    deviation = next((character for character in label if character in IDNA_DEVIATIONS), None)
    if deviation is not None:
        raise EgressRefused("host-idna", f"{where} {shown(text)} holds U+{ord(deviation):04X}, which IDNA 2003 "
                                         "and IDNA 2008 read differently")
    try:
        encoded = idna.alabel(label).decode("ascii")
        round_trip = idna.ulabel(encoded)
    except (idna.IDNAError, UnicodeError) as error:
        mapped = unicodedata.normalize("NFKC", text).translate(_ASCII_LOWER)
        hint = f"; a UTS 46 parser would read {shown(mapped)}" if mapped != text and mapped.isascii() else ""
        raise EgressRefused("host-idna", f"{where} {shown(text)} is not IDNA 2008 ({escaped(str(error))}){hint}") \
            from None
    if round_trip != label or (a_label is not None and encoded != a_label):
        raise EgressRefused("host-idna", f"{where} {shown(text)}: the label {shown(label)} does not round-trip "
                                         "through IDNA 2008")
    if len(encoded) > MAX_LABEL_LENGTH:
        raise EgressRefused("host-label", f"{where} {shown(text)} has a label over 63 characters as an A-label")
    return encoded
