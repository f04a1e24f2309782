"""The per-line loop of verify's record check, with a fast path for lines that pass every check.

``verify_records.check_line`` runs the checks one by one, in the order that decides which
failure a bad line reports.  Almost every line passes them all, and for such a line the
order does not matter: ``_passing_facts`` establishes that a line passes every one of them,
in fewer and cheaper steps (most of the line is matched as text against the stored form,
only the event's data is parsed and re-encoded), and returns its facts; for anything else
(None) the line goes through ``check_line``, whose result is then the one kept.  So the
fast path can only ever vouch for a line ``check_line`` passes, with the same facts.
"""

from __future__ import annotations

import binascii
import hashlib
import re
import sys
from collections.abc import Mapping

from .. import strictjson
from . import records
from .records import EVENT_SCHEMA, MAX_RECORD_BYTES
from .signature_check import RecordKey
from .verify_records import (
    _EVENT_AT,
    _SCAN,
    _STORED_HEAD,
    INSPECTED_TYPES,
    RUN_TYPES,
    SIGNER_TYPES,
    RecordFacts,
    _encode_compact,
    _has_long_number,
    check_line,
    data_schema_error,
    header_bytes,
    kept_data,
)

# check_line sends a line to the strict parser if it has more than 32 brackets, "\\u" or a 16-digit
# number (loads_canonical); in a line the fast path can take, only the data can hold any of those,
# and all but two of its brackets (the record's and the event's).
_MAX_DATA_BRACKETS = strictjson.DEFAULT_MAX_DEPTH - 2
_HEAD_DATA = _STORED_HEAD.decode("ascii") + '{"data":'
_DATA_AT = len(_HEAD_DATA)
_TAIL_LENGTH = len(',"hash":"sha256:,"kid":"sha256:","sig":"","v":1}') + 2 * 64 + 88 + 1  # the envelope after the event
_MIN_LINE = _DATA_AT + len("{}") + _TAIL_LENGTH


def _rest_pattern() -> re.Pattern[str] | None:
    """A stored line from its event's ``id`` on: the event's fields after ``data``, compact and in
    sorted order, then the envelope's.  Each event field's value must match the pattern
    ``records.check_event_shape`` checks it with (taken from there), so a match passes that check;
    hash and kid are sha256:<64 hex> and sig canonical base64 of 64 bytes.

    Values are compared as text: lines with a backslash (an escape) never come here.  Sequence
    numbers of up to 15 digits are below 2^53; longer ones are left to check_line.  None (no fast
    path) if records has changed so that its patterns are not where they were.
    """
    try:
        hex32, identity, sha, request_id, run_id, ts, kind = (
            f"(?:{getattr(records, name).pattern})"
            for name in ("_HEX32", "_IDENTITY", "_HASH", "_REQUEST_ID", "_RUN_ID", "_TS", "_TYPE"))
    except AttributeError:
        return None
    seq = "(0|[1-9][0-9]{0,14})"
    return re.compile(
        f',"id":"{hex32}","identity":"{identity}","log_id":"({hex32})","prev_hash":"({sha})",'
        f'("request_id":"{request_id}",)?"run_id":"({run_id})","run_prev_hash":"({sha})",'
        f'"run_seq":{seq},"schema":"{re.escape(EVENT_SCHEMA)}","seq":{seq},"ts":"{ts}","type":"({kind})"}}'
        r',"hash":"(sha256:[0-9a-f]{64})","kid":"(sha256:[0-9a-f]{64})","sig":"([A-Za-z0-9+/]{85}[AQgw]==)","v":1\}',
        re.ASCII)


_REST = _rest_pattern()


