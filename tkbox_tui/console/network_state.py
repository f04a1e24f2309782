"""``NetworkState``: what the network view shows, as a pure reducer over the daemon's ``egress.*`` events (no
Textual, no I/O).

One row per box, scheme, host and port (``HostKey``), from the urls the proxy's events carry (``https://host:443``,
``tcp://host:7007``, ``http://host:80/path?query``, the full url where the proxy reads the request): how many
connections were allowed, held for a person and refused, the bytes up and down of those that closed, when it was
last seen, the last outcome and its reason, and the row's latest urls.  A held connection that a person rejected or
that expired counts as held and, when the proxy then refuses it, as refused too; an approved one as held and
allowed.  A refusal that names only ``host:port`` (the proxy refused it before it knew the scheme) has its own
row, scheme ``""``; one that names no host at all (a request the proxy could not read) is counted per box.  Each
box's allowlist as its last ``egress.allowlist`` event says is kept too.

Bounded: at most ``HOSTS_KEPT`` rows in all (the least recently seen is dropped first, and ``dropped`` counts
them), ``RECENT_KEPT`` urls per row, ``BOXES_KEPT`` boxes; long texts are cut.  Urls and reasons are box-controlled
(a path, a name the box asked for) and kept as they came: ``network_text`` escapes them for the screen.
An event at or below the last sequence number seen changes nothing.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from tkbox_daemon.wire import Event

HOSTS_KEPT = 500
"""Rows (box, scheme, host, port) kept across every box; the least recently seen goes first."""
RECENT_KEPT = 20
"""Latest urls kept per row (the daemon's event history and the box's run keep them all)."""
BOXES_KEPT = 1_000
"""Boxes whose allowlist and unnamed refusals are kept."""
TEXT_KEPT = 2_048
"""Characters kept of a url, a reason or a hint (box-controlled: bounded before it is stored)."""
ENTRIES_KEPT = 1_000
"""Allowlist entries kept per box (the daemon's own limit, ``allowlist_entries``)."""
WAITING_KEPT = 64
"""Approval ids remembered per row as held right now."""
SCHEMES = ("https", "http", "tcp")
"""What a connection is, as its url says: ``https`` (a CONNECT tunnel carrying TLS), ``http`` (plain HTTP the
proxy reads), ``tcp`` (a CONNECT tunnel that is not TLS)."""
OUTCOMES = {"egress.allowed": "allowed", "egress.held": "held", "egress.approved": "approved",
            "egress.rejected": "rejected", "egress.expired": "expired", "egress.refused": "refused",
            "egress.closed": "closed"}
"""The event kinds that are about one connection, and the word each gives its outcome."""

_HOST = r"(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)"
_PORT = r"([1-9][0-9]{0,4})"
_URL = re.compile(rf"(https|http|tcp)://{_HOST}:{_PORT}((?:[/?].*)?)\Z", re.ASCII | re.DOTALL)
_TARGET = re.compile(rf"{_HOST}:{_PORT}\Z", re.ASCII)


@dataclass(frozen=True, order=True)
class HostKey:
    """One row: a box, a scheme (``SCHEMES``, or ``""`` when unknown), a host as the url writes it (a lower-case
    name, a dotted quad or ``[IPv6]``) and a port."""

    box_id: str
    scheme: str
    host: str
    port: int

    @property
    def row_key(self) -> str:
        """The row's key in a table (unique per key: no field holds a space)."""
        return f"{self.box_id} {self.scheme or '-'} {self.host} {self.port}"


@dataclass(frozen=True)
class UrlSeen:
    """One event of a row, for its list of latest urls: when, what (``OUTCOMES``' word), the url, a note (the
    address dialled, the approval, the reason, a closed connection's error) and a closed connection's bytes."""

    time: str
    outcome: str
    url: str
    note: str = ""
    up: int = 0
    down: int = 0


@dataclass
class HostRow:
    key: HostKey
    first_seq: int
    """The sequence number of the row's first event: rows are listed in this order (new ones at the bottom)."""
    allowed: int = 0
    held: int = 0
    refused: int = 0
    up: int = 0
    down: int = 0
    closed: int = 0
    last_seen: str = ""
    last_outcome: str = ""
    last_reason: str = ""
    last_hint: str = ""
    last_rule: str = ""
    """The rule of its last event when that was a refusal, else ""."""
    address: str = ""
    """The address last dialled for it (``egress.allowed``)."""
    waiting: dict[str, None] = field(default_factory=dict)
    """Approval ids of its connections held for a person now."""
    recent: deque[UrlSeen] = field(default_factory=lambda: deque(maxlen=RECENT_KEPT))


@dataclass
class BoxNetwork:
    """What a box's events say beyond its rows: its allowlist (None until an ``egress.allowlist`` event), the last
    change of it, refusals that named no host, events whose url this console could not read."""

    entries: tuple[str, ...] | None = None
    last_change: str = ""
    unnamed_refusals: int = 0
    last_unnamed_reason: str = ""
    unreadable: int = 0
    resolve_failed: tuple[str, str] | None = None
    """(host, reason) of the last name the host's resolver could not find: the refusal that follows says it."""


def split_url(url: str) -> tuple[str, str, int, str] | None:
    """``https://host:443`` → ``("https", "host", 443, "")``; ``http://h:80/p?q`` → ``("http", "h", 80, "/p?q")``.

    Exact: ``url`` is always ``f"{scheme}://{host}:{port}{rest}"`` of what it returns.  None for anything else
    (another scheme, no port, a port out of range or with a leading zero, a host that is not a name, a dotted
    quad or a bracketed IPv6 text)."""
    if not isinstance(url, str):
        return None
    match = _URL.match(url)
    if match is None or int(match[3]) > 65535:
        return None
    return match[1], match[2], int(match[3]), match[4]


def split_target(target: str) -> tuple[str, int] | None:
    """``host:443`` → ``("host", 443)`` (exact, like ``split_url``); None for anything else."""
    if not isinstance(target, str):
        return None
    match = _TARGET.match(target)
    if match is None or int(match[2]) > 65535:
        return None
    return match[1], int(match[2])


def _text(value: Any) -> str:
    return value[:TEXT_KEPT] if isinstance(value, str) else ""


def _count(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


class NetworkState:
    """The network view's model; ``apply`` is the only way events change it."""

    def __init__(self, hosts_kept: int = HOSTS_KEPT) -> None:
        self.hosts_kept = hosts_kept
        self.hosts: OrderedDict[HostKey, HostRow] = OrderedDict()
        """Every row kept, least recently seen first."""
        self.boxes: OrderedDict[str, BoxNetwork] = OrderedDict()
        self.dropped = 0
        """Rows dropped to stay within ``hosts_kept``."""
        self.last_seq = 0
        self.version = 0
        """Moves on at every change (a screen redraws when it differs from what it drew)."""

    # -- events -----------------------------------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        """Take one event; returns whether it changed anything (only ``egress.*`` events do)."""
        if not event.kind.startswith("egress.") or event.seq <= self.last_seq:
            return False
        self.last_seq = event.seq
        data = event.data
        if event.kind == "egress.allowlist":
            self._allowlist(event.box_id, data)
        elif event.kind == "egress.resolve_failed":
            if isinstance(data.get("host"), str):
                self._box(event.box_id).resolve_failed = (_text(data["host"]), _text(data.get("reason")))
        elif event.kind in OUTCOMES:
            self._connection(event, OUTCOMES[event.kind])
        else:
            return False
        self.version += 1
        return True

    def _connection(self, event: Event, outcome: str) -> None:
        data = event.data
        parts = split_url(data.get("url", ""))
        if parts is not None:
            scheme, host, port, _ = parts
        elif outcome == "refused" and (target := split_target(data.get("target", ""))) is not None:
            scheme, (host, port) = "", target
        elif outcome == "refused" and "url" not in data and "target" not in data:
            box = self._box(event.box_id)
            box.unnamed_refusals += 1
            box.last_unnamed_reason = _text(data.get("reason"))
            return
        else:
            self._box(event.box_id).unreadable += 1
            return
        row = self._row(HostKey(event.box_id, scheme, host, port), event.seq)
        row.last_seen = _text(event.time)
        row.last_outcome = outcome
        row.last_rule = ""
        url = _text(data.get("url")) or f"{host}:{port}"
        approval = _text(data.get("approval_id"))
        note = ""
        if outcome == "allowed":
            row.allowed += 1
            row.address = _text(data.get("address"))
            row.last_reason, row.last_hint = f"dialled {row.address}" if row.address else "", ""
            note = row.last_reason
        elif outcome == "held":
            row.held += 1
            if approval and len(row.waiting) < WAITING_KEPT:
                row.waiting[approval] = None
            row.last_reason, row.last_hint = f"waits for a person: approval {approval}", ""
            note = approval
        elif outcome in ("approved", "rejected", "expired"):
            row.waiting.pop(approval, None)
            row.last_reason = {"approved": "approved by a person", "rejected": "rejected by a person",
                               "expired": "nobody answered in time"}[outcome] + f": approval {approval}"
            row.last_hint = ""
            note = approval
        elif outcome == "refused":
            row.refused += 1
            row.last_reason = self._refusal_reason(event.box_id, host, data)
            row.last_hint = _text(data.get("hint"))
            row.last_rule = _text(data.get("rule"))
            note = row.last_reason
        else:  # closed
            up, down = _count(data.get("up")), _count(data.get("down"))
            row.up += up
            row.down += down
            row.closed += 1
            note = _text(data.get("error"))
            if note:
                row.last_reason, row.last_hint = f"closed: {note}", ""
            row.recent.append(UrlSeen(_text(event.time), outcome, url, note, up, down))
            return
        row.recent.append(UrlSeen(_text(event.time), outcome, url, note[:TEXT_KEPT]))

    def _refusal_reason(self, box_id: str, host: str, data: dict[str, Any]) -> str:
        rule, reason = _text(data.get("rule")), _text(data.get("reason"))
        text = f"{reason} ({rule})" if rule and reason else reason or rule or "refused"
        box = self.boxes.get(box_id)
        if box is not None and box.resolve_failed is not None and box.resolve_failed[0] == host:
            text += f"; the resolver said: {box.resolve_failed[1]}"
            box.resolve_failed = None
        return text[:TEXT_KEPT]

    def _allowlist(self, box_id: str, data: dict[str, Any]) -> None:
        box = self._box(box_id)
        entries = data.get("entries")
        if isinstance(entries, list):
            box.entries = tuple(_text(entry) for entry in entries[:ENTRIES_KEPT] if isinstance(entry, str))
        parts = [_text(data.get("action")) or "change"]
        for word in ("added", "removed"):
            items = data.get(word)
            if isinstance(items, list) and items:
                parts.append(f"{word} {', '.join(_text(item) for item in items[:20] if isinstance(item, str))}")
        if isinstance(data.get("by"), str):
            parts.append(f"by {_text(data['by'])}")
        box.last_change = " ".join(parts)[:TEXT_KEPT]

    def _box(self, box_id: str) -> BoxNetwork:
        box = self.boxes.get(box_id)
        if box is None:
            box = self.boxes[box_id] = BoxNetwork()
            if len(self.boxes) > BOXES_KEPT:
                self.boxes.popitem(last=False)
        else:
            self.boxes.move_to_end(box_id)
        return box

    def _row(self, key: HostKey, seq: int) -> HostRow:
        row = self.hosts.get(key)
        if row is not None:
            self.hosts.move_to_end(key)
            return row
        row = self.hosts[key] = HostRow(key, seq)
        while len(self.hosts) > self.hosts_kept:
            self.hosts.popitem(last=False)
            self.dropped += 1
        return row

    # -- what the view asks -----------------------------------------------------------------------------

    def rows(self, box_id: str | None = None) -> list[HostRow]:
        """The rows of ``box_id`` (every box's when None), first seen first."""
        return sorted((row for row in self.hosts.values() if box_id is None or row.key.box_id == box_id),
                      key=lambda row: row.first_seq)

    def box(self, box_id: str) -> BoxNetwork:
        """What the events said of ``box_id`` beyond its rows (empty when nothing)."""
        return self.boxes.get(box_id) or BoxNetwork()

    def row(self, key: HostKey) -> HostRow | None:
        return self.hosts.get(key)

    def find(self, box_id: str, scheme: str, host: str, port: int) -> HostRow | None:
        """The row of an attempt as the daemon's allowlist replay names it (its host with or without brackets)."""
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        for candidate in (bare, f"[{bare}]"):
            row = self.hosts.get(HostKey(box_id, scheme, candidate, port))
            if row is not None:
                return row
        return None
