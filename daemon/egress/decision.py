"""The order in which one egress connection is decided (paper fig. 4), as a sans-IO state machine.

    parsed target ─▶ listed name or IP literal? ── yes ─▶ resolve (pins first) ─▶ every address allowed? ─▶ signer
                          │ no (a name off the list: not resolved, the lookup itself would leak it)      │
                          └──────────────────────────▶ signer (args say listed: false) ─▶ ask ─▶ [inspect: all refuses]
                                                         hold for a person ─▶ approved ─▶ resolve ─▶ check ─▶ dial
    signer: deny ─▶ refused; ask ─▶ hold for a person ─▶ approved ─▶ as allow

A host off the allowlist is held because the policy asks about it: the default pack's TK-A008 answers ``ask`` for
a ``WebFetch`` whose args say ``"listed": false``, so the person's answer is an ordinary approval of an ``ask``
decision, recorded and verified like a command's. A pack that allows an off-list host without asking is refused
here: the allowlist means nothing if no one is asked about the hosts it leaves out.

The flow asks for what it needs as steps (``Resolve``, ``AskSigner``, ``Hold``, ``Dial``, ``Refuse``) and is told
the answers (``resolved``, ``decided``, ``answered``). It never resolves, dials or records: the shell does, and
dials exactly the address the flow returns (never the name again), so a name cannot rebind between check and
connect. Address checks are the caller's ``check`` function (``ranges``), applied to every address a name
resolves to and to an IP literal before the signer is asked.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..wire_egress import ADDRESS_REFUSED_RULE

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressCheck = Callable[[Address], "str | None"]  # None, or why it is refused: a predicate ("is in ...", "carries ...")


@dataclass(frozen=True)
class Resolve:
    """Look the name up (pins first); answer with ``resolved``."""

    name: str
    port: int


@dataclass(frozen=True)
class AskSigner:
    """Ask the signer for a ``WebFetch`` decision on ``url``; answer with ``decided``."""

    url: str


@dataclass(frozen=True)
class Hold:
    """Hold the connection for a person (an approval of kind ``host``, for the signer's ``ask``); answer with
    ``answered``. ``because``: ``off_list`` (the host is not on the allowlist) or ``policy`` (another rule asks)."""

    because: str


@dataclass(frozen=True)
class Dial:
    """Connect to exactly this address and port."""

    address: Address
    port: int


@dataclass(frozen=True)
class Refuse:
    """Refuse the connection: ``rule`` is stable, ``reason`` says why, ``hint`` what the operator can do;
    ``before_signer`` refusals are the proxy's own (recorded as ``tkbox.egress``, rate-limited)."""

    rule: str
    reason: str
    hint: str = ""
    before_signer: bool = False


Step = Resolve | AskSigner | Hold | Dial | Refuse


@dataclass(frozen=True)
class SignerVerdict:
    decision: str  # allow | ask | deny, as the door acts on it
    rule_ids: tuple[str, ...] = ()
    reason: str = ""


class DecisionFlow:
    """One connection's decision. ``host``: the target's host as parsed (a lower-case name, or an IP literal's
    text); ``literal``: the address when the target is an IP literal; ``listed``: whether the allowlist names
    the host and port; ``inspect_all``: the box refuses off-list names at once instead of asking a person."""

    def __init__(self, *, host: str, port: int, url: str, literal: Address | None, listed: bool,
                 check: AddressCheck, inspect_all: bool = False) -> None:
        self.host, self.port, self.url = host, port, url
        self.literal, self.listed = literal, listed
        self.check, self.inspect_all = check, inspect_all
        self.address: Address | None = None
        self.verdict: SignerVerdict | None = None
        self.held_because = ""
        self._expect = "start"

    def _want(self, state: str) -> None:
        if self._expect != state:
            raise RuntimeError(f"the decision flow expected {self._expect}, not {state}")

    def start(self) -> Step:
        self._want("start")
        if self.literal is not None:
            refused = self._checked([self.literal], before_signer=True)
            if refused is not None:
                return refused
            self.address = self.literal
            return self._ask()
        if self.listed:
            self._expect = "resolved"
            return Resolve(self.host, self.port)
        return self._ask()

    def _ask(self) -> AskSigner:
        self._expect = "decided"
        return AskSigner(self.url)

    def resolved(self, addresses: Sequence[Address]) -> Step:
        self._want("resolved")
        refused = self._checked(addresses, before_signer=self.verdict is None)
        if refused is not None:
            self._expect = "done"
            return refused
        self.address = addresses[0]
        if self.verdict is None:
            return self._ask()
        return self._dial()

    def _checked(self, addresses: Sequence[Address], *, before_signer: bool) -> Refuse | None:
        """Every address must pass: one refused address refuses the name (a rebinding name's private answer among
        public ones is exactly the attack)."""
        if not addresses:
            return Refuse("egress-no-address", f"{self.host} has no address", "check the name, or pin it with "
                          "--resolve NAME=ADDR", before_signer=before_signer)
        for address in addresses:
            why = self.check(address)
            if why is not None:
                shown = self.host if str(address) == self.host else f"{self.host} ({address})"
                return Refuse(ADDRESS_REFUSED_RULE, f"{shown} {why}: boxes never reach it",
                              "nothing to allow: the proxy refuses these addresses whatever the allowlist says",
                              before_signer=before_signer)
        return None

    def decided(self, verdict: SignerVerdict) -> Step:
        self._want("decided")
        self.verdict = verdict
        if verdict.decision == "deny":
            self._expect = "done"
            rules = f" ({', '.join(verdict.rule_ids)})" if verdict.rule_ids else ""
            return Refuse("egress-denied", f"denied by the policy{rules}: {verdict.reason}",
                          "change the policy pack if this host should be reachable")
        off_list = not self.listed  # an IP literal off the list is held like a name (never a way around the list)
        if off_list and self.inspect_all:
            self._expect = "done"
            return Refuse("egress-off-list", f"{self.host}:{self.port} is not on the box's allowlist, and this box "
                                             "inspects all traffic (no host is held for a person)",
                          f"allow it with: tkbox allow BOX {self.host}")
        if verdict.decision == "ask":
            return self._hold("off_list" if off_list else "policy")
        if off_list:
            self._expect = "done"
            return Refuse("egress-off-list", f"{self.host}:{self.port} is not on the box's allowlist and the policy "
                                             "allowed it without asking a person",
                          f"allow it with: tkbox allow BOX {self.host}; or use a pack that asks about hosts off the "
                          "allowlist (the default pack's TK-A008)")
        return self._dial()

    def _hold(self, because: str) -> Hold:
        self.held_because = because
        self._expect = "answered"
        return Hold(because)

    def answered(self, approved: bool, reason: str = "") -> Step:
        self._want("answered")
        if not approved:
            self._expect = "done"
            return Refuse("egress-not-approved", f"{self.host}:{self.port} was not approved: {reason}",
                          f"allow it for the box with: tkbox allow BOX {self.host}")
        if self.address is None:
            self._expect = "resolved"
            return Resolve(self.host, self.port)
        return self._dial()

    def _dial(self) -> Dial:
        assert self.address is not None
        self._expect = "done"
        return Dial(self.address, self.port)
