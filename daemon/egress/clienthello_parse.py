"""Strict reading of one ClientHello body (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2) and of its server_name (RFC 6066 §3).

Every vector's length must fit its bounds and add up exactly to what contains it; no byte may follow the extensions.
``legacy_version`` is TLS 1.0..1.2 (TLS 1.3 sends 1.2 there), the session id at most 32 bytes, cipher suites an
even count of bytes (at least one suite), compression methods at least one and among them ``null``; each extension
type appears at most once (RFC 8446 §4.2 requires it of a TLS 1.3 hello; the proxy requires it of every hello so no
two readers can pick different copies) and ``pre_shared_key``, when present, is the last one. The body may end after
the compression methods (a TLS 1.0-1.2 hello without extensions).

``server_name`` must hold exactly one entry, of type ``host_name`` (0), a non-empty name: several entries, another
name type or an empty list are refused, since readers disagree on which entry counts. ``host_name_problem`` then
checks the name itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from .tls_verdicts import BAD_CLIENTHELLO, BAD_SNI, HelloRefused, shown

SERVER_NAME = 0x0000
PRE_SHARED_KEY = 0x0029
EARLY_DATA = 0x002A
HOST_NAME = 0x00

# Encrypted ClientHello and its forerunners: the outer hello's server_name would not be the server reached.
ECH_EXTENSIONS: dict[int, str] = {
    0xFE0D: "encrypted_client_hello (ECH, RFC 9849)",
    0xFD00: "ech_outer_extensions (ECH)",
    0xFE08: "encrypted_client_hello (ECH draft 08)",
    0xFE09: "encrypted_client_hello (ECH draft 09)",
    0xFE0A: "encrypted_client_hello (ECH draft 10)",
    0xFE0B: "encrypted_client_hello (ECH draft 11)",
    0xFE0C: "encrypted_client_hello (ECH draft 12)",
    0xFF02: "encrypted_client_hello (ECH draft 07 and earlier)",
    0xFFCE: "encrypted_server_name (ESNI)",
}

LEGACY_VERSIONS = {0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2"}
HOST_NAME_MAX = 253  # RFC 1035 §2.3.4, without the trailing dot
LABEL_MAX = 63
_LDH = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_HEX = frozenset(b"0123456789abcdefABCDEF")


@dataclass(frozen=True)
class ClientHelloFields:
    """What the proxy keeps of a ClientHello: ``extensions`` are the types in order, ``server_name`` the one entry's
    raw bytes (None when there is no server_name extension)."""

    legacy_version: int
    session_id: bytes
    cipher_suites: tuple[int, ...]
    compression_methods: bytes
    extensions: tuple[int, ...]
    server_name: bytes | None


class _Cursor:
    """Reads big-endian integers and length-prefixed vectors from ``data``, refusing any overrun."""

    def __init__(self, data: bytes, rule: str, where: str) -> None:
        self.data = data
        self.at = 0
        self.rule = rule
        self.where = where

    def left(self) -> int:
        return len(self.data) - self.at

    def take(self, count: int, what: str) -> bytes:
        if count > self.left():
            raise HelloRefused(self.rule, f"{self.where}: {what} needs {count} bytes, only {self.left()} are left")
        chunk = self.data[self.at:self.at + count]
        self.at += count
        return chunk

    def number(self, size: int, what: str) -> int:
        return int.from_bytes(self.take(size, what), "big")

    def vector(self, prefix: int, what: str, low: int, high: int) -> bytes:
        length = self.number(prefix, f"the length of {what}")
        if not low <= length <= high:
            raise HelloRefused(self.rule, f"{self.where}: {what} is {length} bytes, outside {low}..{high}")
        return self.take(length, what)


def parse_client_hello(body: bytes) -> ClientHelloFields:
    """Read a ClientHello's body (the handshake message without its 4-byte header); raise ``HelloRefused``."""
    cursor = _Cursor(body, BAD_CLIENTHELLO, "malformed ClientHello")
    legacy_version = cursor.number(2, "legacy_version")
    if legacy_version not in LEGACY_VERSIONS:
        raise HelloRefused(BAD_CLIENTHELLO, f"the ClientHello's legacy_version is 0x{legacy_version:04x}, not "
                                            "TLS 1.0..1.2 (0x0301..0x0303)")
    cursor.take(32, "random")
    session_id = cursor.vector(1, "legacy_session_id", 0, 32)
    suites = cursor.vector(2, "cipher_suites", 2, 0xFFFE)
    if len(suites) % 2:
        raise HelloRefused(BAD_CLIENTHELLO, f"malformed ClientHello: cipher_suites is {len(suites)} bytes, an odd "
                                            "count (each suite is 2 bytes)")
    compression = cursor.vector(1, "legacy_compression_methods", 1, 0xFF)
    if 0 not in compression:
        raise HelloRefused(BAD_CLIENTHELLO, "malformed ClientHello: legacy_compression_methods lacks null (0)")
    extensions: list[int] = []
    seen: set[int] = set()
    server_name = None
    if cursor.left():
        block = _Cursor(cursor.vector(2, "the extensions block", 0, 0xFFFF), BAD_CLIENTHELLO,
                        "malformed ClientHello extensions")
        if cursor.left():
            raise HelloRefused(BAD_CLIENTHELLO, f"malformed ClientHello: {cursor.left()} bytes follow the "
                                                "extensions block")
        while block.left():
            kind = block.number(2, "an extension type")
            data = block.vector(2, f"extension 0x{kind:04x}", 0, 0xFFFF)
            if kind in seen:
                raise HelloRefused(BAD_CLIENTHELLO, f"the ClientHello carries extension 0x{kind:04x} twice "
                                                    f"({_extension_name(kind)}); TLS allows each at most once")
            extensions.append(kind)
            seen.add(kind)
            if kind == SERVER_NAME:
                server_name = _parse_server_name(data)
        if PRE_SHARED_KEY in extensions and extensions[-1] != PRE_SHARED_KEY:
            raise HelloRefused(BAD_CLIENTHELLO, "malformed ClientHello: pre_shared_key is not the last extension "
                                                "(RFC 8446 section 4.2.11)")
    return ClientHelloFields(legacy_version, session_id, tuple(int.from_bytes(suites[i:i + 2], "big")
                                                               for i in range(0, len(suites), 2)),
                             compression, tuple(extensions), server_name)


