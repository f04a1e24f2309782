"""Per-record checks for verify: strict parse, closed schema, canonical line, event hash and signature.

Each JSONL line is checked on its own, so ``verify_pool`` can spread big files over
processes.  The result for a line is a ``RecordFacts``: the fields the later checks need
(chain positions, hashes, type, the ``data`` of the few types verify reads) and
``error``, the first reason the record fails the *signatures* check (None if it passes).
"""

from __future__ import annotations

import binascii
import hashlib
import json
import re
import sys
from collections.abc import Callable, Mapping
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, NamedTuple

from .. import strictjson
from . import approval_record
from .records import (
    ALG,
    MAX_RECORD_BYTES,
    RECORD_KEYS,
    RECORD_VERSION,
    SIGNED_TAG,
    RecordError,
    check_event_shape,
)
from .signature_check import RecordKey

RUN_TYPES = frozenset(
    {"run.registered", "policy.decision", "tool.result", "input.observed", "capture.gap", "containment.changed",
     "run.closed"}
)
SIGNER_TYPES = frozenset({"signer.epoch", "signer.started"})
INSPECTED_TYPES = frozenset({"run.registered", "run.closed", "signer.epoch", "input.observed"})  # data schema-checked
_WHOLE_DATA_TYPES = frozenset({"run.registered", "run.closed", "signer.epoch"})
ISOLATION_LEVELS = frozenset({"same-user", "separate-user"})
MAX_LINES = 250_000  # a record line is over 500 bytes, so a 64 MiB entry holds fewer
_HASH = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)
_POLICY_HASH = re.compile(r"(sha256:)?[0-9a-f]{64}", re.ASCII)


class RecordFacts(NamedTuple):
    """What one line says (None where it did not parse) and why it fails, if it does; ``data`` is what
    ``kept_data`` keeps of the event's data."""

    line_no: int
    seq: int | None = None
    run_seq: int | None = None
    run_id: str | None = None
    log_id: str | None = None
    prev_hash: str | None = None
    run_prev_hash: str | None = None
    hash: str | None = None
    type: str | None = None
    data: dict[str, Any] | None = None
    error: str | None = None

    @property
    def parsed(self) -> bool:
        return self.seq is not None


def canonical_json(value: Any) -> bytes:
    """RFC 8785 bytes of a value from ``strictjson.loads`` (no floats, safe integers), fast.

    For such values ``json.dumps`` (sorted keys, compact, no ASCII escaping) writes the same
    bytes as RFC 8785 whenever the output is ASCII: strings escape the same characters, and
    ASCII keys sort the same by code point as by UTF-16 unit.  Anything else goes to the
    RFC 8785 library.
    """
    text = _encode_compact(value)
    if text.isascii():
        return text.encode("ascii")
    return strictjson.canonical(value)


def check_framing(content: bytes, name: str, lines: int | None = None) -> int:
    """The number of lines of a JSONL entry, which must be non-empty and end in a newline
    (``lines``: its number of lines, if the caller has counted them)."""
    if not content:
        raise RecordError(f"{name} is empty")
    if not content.endswith(b"\n"):
        raise RecordError(f"{name} does not end with a newline")
    count = content.count(b"\n") if lines is None else lines
    if count > MAX_LINES:  # before splitting: millions of tiny lines would cost gigabytes
        raise RecordError(f"{name} has more than {MAX_LINES} lines")
    return count


