"""Strict JSON for the agent channel's REQUEST, RESPONSE and EXIT frames: UTF-8, one object, no duplicate keys,
integers only and within ±(2^53-1), nesting at most 16 deep, no lone surrogates; written compact and key-sorted.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .frames import JSON_TYPES, MAX_PAYLOAD, TYPE_NAMES, ProtocolError, encode_frame

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 16


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"JSON constant {name} is not allowed")


def _reject_float(text: str) -> Any:
    raise ProtocolError(f"JSON number {text[:32]} is not an integer")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 16:
        raise ProtocolError("JSON integer beyond ±(2^53-1)")
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise ProtocolError("JSON integer beyond ±(2^53-1)")
    return value


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ProtocolError(f"duplicate JSON key {key[:64]!r}")
        result[key] = value
    return result


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_reject_constant,
                            parse_int=_bounded_int, parse_float=_reject_float)
# A string token (an unterminated one runs to the end) and runs of non-brackets, for the depth precheck.
_STRING_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*\\?(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _precheck_depth(text: str) -> None:
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for char in _NOT_BRACKET.sub("", _STRING_TOKEN.sub("", text)):
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ProtocolError(f"JSON nested deeper than {MAX_DEPTH}")
        else:
            depth -= 1


def _check_strings(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ProtocolError("JSON string holds a lone surrogate") from None


def loads_strict(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Parse one strict JSON object: UTF-8, no duplicate keys, integers only, bounded, nesting <= 16."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ProtocolError("JSON must be given as bytes")
    raw = bytes(data)
    if len(raw) > MAX_PAYLOAD:
        raise ProtocolError(f"JSON text of {len(raw)} bytes exceeds {MAX_PAYLOAD}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"JSON is not UTF-8 (byte {exc.start})") from None
    _precheck_depth(text)
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; the hooks raise ProtocolError
        raise ProtocolError(f"malformed JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError("JSON must be an object")
    if "\\u" in text:
        _check_strings(value)
    return value


def dumps(obj: dict[str, Any]) -> bytes:
    """Compact, key-sorted UTF-8 JSON."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                      allow_nan=False).encode("utf-8")


def encode_json_frame(ftype: int, obj: dict[str, Any]) -> bytes:
    if ftype not in JSON_TYPES:
        raise ProtocolError(f"{TYPE_NAMES.get(ftype, ftype)} does not carry JSON")
    return encode_frame(ftype, dumps(obj))