def _extension_name(kind: int) -> str:
    if kind == SERVER_NAME:
        return "server_name"
    return ECH_EXTENSIONS.get(kind, "by number")


def _parse_server_name(data: bytes) -> bytes:
    cursor = _Cursor(data, BAD_SNI, "malformed server_name extension")
    entries = _Cursor(cursor.vector(2, "server_name_list", 1, 0xFFFF), BAD_SNI, "malformed server_name_list")
    if cursor.left():
        raise HelloRefused(BAD_SNI, f"malformed server_name extension: {cursor.left()} bytes follow its list")
    name_type = entries.number(1, "the name type")
    if name_type != HOST_NAME:
        raise HelloRefused(BAD_SNI, f"the server_name entry has name type {name_type}, not host_name (0)")
    name = entries.vector(2, "the host name", 0, 0xFFFF)
    if not name:
        raise HelloRefused(BAD_SNI, "the server_name entry's host name is empty")
    if entries.left():
        raise HelloRefused(BAD_SNI, "server_name holds more than one entry; the proxy reads exactly one host_name")
    return name


def host_name_problem(name: bytes) -> str | None:
    """What is wrong with ``name`` as a TLS server name, or None.

    An ASCII host name: labels of letters, digits and hyphens (LDH), 1..63 bytes each, 253 bytes at most. One
    trailing dot is allowed and means the same name (Python's ``ssl`` sends it when asked; curl strips it). A name
    whose last label is a number (decimal, or ``0x`` hex as URL parsers read it) is an IP literal, which RFC 6066
    forbids in server_name.
    """
    if b"\x00" in name:
        return f"the server name {shown(name)} contains a NUL byte"
    bare = name[:-1] if name.endswith(b".") else name
    if not bare:
        return f"the server name {shown(name)} is empty"
    if len(bare) > HOST_NAME_MAX:
        return f"the server name {shown(name)} is {len(bare)} bytes, over {HOST_NAME_MAX}"
    labels = bare.split(b".")
    for label in labels:
        if not 1 <= len(label) <= LABEL_MAX:
            return f"the server name {shown(name)} has a label of {len(label)} bytes (allowed 1..{LABEL_MAX})"
        if not _LDH.issuperset(label):
            return (f"the server name {shown(name)} has a byte that is not a letter, digit, hyphen or dot "
                    "(an IDN is sent as its xn-- form)")
    last = labels[-1]
    if last.isdigit() or (last[:2].lower() == b"0x" and _HEX.issuperset(last[2:])):
        return f"the server name {shown(name)} is an IP address literal, which RFC 6066 forbids in server_name"
    return None


def normalised_host_name(name: bytes) -> str:
    """A valid server name as compared: ASCII lower case, without the trailing dot."""
    return (name[:-1] if name.endswith(b".") else name).decode("ascii").lower()
