"""ClientHellos for the egress TLS tests: real ones (Python's ssl, openssl s_client on loopback), hand-built ones,
a TLS server that reports the name it saw, and an independent minimal reader of every server_name entry.

The independent reader (``every_server_name``) shares no code with ``tkbox_daemon.egress``: it is deliberately
lenient (it reads whatever lengths say, keeps going past faults the proxy refuses) so that it lists every name a
server could pick, not only the one the proxy's strict parser reads.
"""

from __future__ import annotations

import datetime
import functools
import socket
import ssl
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

HELLO_RETRY_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")


# ---- real hellos -----------------------------------------------------------------------------------------------

def client_context(*, maximum: ssl.TLSVersion | None = None, alpn: list[str] | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if maximum is not None:
        context.maximum_version = maximum
    if alpn:
        context.set_alpn_protocols(alpn)
    return context


@dataclass
class PythonClient:
    """A TLS client on memory BIOs: ``hello`` is what it sent first; ``answer(bytes)`` feeds it the server's bytes
    and returns what it sends next."""

    tls: ssl.SSLObject
    incoming: ssl.MemoryBIO
    outgoing: ssl.MemoryBIO
    hello: bytes = b""
    done: bool = False

    def answer(self, data: bytes) -> bytes:
        self.incoming.write(data)
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        else:
            self.done = True
        return self.outgoing.read()


def python_client(server_hostname: str | None, context: ssl.SSLContext | None = None) -> PythonClient:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = (context or client_context()).wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    client = PythonClient(tls, incoming, outgoing)
    client.hello = client.answer(b"")
    return client


def python_hello(server_hostname: str | None, **options: object) -> bytes:
    """The first bytes Python's ssl (OpenSSL) sends for ``server_hostname``: one record holding the ClientHello."""
    return python_client(server_hostname, client_context(**options)).hello  # type: ignore[arg-type]


def openssl_hello(servername: str | None) -> bytes:
    """The ClientHello ``openssl s_client`` sends to a listener on 127.0.0.1 (loopback only)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        command = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}"]
        command += ["-servername", servername] if servername else ["-noservername"]
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        try:
            server.settimeout(60)
            connection, _ = server.accept()
            with connection:
                connection.settimeout(60)
                data = b""
                while not _whole_records(data):
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                return data
        finally:
            process.kill()
            process.wait()


def _whole_records(data: bytes) -> bool:
    at = 0
    while at + 5 <= len(data):
        at += 5 + struct.unpack(">H", data[at + 3:at + 5])[0]
    return at == len(data) and at > 0


# ---- hand-built hellos -----------------------------------------------------------------------------------------

def extension(kind: int, data: bytes) -> bytes:
    return struct.pack(">HH", kind, len(data)) + data


def sni_data(*names: bytes, name_type: int = 0) -> bytes:
    entries = b"".join(struct.pack(">BH", name_type, len(name)) + name for name in names)
    return struct.pack(">H", len(entries)) + entries


def sni(*names: bytes, name_type: int = 0) -> bytes:
    return extension(0, sni_data(*names, name_type=name_type))


# a TLS 1.2 hello that OpenSSL reads far enough to call its server-name callback
BASIC_EXTENSIONS = (extension(0x000A, bytes.fromhex("0004001d0017"))  # supported_groups x25519, secp256r1
                    + extension(0x000B, bytes.fromhex("0100"))  # ec_point_formats: uncompressed
                    + extension(0x000D, bytes.fromhex("000604030804 0401".replace(" ", ""))))  # signature_algorithms


def client_hello_body(extensions: bytes | None, *, version: int = 0x0303, session_id: bytes = b"",
                      suites: bytes = b"\xc0\x2f\xc0\x2b", compression: bytes = b"\x00") -> bytes:
    body = struct.pack(">H", version) + bytes(range(32))
    body += bytes([len(session_id)]) + session_id
    body += struct.pack(">H", len(suites)) + suites
    body += bytes([len(compression)]) + compression
    if extensions is not None:
        body += struct.pack(">H", len(extensions)) + extensions
    return body


def handshake(body: bytes, message_type: int = 1) -> bytes:
    return bytes([message_type]) + len(body).to_bytes(3, "big") + body


def client_hello(extensions: bytes | None, **fields: object) -> bytes:
    """A whole ClientHello handshake message (header and body) with ``extensions`` as its extensions block."""
    return handshake(client_hello_body(extensions, **fields))  # type: ignore[arg-type]


def records(message: bytes, sizes: list[int] | None = None, *, content_type: int = 22,
            version: int = 0x0301) -> bytes:
    """``message`` cut into records of ``sizes`` bytes (the last takes the rest; None: one record)."""
    out = b""
    at = 0
    for size in sizes or []:
        if at >= len(message):
            break
        out += struct.pack(">BHH", content_type, version, len(message[at:at + size])) + message[at:at + size]
        at += size
    if at < len(message):
        out += struct.pack(">BHH", content_type, version, len(message) - at) + message[at:]
    return out


def handshake_of(stream: bytes) -> bytes:
    """The concatenated payloads of the handshake records at the start of ``stream``."""
    out = b""
    at = 0
    while at + 5 <= len(stream) and stream[at] == 22:
        length = struct.unpack(">H", stream[at + 3:at + 5])[0]
        out += stream[at + 5:at + 5 + length]
        at += 5 + length
    return out


# ---- the independent reader -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    """What the lenient reader saw: every handshake message's type, and every server_name entry (type, name) of
    every server_name extension of every ClientHello among them."""

    message_types: tuple[int, ...]
    names: tuple[tuple[int, bytes], ...]


def every_server_name(stream: bytes) -> Reading:
    data = handshake_of(stream)
    types: list[int] = []
    names: list[tuple[int, bytes]] = []
    at = 0
    while at + 4 <= len(data):
        length = int.from_bytes(data[at + 1:at + 4], "big")
        types.append(data[at])
        if data[at] == 1:
            names += _names_in_hello(data[at + 4:at + 4 + length])
        at += 4 + length
    if at < len(data):
        types.append(-1)  # a fragment of a message
    return Reading(tuple(types), tuple(names))


def _names_in_hello(body: bytes) -> list[tuple[int, bytes]]:
    try:
        at = 2 + 32
        at += 1 + body[at]
        at += 2 + int.from_bytes(body[at:at + 2], "big")
        at += 1 + body[at]
        end = at + 2 + int.from_bytes(body[at:at + 2], "big")
        at += 2
    except IndexError:
        return []
    found = []
    while at + 4 <= min(end, len(body)):
        kind = int.from_bytes(body[at:at + 2], "big")
        length = int.from_bytes(body[at + 2:at + 4], "big")
        data = body[at + 4:at + 4 + length]
        at += 4 + length
        if kind == 0:
            entry = 2
            while entry + 3 <= len(data):
                size = int.from_bytes(data[entry + 1:entry + 3], "big")
                found.append((data[entry], data[entry + 3:entry + 3 + size]))
                entry += 3 + size
    return found


def plain_name(name: bytes) -> str:
    """A host name as compared: lower case, one trailing dot dropped (what the proxy documents)."""
    return (name[:-1] if name.endswith(b".") else name).decode("ascii", "replace").lower()


# ---- a server that says what name it saw ------------------------------------------------------------------------

@functools.cache
def _certificate_files() -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tls-hello-test")])
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(1).not_valid_before(start).not_valid_after(start + datetime.timedelta(days=36500))
                   .sign(key, hashes.SHA256()))
    folder = Path(tempfile.mkdtemp(prefix="tls-hellos-"))
    (folder / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                       serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return str(folder / "cert.pem"), str(folder / "key.pem")


def server_context(*, groups: str | None = None) -> ssl.SSLContext:
    """A TLS server context with a throwaway certificate; ``groups`` (one curve) makes a TLS 1.3 client that
    offered another key share get a HelloRetryRequest."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*_certificate_files())
    if groups:
        context.set_ecdh_curve(groups)
    return context


@dataclass
class PythonServer:
    tls: ssl.SSLObject
    incoming: ssl.MemoryBIO
    outgoing: ssl.MemoryBIO
    names: list[str | None]
    done: bool = False

    def answer(self, data: bytes) -> bytes:
        self.incoming.write(data)
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        else:
            self.done = True
        return self.outgoing.read()


def python_server(context: ssl.SSLContext | None = None) -> PythonServer:
    context = context or server_context()
    names: list[str | None] = []
    context.sni_callback = lambda _tls, name, _context: names.append(name)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    return PythonServer(context.wrap_bio(incoming, outgoing, server_side=True), incoming, outgoing, names)


def names_python_sees(hello: bytes) -> list[str | None] | None:
    """The server names OpenSSL's server side reports for ``hello`` (None in the list: no SNI); None when it refused
    the hello before asking."""
    server = python_server()
    try:
        server.answer(hello)
    except (ssl.SSLError, UnicodeError):
        pass
    return server.names or None


