"""Connection targets as the egress proxy receives them, read strictly: ``CONNECT host:port``, absolute-form
``http://host[:port]/path?query`` with its Host header, and the ``WebFetch`` url the signer decides.

What a URL parser (WHATWG), ``urllib.parse`` and curl would read differently is refused (the host rules are in
``hostnames``):

- ``user@host`` userinfo: ``http://allowed.com@evil.com/`` reaches evil.com; ``@`` is refused anywhere in an
  authority.  A backslash is refused anywhere: WHATWG reads ``http://evil.com\\@allowed.com`` as host evil.com and
  ``\\`` in a path as ``/``; curl and ``urllib`` keep it.
- Ports: decimal 1-65535 only; ``:+80``, ``:0080`` (WHATWG reads 80, some parsers refuse), ``:80:443`` (curl
  and ``urllib`` split at different colons), ``:`` with nothing after it (WHATWG: the default port) are refused.
  CONNECT must name its port.
- Absolute-form: the scheme is ``http`` (any case) followed by exactly ``//``; ``http:/host``, ``http:\\\\host``
  and ``http:///host``, which WHATWG repairs, are refused, and ``https://`` must come through CONNECT.  The
  path is origin-form: ``/`` then RFC 3986 characters with valid ``%XX`` escapes and no ``.`` or ``..``
  segments (also as ``%2e``), which clients remove and servers may resolve; an empty path is ``/`` (RFC 9112
  §3.2.2).  A fragment is refused: it is never sent.  The Host header must be present once and name the same
  host and port (80 when absent).
- Tab, CR and LF (WHATWG strips them anywhere in a URL), other controls and spaces are refused anywhere.

A ``Target``'s host is absolute; resolve ``name + "."`` so that no search domain is appended.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv6Address

from ..limits import EGRESS_TARGET_LENGTH
from .hostnames import Host, check_characters, parse_host
from .refusals import EgressRefused, shown

KINDS = ("connect", "http", "https", "tcp")  # "http" is absolute-form; "https" and "tcp" come only from urls
DEFAULT_HTTP_PORT = 80

_PORT = re.compile(r"[1-9][0-9]{0,4}\Z", re.ASCII)
_PATH = re.compile(r"/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*\Z", re.ASCII)
_DOT_SEGMENT = re.compile(r"(?:\.|%2e){1,2}\Z", re.ASCII | re.IGNORECASE)
_DECISION_URL = re.compile(r"(https|http|tcp)://([^/?#]*)\Z", re.ASCII)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:", re.ASCII)


@dataclass(frozen=True)
class Target:
    """One connection target: what the proxy connects to, and for absolute-form the path and query it forwards."""

    kind: str  # one of KINDS
    host: Host  # lower-case ASCII name (A-labels, no trailing dot), IPv4Address or IPv6Address
    port: int
    path: str = ""  # absolute-form: origin-form path and query exactly as forwarded; "" otherwise

    @property
    def host_text(self) -> str:
        """The host as a URL writes it: the name, the dotted quad, or ``[IPv6]`` in RFC 5952 form."""
        if isinstance(self.host, IPv6Address):
            return f"[{ipv6_text(self.host)}]"
        return str(self.host)

    @property
    def authority(self) -> str:
        return f"{self.host_text}:{self.port}"

    def decision_url(self, *, tls: bool | None = None) -> str:
        """The ``WebFetch`` url: ``https://host:port`` or ``tcp://host:port`` for a CONNECT tunnel (``tls`` says
        whether it starts with a TLS ClientHello), ``http://host:port`` for absolute-form."""
        if self.kind == "connect":
            if tls is None:
                raise ValueError("a CONNECT target's url depends on whether the tunnel is TLS: pass tls=")
            return f"{'https' if tls else 'tcp'}://{self.authority}"
        if tls is not None:
            raise ValueError(f"tls= is only for CONNECT targets, not {self.kind}")
        return f"{self.kind}://{self.authority}"


def ipv6_text(address: IPv6Address) -> str:
    """RFC 5952 text, the same on every Python (3.13 changed how ``str`` writes IPv4-mapped addresses)."""
    mapped = address.ipv4_mapped
    return f"::ffff:{mapped}" if mapped is not None else address.compressed


def parse_connect(target: str | bytes) -> Target:
    """A ``CONNECT`` request target (authority-form ``host:port``)."""
    text = _text(target, "the CONNECT target")
    for character, rule in (("#", "target-fragment"), ("@", "target-userinfo")):
        if character in text:
            raise EgressRefused(rule, f"the CONNECT target {shown(text)} holds {character!r}")
    if "/" in text or "?" in text:
        raise EgressRefused("target-form", f"the CONNECT target {shown(text)} holds a scheme or a path")
    host, port = _authority(text, "the CONNECT host")
    if port is None:
        raise EgressRefused("port-missing", f"the CONNECT target {shown(text)} names no port")
    return Target("connect", host, port)


