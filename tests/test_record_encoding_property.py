"""A signed record's bytes come from one encoding of its event; they must equal the reference encodings.

``sign_event`` hashes the event's RFC 8785 bytes and reuses them inside the stored line, and
``signed_header`` spells the signed header out; both must give exactly what the reference
encoders (``rfc8785.dumps`` for hashing and signing, ``strictjson.compact`` of the whole record
for the line) give, for any event a caller can hand them.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta, timezone

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from tests.json_strategies import json_values as json_values_of
from tkbox_daemon import strictjson
from tkbox_daemon.evidence import records
from tkbox_daemon.evidence.chain import utc_timestamp

KEY = Ed25519PrivateKey.generate()
KID = records.key_id(KEY.public_key())

json_values = json_values_of(max_size=4, max_leaves=20)
hashes = st.builds(lambda raw: "sha256:" + raw.hex(), st.binary(min_size=32, max_size=32))
# Mostly well-formed fields, sometimes anything: quotes, backslashes, non-ASCII, control characters.
tricky = st.text(alphabet="ab/:\"\\\x00\x1f\x7f \u00e9\u2028\U0001f600", max_size=6)  # what JSON escapes, and not
tricky_ascii = st.text(alphabet=' !"#/:[\\]~a\x1f\x7f', max_size=6)  # printable ASCII with what JSON escapes
texts = st.one_of(st.from_regex(r"[A-Za-z0-9._:/-]{1,40}", fullmatch=True), st.text(max_size=20), tricky)
seqs = st.one_of(st.integers(0, 2**53 - 1), st.integers())

events = st.fixed_dictionaries(
    {
        "schema": st.just(records.EVENT_SCHEMA),
        "id": st.builds(lambda raw: raw.hex(), st.binary(min_size=16, max_size=16)),
        "log_id": st.one_of(st.builds(lambda raw: raw.hex(), st.binary(min_size=16, max_size=16)), texts),
        "seq": seqs,
        "prev_hash": st.one_of(hashes, texts),
        "run_id": texts,
        "run_seq": seqs,
        "run_prev_hash": st.one_of(hashes, texts),
        "ts": st.just("2026-12-01T00:00:00.000000Z"),
        "type": st.sampled_from(["policy.decision", "run.note", "tool.complete"]),
        "identity": st.sampled_from(["uid:0", "signer"]),
        "data": st.dictionaries(st.text(max_size=10), json_values, max_size=6),
    },
    optional={"request_id": texts},
)


def reference_header(event: dict, event_hash: str, kid: str) -> bytes:
    return rfc8785.dumps({
        "t": records.SIGNED_TAG, "alg": records.ALG, "kid": kid, "log_id": event["log_id"], "seq": event["seq"],
        "prev_hash": event["prev_hash"], "run_id": event["run_id"], "run_seq": event["run_seq"],
        "run_prev_hash": event["run_prev_hash"], "hash": event_hash,
    })


def _reference_or_refusal(encode):
    try:
        return encode(), None
    except (rfc8785.CanonicalizationError, ValueError, TypeError) as exc:
        return None, exc


@given(events)
def test_record_line_and_hash_equal_the_reference_encodings(event):
    expected, refused = _reference_or_refusal(lambda: rfc8785.dumps(event))
    if refused is not None:
        with pytest.raises(strictjson.StrictJSONError):
            records.sign_event(event, KEY, KID)  # whatever the reference refuses, signing refuses
        return
    record = records.sign_event(event, KEY, KID)
    assert record.hash == "sha256:" + hashlib.sha256(expected).hexdigest()
    body = {"v": records.RECORD_VERSION, "event": event, "hash": record.hash, "alg": records.ALG, "kid": KID,
            "sig": record.sig}
    assert record.line == strictjson.compact(body) + b"\n"
    header, header_refused = _reference_or_refusal(lambda: reference_header(event, record.hash, KID))
    if header_refused is None:
        KEY.public_key().verify(base64.b64decode(record.sig), header)  # the signature covers the reference header


@given(events, st.one_of(hashes, texts), st.one_of(st.just(KID), texts))
def test_signed_header_equals_rfc8785(event, event_hash, kid):
    expected, refused = _reference_or_refusal(lambda: reference_header(event, event_hash, kid))
    if refused is not None:
        with pytest.raises(strictjson.StrictJSONError):
            records.signed_header(event, event_hash, kid)
        return
    assert records.signed_header(event, event_hash, kid) == expected


@given(events, st.fixed_dictionaries({name: tricky_ascii for name in ("log_id", "prev_hash", "run_id", "run_prev_hash")}),
       st.integers(0, 2**53 - 1), st.integers(0, 2**53 - 1), tricky_ascii, tricky_ascii)
def test_header_fields_that_need_escaping_are_escaped_as_rfc8785_does(event, fields, seq, run_seq, event_hash, kid):
    event = {**event, **fields, "seq": seq, "run_seq": run_seq}
    assert records.signed_header(event, event_hash, kid) == reference_header(event, event_hash, kid)


@given(events, st.one_of(st.just(KID), texts))
def test_a_kid_that_needs_escaping_still_gives_the_compact_line(event, kid):
    if _reference_or_refusal(lambda: rfc8785.dumps(event))[1] is not None:
        return
    record = records.sign_event(event, KEY, kid)
    body = {"v": records.RECORD_VERSION, "event": event, "hash": record.hash, "alg": records.ALG, "kid": kid,
            "sig": record.sig}
    assert record.line == strictjson.compact(body) + b"\n"


@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=9))])))
def test_event_timestamps_equal_the_strftime_format(moment):
    assert utc_timestamp(moment) == moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@given(st.lists(st.integers(min_value=0, max_value=(253402300799 * 10**9) + 10**9 - 1), min_size=1, max_size=4))
def test_clock_timestamps_equal_the_strftime_format_of_the_same_instant(clock_ns):
    # read in turn, so both a new second and one seen just before are checked
    for ns in clock_ns:
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("tkbox_daemon.evidence.chain.time.time_ns", lambda ns=ns: ns)
            assert utc_timestamp() == moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_clock_timestamps_follow_the_clock():
    before = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    stamp = utc_timestamp()
    assert before <= stamp <= datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@given(json_values)
def test_canonical_and_compact_agree_with_both_references(value):
    expected, refused = _reference_or_refusal(lambda: rfc8785.dumps(value))
    if refused is not None:
        with pytest.raises(strictjson.StrictJSONError):
            strictjson.canonical_and_compact(value)
        return
    encoded, is_compact = strictjson.canonical_and_compact(value)
    assert encoded == expected
    if is_compact:
        assert encoded == strictjson.compact(value)


objects = st.dictionaries(st.one_of(st.text(max_size=8), tricky_ascii, st.sampled_from(["args", "tool", "method"])),
                          json_values, max_size=6)


def _outcome(encode, value):
    """The bytes, or "refused" for a value RFC 8785 cannot encode (an integer past 2^53, say)."""
    try:
        return encode(value)
    except (rfc8785.CanonicalizationError, strictjson.StrictJSONError):
        return "refused"


@given(objects, st.data())
def test_canonical_object_is_rfc8785_with_any_members_given_encoded(value, data):
    given_keys = data.draw(st.sets(st.sampled_from(sorted(value)))) if value else set()
    encoded = {key: _outcome(rfc8785.dumps, value[key]) for key in given_keys}
    encoded = {key: member for key, member in encoded.items() if member != "refused"}
    reference = _outcome(rfc8785.dumps, value)
    assert _outcome(lambda v: strictjson.canonical_object(v, encoded), value) == reference
    assert _outcome(strictjson.canonical_object, value) == reference


def test_canonical_object_spells_out_the_usual_request():
    request = {"method": "decide", "tool": "Bash", "args": {"command": "ls é"}, "n": 2**53 - 1, "q": 'a"b\\'}
    assert strictjson.canonical_object(request, {"args": rfc8785.dumps(request["args"])}) == rfc8785.dumps(request)
    with pytest.raises(strictjson.StrictJSONError):
        strictjson.canonical_object({"n": 2**53})
