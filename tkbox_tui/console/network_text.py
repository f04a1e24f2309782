"""Pure presentation of the network view: its rows, the selected row's details and latest urls, the allowlist entry
an allow or a block sends, and the confirm that says what an allow would have let through (no widgets).

Hosts, urls, reasons and the daemon's notes are box-controlled or may be (a path, a name the box asked for): every
piece leaves here through ``safe_text``, and widgets show it as ``Text``.
"""

from __future__ import annotations

from tkbox_daemon.wire_egress import ADDRESS_REFUSED_RULE, AllowlistChangeInfo

from ..terminal_text import clip, safe_text
from .network_state import BoxNetwork, HostKey, HostRow, NetworkState
from .page_text import format_bytes

COLUMNS = ("scheme", "host", "port", "allowed", "held", "refused", "last", "seen", "up", "down", "reason")
"""The network view's columns for one box; the all-boxes view puts ``box`` first."""
HOST_CELL = 32
BOX_CELL = 16
REASON_CELL = 48
URL_SHOWN = 600
"""Characters of one url in the latest urls (a copy with ``y`` has it whole)."""
REPLAY_URLS = 3
"""Urls shown under each earlier connection the confirm lists."""
OUTCOME_TOKENS = {"allowed": "verdict-allow", "approved": "verdict-allow", "closed": "verdict-allow",
                  "held": "verdict-ask", "refused": "verdict-deny", "rejected": "verdict-deny",
                  "expired": "verdict-deny"}
"""The theme token each outcome's word is coloured with."""
DEFAULT_PORTS = {"https": 443, "http": 80}
ATTEMPT_OUTCOMES = {"held": "held for a person", "rejected": "held, then rejected", "expired": "held, nobody answered",
                    "withdrawn": "held, the client went away", "refused_off_list": "refused: off the list"}
"""How the daemon's replay names why an earlier attempt was kept in (``would_let_through[].outcome``)."""


def columns(all_boxes: bool) -> tuple[str, ...]:
    return ("box", *COLUMNS) if all_boxes else COLUMNS


def clock(time: str) -> str:
    """``HH:MM:SS`` of an RFC 3339 time (as the event log shows it), escaped; ``-`` when none."""
    return safe_text(time[11:19] if len(time) >= 19 else time) or "-"


def scheme_text(key: HostKey) -> str:
    return key.scheme or "?"


def host_cells(row: HostRow, box_name: str | None = None) -> tuple[str, ...]:
    """One row of the view, in ``columns(box_name is not None)`` order, escaped and cut (the details have it
    whole)."""
    cells = (scheme_text(row.key), clip(safe_text(row.key.host), HOST_CELL), str(row.key.port), str(row.allowed),
             str(row.held), str(row.refused), row.last_outcome or "-", clock(row.last_seen), format_bytes(row.up),
             format_bytes(row.down), clip(safe_text(row.last_reason) or "-", REASON_CELL))
    return cells if box_name is None else (clip(safe_text(box_name), BOX_CELL), *cells)


def allow_entry(key: HostKey) -> str:
    """The allowlist entry an allow of this row sends: ``host`` for HTTPS on 443 or plain HTTP on 80 (that entry
    permits both), else ``host:port`` (a tunnel that is not TLS, or another port, needs its port named)."""
    if key.scheme and DEFAULT_PORTS.get(key.scheme) == key.port:
        return key.host
    return f"{key.host}:{key.port}"


def block_entry(key: HostKey) -> str:
    """What a block of this row sends: the host alone (a block without a port covers every port of it)."""
    return key.host


def entry_meaning(entry: str) -> str:
    """What an allow entry lets through, in words (``docs/egress.md``)."""
    bracketed = entry.startswith("[")
    if (bracketed and "]:" in entry) or (not bracketed and ":" in entry):
        return f"port {safe_text(entry.rpartition(':')[2])} only, whatever it carries (HTTPS, plain HTTP or a " \
               "tunnel that is not TLS)"
    return "HTTPS on port 443 and plain HTTP on port 80"


def outcome_line(row: HostRow) -> str:
    parts = [f"{row.allowed} allowed", f"{row.held} held", f"{row.refused} refused"]
    if row.waiting:
        parts.append(f"{len(row.waiting)} waiting now ({', '.join(safe_text(a) for a in list(row.waiting)[:5])})")
    return ", ".join(parts)


def detail_lines(row: HostRow, box_label: str, box: BoxNetwork) -> list[tuple[str, str]]:
    """The selected row as (label, escaped value) pairs, whole, then its latest urls, newest first."""
    key = row.key
    lines = [("target", f"{scheme_text(key)} {safe_text(key.host)} port {key.port}"),
             ("box", box_label),
             ("counts", outcome_line(row)),
             ("bytes", f"up {format_bytes(row.up)}, down {format_bytes(row.down)} over {row.closed} closed "
                       "connection(s)"),
             ("last", f"{row.last_outcome or '-'} at {clock(row.last_seen)}: {safe_text(row.last_reason) or '-'}")]
    if row.last_hint:
        lines.append(("hint", safe_text(row.last_hint)))
    if row.address:
        lines.append(("address", safe_text(row.address)))
    allow = ("a: nothing to allow (the proxy refuses this address whatever the list says)"
             if row.last_rule == ADDRESS_REFUSED_RULE else
             f"a allows {safe_text(allow_entry(key))} ({entry_meaning(allow_entry(key))})")
    lines.append(("keys", f"{allow}; b blocks {safe_text(block_entry(key))} on every port"))
    lines += [("urls" if index == 0 else "", text) for index, text in enumerate(recent_lines(row))]
    lines += allowlist_lines(box)
    return lines


