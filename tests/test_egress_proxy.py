"""The egress proxy's shell with a fake box context and a loopback upstream: what the client is answered, what the
upstream receives (exactly the decided path, one request), what is decided, held, completed and refused."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon.egress.decision import Refuse, SignerVerdict
from tkbox_daemon.egress.proxy import ClientConnection, Decided
from tkbox_daemon.egress.relay import Counts

PUBLIC = ipaddress.ip_address("11.0.0.7")


@dataclass
class FakeContext:
    box_name: str = "b1"
    inspect_all: bool = False
    allow: set = field(default_factory=lambda: {("files.example", 80), ("files.example", 443)})
    raw_ports: set = field(default_factory=set)
    verdict: str = "allow"
    approve: bool = True
    decisions: list = field(default_factory=list)
    holds: list = field(default_factory=list)
    held_urls: list = field(default_factory=list)
    completions: list = field(default_factory=list)
    refusals: list = field(default_factory=list)
    events: list = field(default_factory=list)
    resolved: list = field(default_factory=list)
    attempts: list = field(default_factory=list)

    def listed(self, target, scheme):
        return (str(target.host), target.port) in self.allow

    def blocked(self, target):
        return "the entry !blocked.example" if str(target.host) == "blocked.example" else None

    def attempt(self, target, scheme, outcome):
        self.attempts.append((str(target.host), scheme, outcome))

    def names_port(self, target):
        return (str(target.host), target.port) in self.raw_ports

    def check(self, address):
        return "is private" if address.is_private else None

    async def resolve(self, name, port):
        self.resolved.append(name)
        return [PUBLIC]

    async def decide(self, url, listed):
        self.decisions.append(url)
        verdict = "ask" if not listed and self.verdict == "allow" else self.verdict  # the default pack's TK-A008
        return Decided(SignerVerdict(verdict, ("TK-T",) if verdict != "allow" else (), "test"),
                       f"dec-{len(self.decisions)}")

    async def hold(self, decided, target, because, url):
        self.holds.append((target.host, because))
        self.held_urls.append(url)
        return self.approve, "rejected by the test"

    async def complete(self, decided, counts, error):
        self.completions.append((decided.decision_id, counts.up, counts.down, error))

    def refused(self, refusal: Refuse, target, detail: dict[str, Any]):
        self.refusals.append(refusal.rule)

    def event(self, kind, data):
        self.events.append(kind)


@pytest.fixture
async def upstream():
    """A loopback HTTP upstream that answers each request with what it received, and a raw echo mode."""
    received: list[bytes] = []

    async def serve(reader, writer):
        data = await reader.readuntil(b"\r\n\r\n")
        if data.startswith(b"ECHO"):
            writer.write(data)
            while chunk := await reader.read(1024):
                writer.write(chunk)
        else:
            received.append(data)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield port, received
    server.close()
    await server.wait_closed()


async def run(context, upstream_port, request: bytes, *, more: bytes = b"") -> bytes:
    client_reader = asyncio.StreamReader()
    client_reader.feed_data(request + more)
    client_reader.feed_eof()
    sent = bytearray()

    class Writer:
        def write(self, data):
            sent.extend(data)

        async def drain(self):
            pass

        def close(self):
            pass

        async def wait_closed(self):
            pass

        def can_write_eof(self):
            return False

    async def dial(address, port):
        assert address == PUBLIC
        return await asyncio.open_connection("127.0.0.1", upstream_port)

    await ClientConnection(context, client_reader, Writer(), dial=dial).handle()  # type: ignore[arg-type]
    return bytes(sent)


async def test_plain_http_goes_up_in_origin_form_with_the_decided_path_once(upstream):
    port, received = upstream
    context = FakeContext()
    answer = await run(context, port, b"GET http://files.example/a/b?c=1 HTTP/1.1\r\nhost: files.example\r\n\r\n"
                                      b"GET http://files.example/smuggled HTTP/1.1\r\nhost: files.example\r\n\r\n")
    assert answer.endswith(b"ok") and answer.startswith(b"HTTP/1.1 200 OK")
    assert context.decisions == ["http://files.example:80/a/b?c=1"]
    assert len(received) == 1 and received[0].startswith(b"GET /a/b?c=1 HTTP/1.1\r\n")
    assert b"connection: close" in received[0].lower() and b"smuggled" not in b"".join(received)
    assert context.completions[0][0] == "dec-1" and context.completions[0][2] > 0


async def test_an_off_list_host_is_held_and_not_resolved_before_its_approval(upstream):
    port, _ = upstream
    context = FakeContext(approve=False)
    answer = await run(context, port, b"GET http://other.example/ HTTP/1.1\r\nhost: other.example\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 Forbidden") and b"egress-not-approved" in answer
    assert context.holds == [("other.example", "off_list")] and context.resolved == []
    assert context.held_urls == context.decisions == ["http://other.example:80/"]
    assert context.completions == [("dec-1", 0, 0, context.completions[0][3])]


async def test_a_refused_target_gets_a_403_naming_the_rule_and_nothing_is_decided(upstream):
    port, _ = upstream
    context = FakeContext()
    answer = await run(context, port, b"CONNECT evil@files.example:443 HTTP/1.1\r\nhost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 Forbidden") and b"rule: target-userinfo" in answer
    assert context.decisions == [] and context.refusals == ["target-userinfo"]


async def test_connect_to_port_80_and_origin_form_requests_are_refused(upstream):
    port, _ = upstream
    for request, rule in ((b"CONNECT files.example:80 HTTP/1.1\r\nhost: files.example:80\r\n\r\n", b"egress-connect-80"),
                          (b"GET /x HTTP/1.1\r\nhost: files.example\r\n\r\n", b"egress-bad-target")):
        context = FakeContext()
        answer = await run(context, port, request)
        assert answer.startswith(b"HTTP/1.1 403") and rule in answer and context.decisions == []


async def test_a_raw_tunnel_only_to_an_entry_naming_its_port(upstream):
    port, _ = upstream
    context = FakeContext(allow={("files.example", 9000)}, raw_ports={("files.example", 9000)})
    answer = await run(context, port, b"CONNECT files.example:9000 HTTP/1.1\r\nhost: files.example:9000\r\n\r\n",
                       more=b"ECHO\r\n\r\nhello")
    assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\n") and answer.endswith(b"ECHO\r\n\r\nhello")
    assert context.decisions == ["tcp://files.example:9000"]
    (_, up, down, error), = context.completions
    assert up == len(b"ECHO\r\n\r\nhello") and down == up and error == ""


async def test_a_held_raw_tunnel_is_asked_about_as_the_tcp_url_the_signer_decided(upstream):
    port, _ = upstream
    context = FakeContext(allow={("files.example", 9000)}, raw_ports={("files.example", 9000)}, verdict="ask")
    answer = await run(context, port, b"CONNECT files.example:9000 HTTP/1.1\r\nhost: files.example:9000\r\n\r\n",
                       more=b"ECHO\r\n\r\nhello")
    assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\n") and answer.endswith(b"hello")
    assert context.held_urls == context.decisions == ["tcp://files.example:9000"]


async def test_a_blocked_host_is_refused_before_the_signer_and_never_held(upstream):
    port, _ = upstream
    context = FakeContext()
    answer = await run(context, port, b"GET http://blocked.example/ HTTP/1.1\r\nhost: blocked.example\r\n\r\n")
    assert b"egress-blocked" in answer and context.decisions == [] and context.holds == []
    assert context.attempts == [("blocked.example", "http", "refused_off_list")]


async def test_a_denied_connection_is_refused_and_completed_as_refused(upstream):
    port, _ = upstream
    context = FakeContext(verdict="deny")
    answer = await run(context, port, b"GET http://files.example/ HTTP/1.1\r\nhost: files.example\r\n\r\n")
    assert b"egress-denied" in answer and context.completions[0][3].startswith("refused: ")


def test_counts_start_empty():
    assert Counts().up == 0


@pytest.fixture
async def tls_upstream():
    """A loopback TLS server that answers one line with its upper-case copy."""
    from tests.tls_hellos import server_context

    async def serve(reader, writer):
        line = await reader.readline()
        writer.write(line.upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context())
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def _through_proxy(context, upstream_port: int, server_hostname: str) -> bytes:
    """A real TLS client (in a thread) through a real proxy listener on loopback."""
    import socket
    import ssl

    async def dial(address, port):
        return await asyncio.open_connection("127.0.0.1", upstream_port)

    handled: list[asyncio.Future] = []

    async def handle(reader, writer):
        done = asyncio.get_running_loop().create_future()
        handled.append(done)
        await ClientConnection(context, reader, writer, dial=dial).handle()
        done.set_result(None)

    proxy = await asyncio.start_server(handle, "127.0.0.1", 0)
    proxy_port = proxy.sockets[0].getsockname()[1]

    def client() -> bytes:
        with socket.create_connection(("127.0.0.1", proxy_port), timeout=30) as raw:
            raw.sendall(b"CONNECT files.example:443 HTTP/1.1\r\nhost: files.example:443\r\n\r\n")
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += raw.recv(1)
            assert head.startswith(b"HTTP/1.1 200"), head
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
            try:
                with tls.wrap_socket(raw, server_hostname=server_hostname) as wrapped:
                    wrapped.sendall(b"hello\n")
                    return wrapped.recv(100)
            except (ssl.SSLError, OSError) as exc:
                return f"failed: {exc.__class__.__name__}".encode()

    try:
        answer = await asyncio.to_thread(client)
        await asyncio.wait_for(asyncio.gather(*handled), 30)  # the proxy's side has ended and recorded
        return answer
    finally:
        proxy.close()
        await proxy.wait_closed()


async def test_a_tls_tunnel_whose_hello_names_the_connect_host_is_relayed(tls_upstream):
    context = FakeContext()
    assert await _through_proxy(context, tls_upstream, "files.example") == b"HELLO\n"
    assert context.decisions == ["https://files.example:443"] and context.refusals == []
    (_, up, down, error), = context.completions
    assert up > 0 and down > 0 and error == ""


async def test_a_tls_tunnel_naming_another_server_is_closed_before_any_byte_goes_up(tls_upstream):
    context = FakeContext()
    answer = await _through_proxy(context, tls_upstream, "other.example")
    assert answer.startswith(b"failed: ") and context.refusals == ["egress-sni-mismatch"]
    (_, up, _, error), = context.completions
    assert up == 0 and error.startswith("refused: ")


PATH_CHARACTERS = st.sampled_from(list("abcXYZ019-._~!$&'()*+,;=:@/?") + ["%2F", "%41", "%7e"])
PATHS = st.lists(PATH_CHARACTERS, max_size=30).map(lambda parts: "/" + "".join(parts))


@settings(max_examples=60, deadline=None)
@given(PATHS)
async def test_the_upstream_receives_exactly_the_decided_path_and_query(path):
    received: list[bytes] = []

    async def serve(reader, writer):
        received.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        context = FakeContext()
        answer = await run(context, server.sockets[0].getsockname()[1],
                           f"GET http://files.example{path} HTTP/1.1\r\nhost: files.example\r\n\r\n".encode())
    finally:
        server.close()
        await server.wait_closed()
    if answer.startswith(b"HTTP/1.1 403"):  # a path the target parser refuses (a dot segment): nothing went up
        assert received == [] and context.decisions == []
        return
    (decided,) = context.decisions
    (request,) = received
    assert decided == f"http://files.example:80{path}"
    assert request.split(b"\r\n", 1)[0] == f"GET {path} HTTP/1.1".encode()
