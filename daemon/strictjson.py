"""Strict JSON for every boundary: one object, bounded, no duplicate keys, no NaN, no huge integers.

Everything that crosses a trust boundary (signer RPC lines, bundle entries, trust
files) is parsed here, so the rules live in one place.  Canonical bytes for
hashing and signing come from RFC 8785 (the ``rfc8785`` library).
"""

from __future__ import annotations

import json
import re
from typing import Any

import rfc8785

MAX_SAFE_INTEGER = 2**53 - 1
MAX_INTEGER_DIGITS = 16
DEFAULT_MAX_DEPTH = 32


class StrictJSONError(ValueError):
    """The text is not strict JSON; the message says what is wrong."""


def _reject_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not allowed in JSON")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJSONError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _bounded_int(text: str) -> int:
    digits = text.lstrip("-")
    if len(digits) > MAX_INTEGER_DIGITS:
        raise StrictJSONError(f"integer with more than {MAX_INTEGER_DIGITS} digits")
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise StrictJSONError("integer beyond ±(2^53-1)")
    return value


def _reject_float(text: str) -> Any:
    raise StrictJSONError("fractional or exponent numbers are not allowed")


_DECODER_NO_FLOAT = json.JSONDecoder(
    object_pairs_hook=_unique_object,
    parse_constant=_reject_constant,
    parse_int=_bounded_int,
    parse_float=_reject_float,
)


def _check_depth_and_strings(value: Any, max_depth: int) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                raise StrictJSONError(f"nesting deeper than {max_depth}")
            for key, child in item.items():
                _check_string(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            if depth > max_depth:
                raise StrictJSONError(f"nesting deeper than {max_depth}")
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            _check_string(item)


def _check_string(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise StrictJSONError("lone surrogate in a string") from None


def loads(data: bytes | str, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse one strict JSON text (integers only, no floats) of at most ``max_bytes``."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if len(data) > max_bytes:
        raise StrictJSONError(f"JSON text of {len(data)} bytes exceeds the limit of {max_bytes}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrictJSONError(f"invalid UTF-8 at byte {exc.start}") from None
    # Depth is checked before the decoder recurses, so deep nesting cannot exhaust the stack.
    _precheck_depth(text, max_depth)
    try:
        value = _DECODER_NO_FLOAT.decode(text)
    except StrictJSONError:
        raise
    except (json.JSONDecodeError, RecursionError) as exc:
        raise StrictJSONError(f"malformed JSON: {exc}") from None
    # Valid UTF-8 cannot carry a surrogate, so a lone one can only come from a \u escape;
    # depth was bounded by the precheck.  Skipping the walk keeps large texts fast.
    if "\\u" in text:
        _check_depth_and_strings(value, max_depth)
    return value


def loads_object(data: bytes | str, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, Any]:
    """Parse strict JSON that must be an object."""
    value = loads(data, max_bytes=max_bytes, max_depth=max_depth)
    if not isinstance(value, dict):
        raise StrictJSONError("expected a JSON object")
    return value


# A JSON string token (escapes included) and anything that is not a bracket, for the depth precheck.
# An unterminated string runs to the end of the text, so every match attempt succeeds at
# once and the scan stays linear (the text is invalid JSON then anyway).
_STRING_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*\\?(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _precheck_depth(text: str, max_depth: int) -> None:
    if text.count("[") + text.count("{") <= max_depth:
        return
    # Drop strings (brackets inside them do not nest), keep only brackets, then count.
    brackets = _NOT_BRACKET.sub("", _STRING_TOKEN.sub("", text))
    depth = 0
    for char in brackets:
        if char in "[{":
            depth += 1
            if depth > max_depth:
                raise StrictJSONError(f"nesting deeper than {max_depth}")
        else:
            depth -= 1


_FAST_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                                 check_circular=False)


def canonical(value: Any) -> bytes:
    """RFC 8785 canonical bytes of a JSON value.

    For integer-only values whose text is all ASCII, the standard library's sorted,
    compact encoding *is* RFC 8785 (same escapes, same key order, no floats), and it is
    several times faster; anything else goes through the ``rfc8785`` library.  A test
    checks the two agree on arbitrary values.
    """
    return canonical_and_compact(value)[0]


def canonical_and_compact(value: Any) -> tuple[bytes, bool]:
    """RFC 8785 bytes of ``value``, and whether they are also its ``compact`` encoding.

    The value is checked once (one walk for floats and out-of-range integers) and encoded
    once; a caller that needs both forms (a stored record line embeds the event it hashes)
    reuses the bytes when the flag is true instead of encoding the value a second time.
    """
    if not _needs_reference_encoder(value):
        try:
            text = _FAST_ENCODER.encode(value)
        except (TypeError, ValueError):
            text = ""
        if text and text.isascii():
            return text.encode("ascii"), True
    try:
        return rfc8785.dumps(value), False
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise StrictJSONError(f"cannot canonicalise: {exc}") from None


_UNESCAPED_ASCII = re.compile(r'[ !#-\[\]-~]*', re.ASCII)  # printable ASCII but '"' and '\\': kept as is


def canonical_object(value: dict[str, Any], encoded: dict[str, bytes] | None = None) -> bytes:
    """``canonical(value)`` for an object, taking ``encoded[key]`` as the canonical bytes of ``value[key]``
    (the caller's word: a value encoded once and needed inside several encodings).

    Spelled out when every key is printable ASCII without ``"`` or ``\\`` (sorted by code point, which is
    RFC 8785's UTF-16 order for them); such string values and safe integers are spelled out too, other
    values are ``canonical``.  Other keys go to ``canonical`` whole.  A test holds it to ``rfc8785``."""
    keys = sorted(value)
    if _UNESCAPED_ASCII.fullmatch("".join(keys)) is None:
        return canonical(value)
    known = encoded or {}
    members = []
    for key in keys:
        item = value[key]
        member = known.get(key)
        if member is None:
            kind = type(item)
            if kind is str and _UNESCAPED_ASCII.fullmatch(item) is not None:
                member = b'"' + item.encode("ascii") + b'"'
            elif kind is int and -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                member = str(item).encode("ascii")
            else:
                member = canonical(item)
        members.append(b'"' + key.encode("ascii") + b'":' + member)
    return b"{" + b",".join(members) + b"}"


def _needs_reference_encoder(value: Any) -> bool:
    """Floats and integers outside ±(2^53−1) are the rfc8785 library's to format (or refuse)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float or (kind is int and not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER):
            return True
        if kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
    return False


def compact(value: Any) -> bytes:
    """Compact, key-sorted UTF-8 JSON for storage lines (not for hashing)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