def recent_lines(row: HostRow) -> list[str]:
    """The row's latest urls, newest first: ``12:00:03 refused http://h:80/p — why``."""
    lines = []
    for seen in reversed(row.recent):
        note = f"up {format_bytes(seen.up)}, down {format_bytes(seen.down)}" if seen.outcome == "closed" else ""
        note = "; ".join(part for part in (note, safe_text(seen.note)) if part)
        note = f" — {note}" if note else ""
        lines.append(f"{clock(seen.time)} {seen.outcome:<8} {clip(safe_text(seen.url), URL_SHOWN)}{note}")
    return lines or ["-"]


def allowlist_lines(box: BoxNetwork) -> list[tuple[str, str]]:
    if box.entries is None:
        return [("allowlist", "not known yet (no egress.allowlist event seen for this box)")]
    shown = ", ".join(safe_text(entry) for entry in box.entries) or "empty: nothing goes out without a person"
    lines = [("allowlist", clip(shown, 2_000))]
    if box.last_change:
        lines.append(("changed", safe_text(box.last_change)))
    return lines


def title_text(state: NetworkState, box_label: str | None, rows: int) -> str:
    """The view's title: whose, how many rows, and the bound (with how many rows it dropped)."""
    whose = f"box {box_label}" if box_label is not None else "all boxes"
    text = f"Network of {whose}  ·  {rows} host{'s' * (rows != 1)}  ·  the {state.hosts_kept} seen last are kept"
    if state.dropped:
        text += f" ({state.dropped} older dropped)"
    return text


def box_note(box: BoxNetwork) -> str:
    """What the title's second line says of a box's refusals that named no host and urls not read."""
    parts = []
    if box.unnamed_refusals:
        parts.append(f"{box.unnamed_refusals} refusal(s) named no host (last: {safe_text(box.last_unnamed_reason)})")
    if box.unreadable:
        parts.append(f"{box.unreadable} event(s) with a url this console does not read")
    return "; ".join(parts)


def replay_lines(change: AllowlistChangeInfo, state: NetworkState, box_id: str) -> list[str]:
    """The earlier connections of the box that the change would have let through (the daemon's replay against
    the box's own attempts), each with the urls this console saw for it."""
    lines = []
    for attempt in change.would_let_through:
        host, port, kind = attempt.get("host"), attempt.get("port"), attempt.get("kind")
        outcome = attempt.get("outcome")
        if not isinstance(host, str) or type(port) is not int or not isinstance(kind, str):
            lines.append(f"  {safe_text(str(attempt))[:200]}")
            continue
        why = ATTEMPT_OUTCOMES.get(outcome, safe_text(outcome)) if isinstance(outcome, str) else "?"
        lines.append(f"  {safe_text(kind)} {safe_text(host)} port {port}: {why}")
        row = state.find(box_id, kind, host, port)
        if row is not None:
            kept_in: dict[str, str] = {}  # url -> when last held or refused, newest first
            for seen in reversed(row.recent):
                if seen.outcome in ("held", "refused") and seen.url not in kept_in:
                    kept_in[seen.url] = seen.time
            lines += [f"      {clock(time)} {clip(safe_text(url), 200)}"
                      for url, time in list(kept_in.items())[:REPLAY_URLS]]
    return lines


def allow_confirm_text(entry: str, change: AllowlistChangeInfo, state: NetworkState, box_id: str) -> str:
    """The confirm before an allow: the entry and what it lets through, what the daemon's dry run would change, and
    the earlier connections of this box it would have let through."""
    lines = [f"The entry {safe_text(entry)} lets through {entry_meaning(entry)}.", "",
             "The daemon's dry run (nothing changed yet):"]
    if change.added:
        lines.append("  adds:    " + ", ".join(safe_text(item) for item in change.added))
    if change.removed:
        lines.append("  removes: " + ", ".join(safe_text(item) for item in change.removed))
    lines += [f"  note:    {safe_text(note)}" for note in change.notes]
    lines.append("")
    replay = replay_lines(change, state, box_id)
    if replay:
        lines.append(f"Earlier connections of this box it would have let through ({len(change.would_let_through)}):")
        lines += replay
    else:
        lines.append("Of this box's earlier connections that were held or refused because of the list, it would "
                     "have let none through.")
    lines += ["", "The change is recorded in the box's run (tkbox.allowlist) and applies from the next connection."]
    return "\n".join(lines)


def change_summary(change: AllowlistChangeInfo, box_label: str) -> str:
    """What a change the daemon made (or found nothing to do for) says, in one notification."""
    parts = []
    if change.added:
        parts.append("added " + ", ".join(safe_text(item) for item in change.added))
    if change.removed:
        parts.append("removed " + ", ".join(safe_text(item) for item in change.removed))
    head = f"{safe_text(change.action)} in box {box_label}: " + ("; ".join(parts) if parts else "nothing changed")
    notes = [safe_text(note) for note in change.notes]
    recorded = "recorded in the box's run" if change.applied else ""
    return "\n".join(part for part in (head, *notes, recorded) if part)


def copy_text(lines: list[tuple[str, str]]) -> str:
    """The selected row's details as ``y`` copies them: escaped, as shown."""
    return "\n".join(f"{label:<10} {value}" if label else f"{'':<10} {value}" for label, value in lines) + "\n"
