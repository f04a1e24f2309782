"""The egress proxy's asyncio shell: one box client connection, from its request head to its last byte.

Every rule lives in the sans-IO parts — the request head (``request``), the target (``target``), the address
checks (``ranges``), the decision order (``decision``), the ClientHello (``clienthello``) — and this shell only
moves bytes and answers their steps with its ``ProxyContext`` (the box's allowlist, resolver, signer, approvals,
records and events; tests pass fakes). A refusal before the tunnel is open is one kind of answer, ``HTTP/1.1 403``
with a body naming the door, the rule and what the operator can do; a refusal after it (the ClientHello) closes the
tunnel. Each connection that the signer decided is completed with the bytes carried up and down.

A ``CONNECT`` to a port the allowlist names exactly (``host:port``, not 443) is a raw tunnel decided as
``tcp://host:port``; every other ``CONNECT`` must carry TLS whose ClientHello names the CONNECT host (``https://``).
A ``CONNECT`` to port 80 is refused, so plain HTTP always arrives in the absolute form the proxy reads: one request
per connection, forwarded in origin form with exactly the decided path and query, its body framed by h11.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import h11

from ..limits import EGRESS_DIAL_TIME
from ..tasks import spawn
from .decision import Address, AskSigner, DecisionFlow, Dial, Hold, Refuse, Resolve, SignerVerdict
from .refusals import EgressRefused
from .relay import Counts, relay
from .request import HOP_BY_HOP_HEADERS, ProxyRequest, RequestHead, RequestRefused
from .target import Target, parse_absolute, parse_connect
from .tls_opening import Step, TlsOpening

HEAD_TIME = 30.0  # seconds a client has to send its request head
IDLE_TIME = 300.0  # seconds a tunnel may carry nothing before the proxy closes it
READ = 16 * 1024


@dataclass(frozen=True)
class Decided:
    """The signer's answer for one connection; ``source`` is the run recorder's decision (what an approval of
    it needs), None in tests."""

    verdict: SignerVerdict
    decision_id: str
    source: Any = None


class ProxyContext(Protocol):
    """What one box gives its proxy."""

    box_name: str
    inspect_all: bool

    def listed(self, target: Target, scheme: str) -> bool: ...
    def blocked(self, target: Target) -> str | None: ...  # the operator's block entry covering it, if any
    def attempt(self, target: Target, scheme: str, outcome: str) -> None: ...  # for the allowlist's replay
    def names_port(self, target: Target) -> bool: ...
    def check(self, address: Address) -> str | None: ...
    async def resolve(self, name: str, port: int) -> list[Address]: ...
    async def decide(self, url: str, listed: bool) -> Decided: ...  # WebFetch {"url", "listed"}
    async def hold(self, decided: Decided, target: Target, because: str, url: str) -> tuple[bool, str]: ...
    async def complete(self, decided: Decided, counts: Counts, error: str) -> None: ...
    def refused(self, refusal: Refuse, target: Target | None, detail: dict[str, Any]) -> None: ...
    def event(self, kind: str, data: dict[str, Any]) -> None: ...


_BOX_COMMAND = re.compile(r"\btkbox (allow|block|allowlist) BOX\b")


def for_box(hint: str, box_name: str) -> str:
    """A hint's ``tkbox allow BOX …`` (block, allowlist) with the box's own name, ready to paste."""
    return _BOX_COMMAND.sub(lambda match: f"tkbox {match[1]} {box_name}", hint)


def forbidden(box_name: str, refusal: Refuse, status: bytes = b"403 Forbidden") -> bytes:
    """The proxy's one refusal: a 403 (502 when the upstream would not connect) whose body names the door, the rule
    and what to do (its commands naming this box)."""
    hint = for_box(refusal.hint, box_name) if refusal.hint else ""
    body = (f"tkbox egress door refused this connection of box {box_name}\nrule: {refusal.rule}\n"
            f"reason: {refusal.reason}\n" + (f"what to do: {hint}\n" if hint else "")).encode(
        "ascii", "backslashreplace")
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; charset=us-ascii\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


Dialer = Callable[[Address, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def open_exactly(address: Address, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to this address, never a name (no lookup happens here)."""
    return await asyncio.wait_for(asyncio.open_connection(str(address), port), EGRESS_DIAL_TIME.default)


