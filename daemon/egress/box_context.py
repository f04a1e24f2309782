"""What one box gives its egress proxy (``proxy.ProxyContext``): its allowlist, pins and address checks, its run
for the ``WebFetch`` decisions and their completions, its approvals for held hosts, its records and events.

- Decisions: ``WebFetch {"url", "listed"}`` in the box's run; no run (an unrecorded daemon, a closed run) is a
  denial, never an allow. Completions carry the bytes up and down, the host's own word.
- A held host is an approval of kind ``host`` (``asked``: host, port, url; ``context``: the execs running then,
  since any of them may have opened it); remembered rules work per host.
- Refusals the proxy makes before the signer is asked are ``tkbox.egress`` observations (trusted, must-keep), at
  most ``EGRESS_REFUSALS_PER_SECOND`` a second per box, then one summary of how many were left out; every refusal
  is an ``egress.refused`` event.
- Addresses: ``ranges.classify`` with the operator's ``--egress-block`` ranges and the host's own addresses
  (re-read at most every few seconds; unreadable means refused). Names: the box's pins first, else the host's
  resolver, once, for ``name.`` (no search domain).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterable
from ipaddress import ip_address
from typing import TYPE_CHECKING, Any

from ..approvals.registry import LimitReached, refusal_reason
from ..limits import EGRESS_REFUSALS_PER_SECOND, EGRESS_RESOLVED_ADDRESSES
from ..tasks import spawn
from .allowlist import Attempt
from .decision import Address, Refuse, SignerVerdict
from .hostaddrs import HostAddresses, HostAddressesUnreadable
from .pins import pinned
from .proxy import ClientConnection, Decided, for_box
from .ranges import IPNetwork, classify
from .relay import Counts
from .target import Target

if TYPE_CHECKING:
    from ..boxes.box import Box

WEBFETCH = "WebFetch"
EGRESS_SOURCE = "tkbox.egress"
RESOLVE_TIME = 10.0  # seconds the host's resolver has for one name


class RefusalRecords:
    """At most ``per_second`` refusal records a second; the rest counted and recorded as one summary."""

    def __init__(self, record: Any, per_second: int = EGRESS_REFUSALS_PER_SECOND.default,
                 clock: Any = time.monotonic) -> None:
        self.record, self.per_second, self.clock = record, per_second, clock
        self.second = -1
        self.in_second = 0
        self.left_out = 0

    def add(self, value: dict[str, Any]) -> None:
        second = int(self.clock())
        if second != self.second:
            if self.left_out:
                self.record({"left_out": self.left_out, "limit": EGRESS_REFUSALS_PER_SECOND.name})
            self.second, self.in_second, self.left_out = second, 0, 0
        if self.in_second < self.per_second:
            self.in_second += 1
            self.record(value)
        else:
            self.left_out += 1


class BoxEgress:
    def __init__(self, box: Box, *, host_addresses: HostAddresses, extra_blocked: Iterable[IPNetwork] = ()) -> None:
        self.box = box
        self.box_name = box.settings.name
        self.inspect_all = box.settings.inspect == "all"
        self.host_addresses = host_addresses
        self.extra_blocked = tuple(extra_blocked)
        self.records = RefusalRecords(self._record_refusal)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The box's ``EgressHandler``: one client connection through the proxy."""
        await ClientConnection(self, reader, writer).handle()

    # ---- the allowlist and the addresses ----------------------------------------------------------------------
    def listed(self, target: Target, scheme: str) -> bool:
        return self.box.egress_allowlist.match(target.host, target.port, scheme) is not None

    def blocked(self, target: Target) -> str | None:
        entry = self.box.egress_allowlist.blocked(target.host, target.port)
        return None if entry is None else f"the entry {entry.text}"

    def attempt(self, target: Target, scheme: str, outcome: str) -> None:
        self.box.allowlist.note_attempt(Attempt(str(target.host), target.port, scheme, outcome))

    def names_port(self, target: Target) -> bool:
        return self.box.egress_allowlist.names_port(target.host, target.port) is not None

    def check(self, address: Address) -> str | None:
        try:
            own = self.host_addresses.current()
        except HostAddressesUnreadable as exc:
            return f"is not checkable against the host's own addresses ({exc})"
        refusal = classify(address, extra_blocked=self.extra_blocked, host_addresses=own)
        return None if refusal is None else refusal.predicate

    async def resolve(self, name: str, port: int) -> list[Address]:
        pins = pinned(self.box.settings.resolve, name)
        if pins is not None:
            return pins
        loop = asyncio.get_running_loop()
        answers = await asyncio.wait_for(loop.getaddrinfo(name + ".", port, type=socket.SOCK_STREAM), RESOLVE_TIME)
        found: list[Address] = []
        for *_, sockaddr in answers:
            address = ip_address(sockaddr[0])
            if address not in found:
                found.append(address)
        if len(found) > EGRESS_RESOLVED_ADDRESSES.default:
            raise OSError(f"{name} resolves to over {EGRESS_RESOLVED_ADDRESSES.default} addresses (limit "
                          f"{EGRESS_RESOLVED_ADDRESSES.name})")
        return found

    # ---- the run ---------------------------------------------------------------------------------------------
    async def decide(self, url: str, listed: bool) -> Decided:
        recorder = self.box.recorder
        if recorder is None:
            return Decided(SignerVerdict("deny", ("TK-UNRECORDED",), "this daemon records nothing, so no host is "
                                                                      "reached"), "")
        decision = await recorder.decide(WEBFETCH, {"url": url, "listed": listed})
        return Decided(SignerVerdict(decision.decision, decision.rule_ids, decision.reason),
                       decision.decision_id or "", decision)

    async def hold(self, decided: Decided, target: Target, because: str, url: str) -> tuple[bool, str]:
        """Hold the connection as an approval of kind ``host``; ``url`` is the one the signer decided (``tcp://`` for
        a raw tunnel, the full url of a plain HTTP request)."""
        if decided.source is None or not decided.decision_id:
            return False, "no decision to ask a person about"
        running = sorted(session.kept.info.id for session in self.box.execs if session.kept is not None)
        asked = {"host": target.host_text, "port": target.port, "url": url, "because": because}
        approvals = self.box.approvals
        try:
            approval = await approvals.request(decided.source, asked=asked, program=str(target.host),
                                               context={"execs_running": running}, kind="host")
        except LimitReached as exc:
            return False, str(exc)
        scheme = url.partition(":")[0]
        if approval.info.pending:
            self.event("egress.held", {"url": asked["url"], "approval_id": approval.info.id})
            held = self.box.allowlist.note_held(Attempt(str(target.host), target.port, scheme, "held"))
            try:
                await approvals.wait(approval)
            except asyncio.CancelledError:
                spawn(approvals.withdraw(approval, "its connection went away"),
                      name=f"approval-withdraw-{approval.info.id}")
                raise
            finally:
                self.box.allowlist.release(held)
        info = approval.info
        approved = info.state == "approved"
        self.attempt(target, scheme,
                     info.state if info.state in ("approved", "rejected", "expired", "withdrawn") else "refused")
        self.event("egress.approved" if approved else f"egress.{'expired' if info.state == 'expired' else 'rejected'}",
                   {"url": asked["url"], "approval_id": info.id, "state": info.state})
        return approved, "" if approved else refusal_reason(info)

    async def complete(self, decided: Decided, counts: Counts, error: str) -> None:
        recorder = self.box.recorder
        if recorder is None or not decided.decision_id:
            return
        if decided.verdict.decision != "allow" and error.startswith("refused"):
            return  # it never ran: a denied or unanswered decision is not completed as if it had
        await recorder.complete_egress(decided.decision_id, up=counts.up, down=counts.down, error=error)

    # ---- records and events ----------------------------------------------------------------------------------
    def refused(self, refusal: Refuse, target: Target | None, detail: dict[str, Any]) -> None:
        hint = for_box(refusal.hint, self.box_name) if refusal.hint else ""
        data = {"rule": refusal.rule, "reason": refusal.reason, **({"hint": hint} if hint else {}),
                **({"target": target.authority} if target is not None else {}), **detail}
        self.event("egress.refused", data)
        if refusal.before_signer:
            self.records.add({"rule": refusal.rule, "reason": refusal.reason[:512],
                              **({"target": target.authority} if target is not None else {})})

    def _record_refusal(self, value: dict[str, Any]) -> None:
        recorder = self.box.recorder
        if recorder is not None and not recorder.closed:
            recorder.observe_must_keep(EGRESS_SOURCE, value, trust="trusted")

    def event(self, kind: str, data: dict[str, Any]) -> None:
        self.box.emit(kind, data)
