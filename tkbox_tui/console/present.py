"""Pure presentation: box and event → table cells, log lines, labels and hyphen state classes (no widgets).

Every piece of box-controlled text (names, reasons, paths, event kinds and data) leaves here through
``safe_text``: control characters, escape sequences and invisible format characters are shown as escapes
(``\\x1b``, ``\\u202e``), never passed to the terminal.  Rich markup is the widgets' business: they show these
strings as ``Text`` (or markup-escaped where a widget insists on parsing markup).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from rich.text import Text

from tkbox_daemon.wire import BoxInfo, Event

from ..terminal_text import clip, safe_text

BOX_COLUMNS = ("name", "state", "image", "age", "left", "execs", "conns", "approvals", "last event")
# Kinds whose log lines stand out: the daemon refused or could not record something.
ALERT_KINDS = frozenset({"exec.denied", "exec.refused", "box.failed", "gap", "signer.unavailable",
                         "daemon.unrecorded", "guest.protocol_error", "guest.ended", "box.lost", "daemon.registry",
                         "egress.refused", "box.oom", "box.disk_full", "events.missing"})


def parse_time(value: str) -> datetime | None:
    """An ISO-8601 time from the daemon, or None when absent or malformed."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def format_duration(seconds: float) -> str:
    """``42s``, ``3m``, ``2h05m``, ``4d`` — short enough for a table cell."""
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d"


def box_age(box: BoxInfo, now: datetime) -> str:
    created = parse_time(box.created_at)
    return format_duration((now - created).total_seconds()) if created else "-"


def box_time_left(box: BoxInfo, now: datetime) -> str:
    expires = parse_time(box.expires_at)
    if expires is None or box.state in ("stopped", "failed", "lost", "removed"):
        return "-"
    return format_duration((expires - now).total_seconds())


def state_class(state: str) -> str:
    """The hyphen class for a box state (``-running``); the stylesheet colours it with ``$box-running``."""
    return f"-{state}" if state else "-unknown"


def state_cell(shown_state: str, theme_variables: dict[str, str]) -> Text:
    """The state cell for ``shown_state`` (the escaped state of ``box_cells``), coloured with the theme's
    ``box-<state>`` token; a ``Text``, so never read as markup."""
    token = "box-failed" if shown_state == "lost" else f"box-{shown_state}"  # a lost box alarms as a failed one
    return Text(shown_state or "?", style=theme_variables.get(token, ""))


def box_cells(box: BoxInfo, now: datetime) -> tuple[str, ...]:
    """The row for one box, in ``BOX_COLUMNS`` order (state as plain text; the table colours it), escaped."""
    return (
        safe_text(box.name),
        safe_text(box.state),
        safe_text(box.image),
        box_age(box, now),
        box_time_left(box, now),
        f"{safe_text(box.execs_running)}/{safe_text(box.execs_total)}",
        safe_text(box.connections_open),
        safe_text(box.approvals_pending),
        safe_text(box.last_event or "-"),
    )


DRAWN_DATA_LIMIT = 120
"""The characters of an event's payload its log line draws (the filter searches all of it: ``event_search_text``)."""
SEARCH_VALUE_LIMIT = 65_536
"""The characters of each key and each value of a payload that the filter searches; bounds the work per event."""


def value_text(value: object) -> str:
    """A payload value as text, unescaped: a string as itself, anything else as JSON (``null``, ``false``,
    ``["net.deny"]``, ``{"outcome": "reported"}``), spelled as ``tkbox events`` spells it."""
    if isinstance(value, str):
        return value
    if type(value) is int:  # the commonest value after a string (exit codes, sizes): JSON writes it so
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # not from JSON (a test's or a caller's object): its str
        return str(value)


def _pairs(data: dict[str, Any], each: int) -> str:
    """``key=value`` pairs, each key and value cut to ``each`` characters before it is escaped (escaping only
    lengthens text, so a cut at ``each`` >= the drawn limit is never seen in the drawn line)."""

    def head(value: object) -> str:
        return escaped(value_text(value)[:each])

    return " ".join(f"{head(key)}={head(value)}" for key, value in data.items())


def describe_data(data: dict[str, Any], limit: int = DRAWN_DATA_LIMIT) -> str:
    """An event payload as drawn: ``key=value`` pairs, escaped, cut to ``limit`` characters with ``…``.

    The cut never falls inside an escape.  Each key and value is cut to ``limit`` characters before it is escaped,
    which bounds the work for a huge payload.  What is cut is still searched by the filter (``event_search_text``).
    """
    return clip(_pairs(data, limit), limit)