class ClientConnection:
    """One accepted client connection of a box (``handle`` runs it to its end)."""

    def __init__(self, context: ProxyContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 dial: Dialer = open_exactly) -> None:
        self.context, self.reader, self.writer, self.dial = context, reader, writer, dial
        self.head = RequestHead()
        self.target: Target | None = None
        self.decided: Decided | None = None

    async def handle(self) -> None:
        try:
            await self._handle()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _read_head(self) -> ProxyRequest:
        while True:
            data = await asyncio.wait_for(self.reader.read(READ), HEAD_TIME)
            request = self.head.feed(data)
            if request is not None:
                return request

    async def _refuse(self, refusal: Refuse, *, answered: bool = False, **detail: Any) -> None:
        self.context.refused(refusal, self.target, detail)
        if self.decided is not None:
            await self.context.complete(self.decided, Counts(), f"refused: {refusal.reason}")
        if not answered:
            self.writer.write(forbidden(self.context.box_name, refusal))
            await self.writer.drain()

    async def _handle(self) -> None:
        try:
            request = await self._read_head()
        except RequestRefused as exc:
            return await self._refuse(Refuse(exc.rule, str(exc), "send a CONNECT host:port or an absolute "
                                                                  "http:// request", before_signer=True))
        except TimeoutError:
            return await self._refuse(Refuse("egress-slow-request", "no whole request head within "
                                                                    f"{HEAD_TIME:.0f} s", before_signer=True))
        try:
            self.target = parse_target(request)
        except EgressRefused as exc:
            return await self._refuse(Refuse(exc.rule, str(exc), "send a well-formed host and port (docs/egress.md)",
                                             before_signer=True))
        target = self.target
        if request.is_connect:
            if target.port == 80:
                return await self._refuse(Refuse("egress-connect-80", "CONNECT to port 80 is refused: plain HTTP "
                                                 "goes through the proxy as an absolute-form request",
                                                 "unset the client's tunnelling option for http (curl: no "
                                                 "--proxytunnel)", before_signer=True))
            raw = target.port != 443 and self.context.names_port(target)
            scheme = "tcp" if raw else "https"
            url = target.decision_url(tls=not raw)
        else:
            scheme, raw = "http", False
            url = target.decision_url() + target.path
        upstream = await self._decide(url, scheme)
        if upstream is None:
            return
        counts, error = Counts(), ""
        try:
            if request.is_connect:
                self.writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await self.writer.drain()
                error = await self._tunnel(upstream, counts, tls=not raw)
            else:
                error = await self._forward_http(request, upstream, counts)
        finally:
            upstream[1].close()
            assert self.decided is not None
            await self.context.complete(self.decided, counts, error)
            self.context.event("egress.closed", {"url": url, "up": counts.up, "down": counts.down,
                                                 **({"error": error} if error else {})})

    async def _decide(self, url: str, scheme: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        target = self.target
        assert target is not None
        block = self.context.blocked(target)
        if block is not None:
            self.context.attempt(target, scheme, "refused_off_list")
            await self._refuse(Refuse("egress-blocked", f"{target.authority} is blocked for this box ({block})",
                                      f"lift the block with: tkbox allow BOX {target.host_text}",
                                      before_signer=True), url=url)
            return None
        listed = self.context.listed(target, scheme)
        literal = None if isinstance(target.host, str) else target.host
        flow = DecisionFlow(host=str(target.host), port=target.port, url=url, literal=literal, listed=listed,
                            check=self.context.check, inspect_all=self.context.inspect_all)
        step = flow.start()
        while True:
            if isinstance(step, Refuse):
                if not flow.held_because:
                    self.context.attempt(target, scheme, "refused_off_list" if step.rule == "egress-off-list"
                                         else "refused")
                await self._refuse(step, url=url)
                return None
            if isinstance(step, Resolve):
                try:
                    addresses = await self.context.resolve(step.name, step.port)
                except (OSError, TimeoutError) as exc:
                    self.context.event("egress.resolve_failed", {"host": step.name, "reason": str(exc)})
                    self.context.attempt(target, scheme, "refused")
                    await self._refuse(Refuse("egress-resolve", f"{step.name} could not be resolved on the host: "
                                                                f"{exc or exc.__class__.__name__}",
                                              "pin the name with --resolve NAME=ADDR (tkbox run)",
                                              before_signer=flow.verdict is None), url=url)
                    return None
                step = flow.resolved(addresses)
            elif isinstance(step, AskSigner):
                self.decided = await self.context.decide(step.url, listed)
                step = flow.decided(self.decided.verdict)
            elif isinstance(step, Hold):
                assert self.decided is not None
                approved, reason = await self.context.hold(self.decided, target, step.because, flow.url)
                step = flow.answered(approved, reason)
            else:
                assert isinstance(step, Dial)
                try:
                    upstream = await self.dial(step.address, step.port)
                except (OSError, TimeoutError) as exc:
                    refusal = Refuse("egress-dial", f"{target.host_text} ({step.address}) port {step.port} did not accept "
                                                    f"the connection: {exc.__class__.__name__}", "")
                    self.writer.write(forbidden(self.context.box_name, refusal, b"502 Bad Gateway"))
                    await self.writer.drain()
                    self.context.refused(refusal, target, {"url": url})
                    assert self.decided is not None
                    await self.context.complete(self.decided, Counts(), refusal.reason)
                    return None
                if not flow.held_because:
                    self.context.attempt(target, scheme, "allowed")
                self.context.event("egress.allowed", {"url": url, "address": str(step.address)})
                return upstream

    async def _tunnel(self, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter], counts: Counts, *,
                      tls: bool) -> str:
        early = self.head.tunnel_bytes()
        if tls:
            error = await self._tls_opening(upstream, counts, early)
            if error:
                return error
        elif early:
            upstream[1].write(early)
            await upstream[1].drain()
            counts.up += len(early)
        await relay((self.reader, self.writer), upstream, idle=IDLE_TIME, counts=counts)
        return ""

    async def _tls_opening(self, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter], counts: Counts,
                           early: bytes) -> str:
        """Until the TLS opening is checked (``tls_opening``): the client's bytes go up only as ``TlsOpening``
        releases them (its ClientHello, and after a HelloRetryRequest the second one, each naming the CONNECT
        host); the server's go to the client as they come. "" once the tunnel is open, else why it was closed."""
        target = self.target
        assert target is not None
        opening = TlsOpening(str(target.host))
        step = opening.from_client(early) if early else Step()
        from_client: asyncio.Task[bytes] | None = None
        from_server: asyncio.Task[bytes] | None = None
        try:
            while True:
                if step.to_server:
                    upstream[1].write(step.to_server)
                    await upstream[1].drain()
                    counts.up += len(step.to_server)
                if step.refused is not None:
                    refusal = Refuse(step.refused.rule, step.refused.message,
                                     "the client must speak TLS whose ClientHello names the CONNECT host")
                    self.context.refused(refusal, target, {"url": target.decision_url(tls=True)})
                    return f"refused: {step.refused.message}"
                if step.open:
                    await self._deliver_finished(from_client, upstream[1], counts, up=True)
                    await self._deliver_finished(from_server, self.writer, counts, up=False)
                    return ""
                from_client = from_client or spawn(self.reader.read(READ), name="egress-opening-client")
                from_server = from_server or spawn(upstream[0].read(READ), name="egress-opening-server")
                done, _ = await asyncio.wait({from_client, from_server}, timeout=HEAD_TIME,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    return "the TLS opening did not finish in time"
                if from_server in done:
                    data, from_server = from_server.result(), None
                    if not data:
                        return "the server closed during the TLS opening"
                    self.writer.write(data)
                    await self.writer.drain()
                    counts.down += len(data)
                    step = opening.from_server(data)
                    continue
                data, from_client = from_client.result(), None
                if not data:
                    return "the client closed during the TLS opening"
                step = opening.from_client(data)
        finally:
            for task in (from_client, from_server):
                if task is not None:
                    task.cancel()

    @staticmethod
    async def _deliver_finished(task: asyncio.Task[bytes] | None, sink: asyncio.StreamWriter, counts: Counts, *,
                                up: bool) -> None:
        """A read that finished as the opening ended: its bytes go on, so the relay after it loses none."""
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return
        data = task.result()
        if data:
            sink.write(data)
            await sink.drain()
            if up:
                counts.up += len(data)
            else:
                counts.down += len(data)

    async def _forward_http(self, request: ProxyRequest, upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                            counts: Counts) -> str:
        """One request, in origin form with the decided path, its body as h11 frames it; then the response."""
        target = self.target
        assert target is not None
        client = h11.Connection(h11.CLIENT)
        headers = [(name, value) for name, value in request.headers if name not in HOP_BY_HOP_HEADERS]
        headers.append((b"connection", b"close"))
        out = client.send(h11.Request(method=request.method, target=target.path, headers=headers))
        while True:
            event = self.head.connection.next_event()
            if event is h11.NEED_DATA:
                data = await asyncio.wait_for(self.reader.read(READ), IDLE_TIME)
                self.head.connection.receive_data(data)
                continue
            if isinstance(event, h11.Data):
                out += client.send(h11.Data(data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                out += client.send(h11.EndOfMessage())
                break
            else:
                return "the client's request body ended early"
            if len(out) >= READ:
                upstream[1].write(out)
                counts.up += len(out)
                await upstream[1].drain()
                out = b""
        upstream[1].write(out)
        counts.up += len(out)
        await upstream[1].drain()
        while data := await asyncio.wait_for(upstream[0].read(READ * 4), IDLE_TIME):
            self.writer.write(data)
            counts.down += len(data)
            await self.writer.drain()
        return ""


def parse_target(request: ProxyRequest) -> Target:
    """The request's target, strictly (``target``); raises ``EgressRefused``."""
    if request.is_connect:
        return parse_connect(request.target)
    return parse_absolute(request.target, [value for name, value in request.headers if name == b"host"])