def parse_absolute(url: str | bytes, host_headers: Sequence[str | bytes]) -> Target:
    """An absolute-form request target (``http://host[:port]/path?query``) and the request's Host header values.

    ``host_headers`` holds every Host header of the request, so that a request with none or several is refused.
    """
    text = _text(url, "the URL")
    if "#" in text:
        raise EgressRefused("target-fragment", f"the URL {shown(text)} has a fragment")
    if text[:7].lower() != "http://":
        if text[:8].lower() == "https://":
            raise EgressRefused("target-scheme", f"the URL {shown(text)} is https")
        if _SCHEME.match(text) and not text[:5].lower() == "http:":
            raise EgressRefused("target-scheme", f"the URL {shown(text)} is not http")
        raise EgressRefused("target-form", f"the URL {shown(text)} does not start with http://")
    rest = text[7:]
    end = len(rest)
    for stop in "/?":
        found = rest.find(stop)
        if found >= 0:
            end = min(end, found)
    authority, path = rest[:end], rest[end:]
    if "@" in authority:
        raise EgressRefused("target-userinfo", f"the URL {shown(text)} has userinfo ('@') before its host")
    host, port = _authority(authority, "the URL's host")
    port = DEFAULT_HTTP_PORT if port is None else port
    path = path or "/"
    _check_path(path, text)
    _check_host_header(host_headers, host, port)
    return Target("http", host, port, path)


def parse_decision_url(url: str) -> Target:
    """A ``WebFetch`` url as ``Target.decision_url`` writes it; anything else, even an equivalent, is refused."""
    if not isinstance(url, str) or len(url) > EGRESS_TARGET_LENGTH.default:
        raise EgressRefused("decision-url", "the url is not a string of at most "
                                            f"{EGRESS_TARGET_LENGTH.default} characters")
    match = _DECISION_URL.match(url)
    if match is None:
        raise EgressRefused("decision-url", f"{shown(url)} is not https://, http:// or tcp:// host:port")
    host, port = _authority(match.group(2), "the url's host")
    if port is None:
        raise EgressRefused("decision-url", f"{shown(url)} names no port")
    target = Target(match.group(1), host, port)
    if target.decision_url() != url:
        raise EgressRefused("decision-url", f"{shown(url)} is not canonical: {target.decision_url()}")
    return target


def _text(value: str | bytes, where: str) -> str:
    if isinstance(value, bytes):
        if len(value) > EGRESS_TARGET_LENGTH.default:
            raise EgressRefused("target-length", f"{where} is {len(value)} bytes (limit "
                                                 f"{EGRESS_TARGET_LENGTH.name}: {EGRESS_TARGET_LENGTH.default})")
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise EgressRefused("target-encoding", f"{where} is not UTF-8") from None
    elif not isinstance(value, str):
        raise TypeError(f"{where} must be str or bytes, not {type(value).__name__}")
    if len(value.encode("utf-8", "surrogatepass")) > EGRESS_TARGET_LENGTH.default:
        raise EgressRefused("target-length", f"{where} is over {EGRESS_TARGET_LENGTH.default} bytes (limit "
                                             f"{EGRESS_TARGET_LENGTH.name})")
    if not value:
        raise EgressRefused("host-empty", f"{where} is empty")
    check_characters(value, where)
    if "\\" in value:
        raise EgressRefused("target-backslash", f"{where} {shown(value)} holds a backslash")
    return value


def _authority(text: str, where: str) -> tuple[Host, int | None]:
    """Split ``host[:port]`` and read both parts."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise EgressRefused("ipv6-form", f"{where} {shown(text)} opens a bracket it never closes")
        host = parse_host(text[:close + 1], where=where)
        rest = text[close + 1:]
        if rest and not rest.startswith(":"):
            raise EgressRefused("port-invalid", f"{where} {shown(text)} has {shown(rest)} after ']'")
        port_text = rest[1:] if rest else None
    else:
        colons = text.count(":")
        if colons > 1:
            raise EgressRefused("authority-colons", f"{where} {shown(text)} has {colons} colons")
        host_text, _, port_text = text.partition(":")
        host = parse_host(host_text, where=where)
        port_text = port_text if colons else None
    return host, None if port_text is None else _port(port_text, text, where)


def _port(port_text: str, text: str, where: str) -> int:
    if not _PORT.match(port_text) or int(port_text) > 65535:
        raise EgressRefused("port-invalid", f"{where} {shown(text)} has the port {shown(port_text)}")
    return int(port_text)


def _check_path(path: str, url: str) -> None:
    if not path.startswith("/"):
        raise EgressRefused("target-path", f"the URL {shown(url)} has a query but no path")
    if not _PATH.match(path):
        raise EgressRefused("target-path", f"the URL {shown(url)} has characters or escapes RFC 3986 does not "
                                           "allow in a path or query")
    segments = path.partition("?")[0].split("/")
    if any(_DOT_SEGMENT.match(segment) for segment in segments):
        raise EgressRefused("target-path", f"the URL {shown(url)} has a '.' or '..' segment")


def _check_host_header(host_headers: Sequence[str | bytes], host: Host, port: int) -> None:
    if isinstance(host_headers, (str, bytes)):
        raise TypeError("host_headers is the sequence of every Host header value")
    if len(host_headers) != 1:
        raise EgressRefused("host-header", f"the request has {len(host_headers)} Host headers")
    text = _text(host_headers[0], "the Host header")
    if any(character in text for character in "/?#"):
        raise EgressRefused("host-header", f"the Host header {shown(text)} holds more than host[:port]")
    if "@" in text:
        raise EgressRefused("target-userinfo", f"the Host header {shown(text)} holds '@'")
    header_host, header_port = _authority(text, "the Host header")
    header_port = DEFAULT_HTTP_PORT if header_port is None else header_port
    if (header_host, header_port) != (host, port):
        shown_url = Target("http", host, port).authority
        raise EgressRefused("host-header", f"the Host header {shown(text)} differs from the URL's {shown_url}")