def loads_canonical(data: bytes, *, max_bytes: int, max_depth: int | None = strictjson.DEFAULT_MAX_DEPTH) -> Any:
    """Parse JSON that the caller then requires to be in canonical (re-serialised) form; strict, and fast.

    A text without ``\\u`` escapes, without a 16-digit number token and with few brackets
    cannot hold a lone surrogate, an integer beyond 2^53 or deep nesting, so the C
    decoder (floats and NaN refused) gives what ``strictjson.loads`` would.  Duplicate
    keys, whitespace and big numbers after whitespace survive the decoder but not the
    caller's re-serialisation check.  Any other text goes through ``strictjson.loads``.
    ``max_depth=None`` skips the depth gate for callers whose schema bounds the depth
    (the C decoder itself stops at the recursion limit).
    """
    if len(data) > max_bytes:
        raise strictjson.StrictJSONError(f"JSON text of {len(data)} bytes exceeds the limit of {max_bytes}")
    deep = max_depth is not None and data.count(b"[") + data.count(b"{") > max_depth
    if deep or (b"\\" in data and b"\\u" in data) or _has_long_number(data):
        return strictjson.loads(data, max_bytes=max_bytes, max_depth=max_depth or strictjson.DEFAULT_MAX_DEPTH)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise strictjson.StrictJSONError(f"invalid UTF-8 at byte {exc.start}") from None
    try:  # the decoder's scanner, without its whitespace handling: what decode() gives when it parses all
        value, end = _SCAN(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError, RecursionError):
        pass
    try:  # anything else: decode() again, for its exact result or error
        return _FAST_DECODER.decode(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise strictjson.StrictJSONError(f"malformed JSON: {exc}") from None


def _refuse(text: str) -> Any:
    raise strictjson.StrictJSONError(f"{text} is not allowed (no floats, NaN or infinities)")


_FAST_DECODER = json.JSONDecoder(parse_float=_refuse, parse_constant=_refuse)
_SCAN = _FAST_DECODER.scan_once
_COMPACT_SORTED = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _compact_sorted_encoder() -> Callable[[Any], str]:
    """``_COMPACT_SORTED.encode``, with its C encoder built once instead of per call.

    Without circular-reference markers, which parsed JSON values never need.
    """
    if c_make_encoder is None:  # no C accelerator: the encoder itself
        return _COMPACT_SORTED.encode
    encoder = c_make_encoder(None, _COMPACT_SORTED.default, encode_basestring, None, ":", ",", True, False, True)
    return lambda value: "".join(encoder(value, 0))


_encode_compact = _compact_sorted_encoder()
# Digits become "0" and the bytes a number can follow in compact JSON become ":", so a
# 16-digit number token shows as ":" + 16 zeros (a regex scan is several times slower).
_NUMBER_SHAPE = bytes.maketrans(b"123456789[,", b"000000000::")
_LONG_POSITIVE = b":" + b"0" * 16
_LONG_NEGATIVE = b":-" + b"0" * 16
_SIXTEEN_ZEROS = b"0" * 16


def _has_long_number(data: bytes) -> bool:
    shape = data.translate(_NUMBER_SHAPE)
    if _SIXTEEN_ZEROS not in shape:  # most lines: one search instead of two
        return False
    return _LONG_POSITIVE in shape or _LONG_NEGATIVE in shape


def check_line(line: bytes, line_no: int, keys: Mapping[str, RecordKey]) -> RecordFacts:
    try:
        body = loads_canonical(line, max_bytes=MAX_RECORD_BYTES)
        if not isinstance(body, dict):
            raise strictjson.StrictJSONError("expected a JSON object")
    except strictjson.StrictJSONError as exc:
        return RecordFacts(line_no, error=f"not strict JSON: {exc}")
    try:
        _check_envelope(body)
        event = body["event"]
        check_event_shape(event)
    except RecordError as exc:
        return RecordFacts(line_no, error=str(exc))
    kind = event["type"]
    # Equal strings as one object (a hash is also the next record's prev_hash), so the pickle sent
    # back from a pool worker holds each once: less than half the bytes to copy and unpickle.
    one = sys.intern
    return RecordFacts(
        line_no, event["seq"], event["run_seq"], one(event["run_id"]), one(event["log_id"]), one(event["prev_hash"]),
        one(event["run_prev_hash"]), one(body["hash"]), one(kind), kept_data(kind, event["data"]),
        _signature_error(line, body, event, keys),
    )


def _check_envelope(body: dict[str, Any]) -> None:
    if body.keys() != RECORD_KEYS:
        raise RecordError("record keys are not exactly v, event, hash, alg, kid, sig")
    if type(body["v"]) is not int or body["v"] != RECORD_VERSION:
        raise RecordError("record version is not 1")
    if body["alg"] != ALG:
        raise RecordError(f"record alg is not {ALG}")
    for name in ("hash", "kid"):
        if not isinstance(body[name], str) or not _HASH.fullmatch(body[name]):
            raise RecordError(f"record {name} is not sha256:<64 hex>")
    if not isinstance(body["sig"], str):
        raise RecordError("record sig is not a string")


def _signature_error(line: bytes, body: dict[str, Any], event: dict[str, Any], keys: Mapping[str, RecordKey]) -> str | None:
    """The first reason this parsed record does not verify, or None."""
    kind = event["type"]
    if kind not in RUN_TYPES and kind not in SIGNER_TYPES:
        return f"unknown record type {kind!r}"
    if kind in INSPECTED_TYPES:
        schema_error = data_schema_error(kind, event["data"])
        if schema_error:
            return f"{kind} data: {schema_error}"
    sig = body["sig"]
    try:
        signature = binascii.a2b_base64(sig, strict_mode=True)
    except (binascii.Error, ValueError):
        return "signature is not base64"
    if len(signature) != 64 or binascii.b2a_base64(signature, newline=False) != sig.encode("ascii"):
        return "signature is not canonical base64 of 64 bytes"
    # The line must be exactly {"alg":…,"event":<compact sorted event>,"hash":…,"kid":…,"sig":…,"v":1}:
    # compared piece by piece, without building it.
    event_text = _encode_compact(event)
    event_utf8 = event_text.encode("utf-8")
    end = _EVENT_AT + len(event_utf8)
    tail = f',"hash":"{body["hash"]}","kid":"{body["kid"]}","sig":"{sig}","v":1}}'
    if not (line.startswith(_STORED_HEAD) and line[_EVENT_AT:end] == event_utf8 and line[end:] == tail.encode("utf-8")):
        return "the line is not in stored form (compact JSON, sorted keys)"
    event_bytes = event_utf8 if event_text.isascii() else strictjson.canonical(event)
    if "sha256:" + hashlib.sha256(event_bytes).hexdigest() != body["hash"]:
        return "event hash does not match the event"
    key = keys.get(body["kid"])
    if key is None:
        return f"signed by a key that is not pinned ({body['kid']})"
    if not key.verifies(signature, signed_header_bytes(event, body["hash"], body["kid"])):
        return "signature does not verify with the pinned key"
    return None


_STORED_HEAD = f'{{"alg":"{ALG}","event":'.encode("ascii")
_EVENT_AT = len(_STORED_HEAD)


def signed_header_bytes(event: dict[str, Any], event_hash: str, kid: str) -> bytes:
    """``records.signed_header`` for a schema-checked event, without the general canonicaliser.

    Every field is a constant, an integer, hex, or a run id of ``[A-Za-z0-9._:/-]``, none
    of which JSON escapes, and the keys are written in RFC 8785 (sorted) order.
    """
    return header_bytes(event_hash, kid, event["log_id"], event["prev_hash"], event["run_id"], event["run_prev_hash"],
                        event["run_seq"], event["seq"])


def header_bytes(event_hash: str, kid: str, log_id: str, prev_hash: str, run_id: str, run_prev_hash: str,
                 run_seq: int | str, seq: int | str) -> bytes:
    """The signed header from its fields (``run_seq`` and ``seq`` as integers or their decimal text)."""
    return (
        f'{{"alg":"{ALG}","hash":"{event_hash}","kid":"{kid}","log_id":"{log_id}","prev_hash":"{prev_hash}",'
        f'"run_id":"{run_id}","run_prev_hash":"{run_prev_hash}","run_seq":{run_seq},"seq":{seq},"t":"{SIGNED_TAG}"}}'
    ).encode("ascii")


def kept_data(kind: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """What the later checks read of a record's data: all of it for run.registered, run.closed and signer.epoch;
    for the approvals check and the counts (``verify_counts``), a decision's id, verdict and tool, the decision id
    of a tool.result and of an executed_against_policy gap, and the plain fields of a tkbox.approval observation;
    else None.  Kept small, as the facts of a big bundle come back from pool workers.  Never raises, whatever the
    data (a record whose data fails its schema fails signatures, and then the approvals check does not read it)."""
    if kind in _WHOLE_DATA_TYPES:
        return data
    decision_id = data.get("decision_id")
    if not isinstance(decision_id, str):
        return None
    decision_id = sys.intern(decision_id)  # a decision's, its result's and its answer's id pickled once
    if kind == "tool.result":
        return {"decision_id": decision_id}
    if kind == "policy.decision":
        verdict, tool = data.get("verdict"), data.get("tool")
        return {"decision_id": decision_id, "verdict": sys.intern(verdict) if isinstance(verdict, str) else "",
                "tool": sys.intern(tool) if isinstance(tool, str) else ""}
    if kind == "capture.gap":
        return {"decision_id": decision_id} if data.get("kind") == EXECUTED_AGAINST_POLICY else None
    if kind == "input.observed" and data.get("source") == approval_record.SOURCE:
        return {"approval_id": data.get("approval_id"), "decision_id": decision_id, "answer": data.get("answer")}
    return None


REGISTERED_FIELDS = frozenset({"agent", "policy_name", "policy_hash", "signer_isolation", "token_expires"})
CLOSED_FIELDS = frozenset({"reason", "records"})
OBSERVED_FIELDS = frozenset({"source", "trust", "must_keep", "salt_id", "output"})
APPROVAL_OBSERVED_FIELDS = OBSERVED_FIELDS | frozenset(approval_record.PLAIN_FIELDS)
OPTIONAL_DATA_FIELDS = frozenset({"request_mac"})  # added by the signer to records made for a request
EXECUTED_AGAINST_POLICY = "executed_against_policy"
_REQUIRED_FIELDS = {"run.registered": REGISTERED_FIELDS, "run.closed": CLOSED_FIELDS, "input.observed": OBSERVED_FIELDS}
_REQUEST_MAC = re.compile(r"[0-9a-f]{32}", re.ASCII)
_SOURCE = re.compile(r"[a-z][a-z0-9_.-]{0,63}", re.ASCII)
_SALT_ID = re.compile(r"[0-9a-f]{32}", re.ASCII)
_COMMITMENT = re.compile(r"hmac-sha256:[0-9a-f]{64}", re.ASCII)


def data_schema_error(kind: str, data: dict[str, Any]) -> str | None:
    """Schema problems in the ``data`` of the types verify relies on (others are only objects)."""
    if kind == "signer.epoch":
        return _epoch_schema_error(data)
    required = _REQUIRED_FIELDS.get(kind)
    if required is None:
        return None
    if kind == "input.observed" and data.get("source") == approval_record.SOURCE:
        required = APPROVAL_OBSERVED_FIELDS
    elif kind == "input.observed" and data.keys() & APPROVAL_OBSERVED_FIELDS - OBSERVED_FIELDS:
        return f"approval_id, decision_id and answer belong to {approval_record.SOURCE} observations only"
    if not required <= data.keys() or data.keys() - required - OPTIONAL_DATA_FIELDS:
        return f"fields are not {', '.join(sorted(required))} (and optionally request_mac)"
    if "request_mac" in data and not (isinstance(data["request_mac"], str) and _REQUEST_MAC.fullmatch(data["request_mac"])):
        return "request_mac is not 32 hex digits"
    if kind == "input.observed":
        return _observed_schema_error(data)
    if kind == "run.closed":
        if not isinstance(data["reason"], str) or type(data["records"]) is not int:
            return "reason is not a string or records not an integer"
        return None
    if not isinstance(data["agent"], dict) or not isinstance(data["agent"].get("name"), str):
        return "agent is not an object with a name"
    if not isinstance(data["policy_name"], str) or type(data["token_expires"]) is not int:
        return "policy_name is not a string or token_expires not an integer"
    if not isinstance(data["policy_hash"], str) or not _POLICY_HASH.fullmatch(data["policy_hash"]):
        return "policy_hash is not sha256:<64 hex>"
    if data["signer_isolation"] not in ISOLATION_LEVELS:
        return "signer_isolation is not same-user or separate-user"
    return None


def _observed_schema_error(data: dict[str, Any]) -> str | None:
    if not isinstance(data["source"], str) or not _SOURCE.fullmatch(data["source"]):
        return "source is not 1 to 64 of [a-z0-9_.-] starting with a letter"
    if data["trust"] not in ("trusted", "untrusted") or type(data["must_keep"]) is not bool:
        return "trust is not trusted or untrusted, or must_keep not a boolean"
    if not isinstance(data["salt_id"], str) or not _SALT_ID.fullmatch(data["salt_id"]):
        return "salt_id is not 32 hex digits"
    output = data["output"]
    if (not isinstance(output, dict) or output.keys() != {"hash", "size"} or not isinstance(output["hash"], str)
            or not _COMMITMENT.fullmatch(output["hash"]) or type(output["size"]) is not int or output["size"] < 0):
        return "output is not {hash: hmac-sha256:<64 hex>, size: a non-negative integer}"
    if data["source"] != approval_record.SOURCE:
        return None
    if data["trust"] != "trusted":
        return f"a {approval_record.SOURCE} observation is not trusted"
    problem = approval_record.plain_fields_error(data)
    return f"{approval_record.SOURCE}: {problem}" if problem else None


def _epoch_schema_error(data: dict[str, Any]) -> str | None:
    if set(data) != {"keys", "log_vkey", "origin"}:
        return "fields are not keys, log_vkey, origin"
    if not isinstance(data["log_vkey"], str) or not isinstance(data["origin"], str):
        return "log_vkey and origin must be strings"
    keys = data["keys"]
    if not isinstance(keys, list) or not 1 <= len(keys) <= 16:
        return "keys is not a list of 1 to 16 keys"
    for key in keys:
        if not isinstance(key, dict) or set(key) != {"purpose", "alg", "kid", "public_key"}:
            return "a key is not exactly purpose, alg, kid, public_key"
        if key["purpose"] != "record" or not all(isinstance(key[name], str) for name in ("alg", "kid", "public_key")):
            return "a key's purpose is not record or a field is not a string"
    return None