def escaped(text: str) -> str:
    """``safe_text(text)``, without its regular expression in the common case: printable ASCII with no backslash
    has nothing to escape (every log line is made of several such pieces, thousands of lines a second)."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text
    return safe_text(text)


def _field(text: str) -> str:
    """One word of a log line's head (time, box, kind): escaped, a space written ``\\x20`` and nothing as ``-``, so
    the head splits into its words exactly (``is_alert_line`` relies on it)."""
    return escaped(text).replace(" ", "\\x20") or "-"


def _line(event: Event, box_name: str | None, data: str) -> str:
    clock = _field(event.time[11:19] if len(event.time) >= 19 else event.time)
    who = _field(box_name or event.box_id or "daemon")
    head = f"{clock} #{event.seq:<6} {who:<16} {_field(event.kind):<20}"
    return f"{head} {data}" if data else head.rstrip()  # a value's own trailing space stays: it is searched


def event_line(event: Event, box_name: str | None) -> str:
    """One log line as drawn: time, sequence number, box, kind and payload (cut to ``DRAWN_DATA_LIMIT``), as plain
    text with box text escaped."""
    return _line(event, box_name, describe_data(event.data))


def event_search_text(event: Event, box_name: str | None) -> str:
    """What the filter's regular expression searches: the event's log line with every field of its payload in
    full (each key and value up to ``SEARCH_VALUE_LIMIT`` characters), escaped as drawn.  The drawn line, without
    its final ``…``, is a prefix of it, so whatever a pattern finds on screen it finds here too."""
    return _line(event, box_name, _pairs(event.data, SEARCH_VALUE_LIMIT))


def event_texts(event: Event, box_name: str | None) -> tuple[str, str]:
    """``(event_line, event_search_text)`` with the payload formatted once: the drawn payload is the searched one
    cut to ``DRAWN_DATA_LIMIT`` (the same text ``describe_data`` gives, since each value's head is the same)."""
    searched = _pairs(event.data, SEARCH_VALUE_LIMIT)
    return _line(event, box_name, clip(searched, DRAWN_DATA_LIMIT)), _line(event, box_name, searched)


_LINE_KIND = re.compile(r"[^ ]+ #[0-9]+ +[^ ]+ +([^ ]+)")  # time, #seq, box, then the kind: words of _field


def is_alert_line(line: str) -> bool:
    """Whether ``line`` (made by ``event_line``) is of an alert kind (``ALERT_KINDS``): the log colours such lines
    with the theme's ``event-alert`` token.  The kind is read from the line's head, whose words hold no space."""
    head = _LINE_KIND.match(line)
    return head is not None and head.group(1) in ALERT_KINDS


def last_event_cell(shown_kind: str, theme_variables: dict[str, str]) -> Text | str:
    """The boxes table's ``last event`` cell for ``shown_kind`` (escaped by ``box_cells``): an alert kind as a
    ``Text`` in the theme's ``event-alert`` colour, any other as literal markup (``rich_markup_literal``)."""
    if shown_kind in ALERT_KINDS:
        return Text(shown_kind, style=theme_variables.get("event-alert", ""))
    return rich_markup_literal(shown_kind)


def box_detail_lines(box: BoxInfo) -> list[tuple[str, str]]:
    """The detail pane as (label, value) pairs, values escaped; secrets show names and bound hosts, never values."""
    secrets = ", ".join(f"{safe_text(s.get('name', '?'))} → {','.join(safe_text(h) for h in s.get('hosts', []))}"
                        for s in box.secrets) or "none"
    limits = ", ".join(f"{safe_text(key)}={safe_text(value)}" for key, value in sorted(box.limits.items()))
    return [
        ("name", safe_text(box.name)),
        ("id", safe_text(box.id)),
        ("state", safe_text(box.state) + (f" ({safe_text(box.reason)})" if box.reason else "")),
        ("image", safe_text(box.image)),
        ("backend", safe_text(box.backend or "-")),
        ("workspace", safe_text(box.workspace)),
        ("run id", safe_text(box.run_id or "UNRECORDED")),
        ("allow", ", ".join(safe_text(host) for host in box.allow) or "nothing"),
        ("secrets", secrets),
        ("limits", limits or "defaults"),
        ("created", safe_text(box.created_at or "-")),
        ("expires", safe_text(box.expires_at or "-")),
    ]


_RICH_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")  # what Rich's markup parser takes for a tag


def rich_markup_literal(text: str) -> str:
    """``text`` for a place that Rich reads as markup (a ``DataTable`` cell given as ``str``), so that it shows as
    itself.  ``rich.markup.escape`` alone does not round-trip: Rich also turns ``\\[`` into ``[`` outside tags.
    So a tag-like ``[...]`` after n backslashes gets 2n + 1 (as ``escape`` does), and any other ``[`` one; a test
    holds Rich to it.  (Rich's ``:emoji:`` codes are not markup and stay: Rich replaces them in a ``str`` cell.)"""
    pieces, position = [], 0
    for tag in _RICH_TAG.finditer(text):
        backslashes, bracketed = tag.groups()
        pieces += [text[position:tag.start()].replace("[", "\\["), f"{backslashes}{backslashes}\\{bracketed}"]
        position = tag.end()
    pieces.append(text[position:].replace("[", "\\["))
    return "".join(pieces)


def textual_markup_literal(text: str) -> str:
    """``text`` for a place that Textual reads as its own markup (the command palette's help text), so that it shows
    as itself: every ``[`` is written ``\\[``.  Textual's parser takes ``\\[`` as ``[`` whatever precedes it and
    leaves other backslashes alone, so this round-trips where ``markup.escape`` does not (it misses ``[$var]`` and
    doubles backslashes before a tag); a test holds Textual to it."""
    return text.replace("[", "\\[")


def disconnected_banner(reason: str, hint: str) -> str:
    """The banner while the daemon is not connected: that first, then why, then what to do (the hint of a
    ``DaemonError``: with no daemon, ``tkbox up`` or ``tkbox daemon``)."""
    text = ("DISCONNECTED — still retrying; what you see may be out of date.  "
            f"{safe_text(reason or 'connecting to the daemon…')}")
    return text + (f"  —  {safe_text(hint)}" if hint else "")


def connection_label(connected: bool, following: bool, new_count: int, filter_text: str,
                     filter_inverted: bool = False) -> str:
    """The status line under the log: connection, follow state and filter (``!`` included), in words; why the
    daemon is not connected, and what to do, is the banner's (``disconnected_banner``), said once."""
    link = "connected" if connected else "DISCONNECTED — retrying (see the banner above)"
    follow = "FOLLOWING" if following else f"PAUSED  +{new_count} new  (f or G to follow)"
    inverted = "  (inverted: showing events that do not match)" if filter_inverted else ""
    return f"{link}  │  {follow}" + (f"  │  filter: {filter_text}{inverted}" if filter_text else "")