def check_chunk(data: bytes, first_line_no: int, pinned: Mapping[str, bytes]) -> list[RecordFacts]:
    """Check whole lines (``data`` ends with a newline) against the pinned record keys
    ``{kid: raw Ed25519 public key}``; a pool worker's task."""
    keys = {kid: RecordKey(raw) for kid, raw in pinned.items()}
    # A line that passes is ASCII (its event is, and the rest is fixed): decode once if all of it is.
    texts: list[str] | None = data.decode("ascii")[:-1].split("\n") if data.isascii() else None
    lines: list[bytes] | None = None if texts is not None else data[:-1].split(b"\n")
    facts = []
    for index in range(len(texts) if texts is not None else len(lines or ())):
        line_no = first_line_no + index
        if texts is not None:
            text, line = texts[index], None
        else:
            line = lines[index]  # type: ignore[index]
            text = line.decode("ascii") if line.isascii() else None
        fact = _passing_facts(text, line_no, keys) if text is not None else None
        if fact is not None:
            facts.append(fact)
            continue
        if line is None:
            line = text.encode("ascii")  # type: ignore[union-attr]
        if not line:
            facts.append(RecordFacts(line_no, error="the line is empty"))
        elif len(line) > MAX_RECORD_BYTES:
            facts.append(RecordFacts(line_no, error=f"the line is longer than {MAX_RECORD_BYTES} bytes"))
        else:
            facts.append(check_line(line, line_no, keys))
    return facts


def _passing_facts(text: str, line_no: int, keys: Mapping[str, RecordKey]) -> RecordFacts | None:
    """The facts of an ASCII line that passes every check of ``check_line``, or None: then
    ``check_line`` decides.

    A stored line is ``{"alg":"ed25519","event":{"data":D,F},"hash":…,"kid":…,"sig":…,"v":1}``.
    If the event's fields after its data and the rest of the line (F…) match _REST and D is the
    compact sorted encoding of the JSON value found there, then the line is JSON in stored form
    (no whitespace, sorted keys, hence no duplicates), its envelope and event fields pass their
    checks, and the event's text is its canonical bytes.  So only the data is parsed and
    re-encoded; the rest is read from the match.  If D could make check_line use the strict
    parser (too many brackets, an escape, a 16-digit number), check_line decides.
    """
    size = len(text)
    if _REST is None or not _MIN_LINE <= size <= MAX_RECORD_BYTES or not text.startswith(_HEAD_DATA):
        return None
    rest_at = text.rfind(',"id":"', _DATA_AT, size - _TAIL_LENGTH)
    rest = _REST.fullmatch(text, rest_at) if rest_at > _DATA_AT else None
    if rest is None:
        return None
    try:  # the data, with the decoder loads_canonical uses for such a line
        data, end = _SCAN(text, _DATA_AT)
    except (StopIteration, ValueError, RecursionError):
        return None
    if end != rest_at or type(data) is not dict:
        return None
    data_text = _encode_compact(data)
    if len(data_text) != rest_at - _DATA_AT or not text.startswith(data_text, _DATA_AT):
        return None
    if (data_text.count("[") + data_text.count("{") > _MAX_DATA_BRACKETS or "\\" in data_text
            or _has_long_number(data_text.encode("ascii"))):
        return None  # for check_line's strict parser
    log_id, prev_hash, _, run_id, run_prev_hash, run_seq, seq, kind, event_hash, kid, sig = rest.groups()
    if kind in INSPECTED_TYPES:
        if data_schema_error(kind, data):
            return None
    elif kind not in RUN_TYPES and kind not in SIGNER_TYPES:
        return None
    key = keys.get(kid)
    if key is None or hashlib.sha256(text[_EVENT_AT:size - _TAIL_LENGTH].encode("ascii")).hexdigest() != event_hash[7:]:
        return None
    if not key.verifies(binascii.a2b_base64(sig),
                        header_bytes(event_hash, kid, log_id, prev_hash, run_id, run_prev_hash, run_seq, seq)):
        return None
    one = sys.intern  # equal strings as one object: the pickle back from a worker holds each once
    return RecordFacts(line_no, int(seq), int(run_seq), one(run_id), one(log_id), one(prev_hash), one(run_prev_hash),
                       one(event_hash), one(kind), kept_data(kind, data), None)
