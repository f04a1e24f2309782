"""The event filter's regular expression: the operator's text compiled case-insensitively by RE2, or refused.

The log lines a filter runs over carry what boxes put in events, and Python's backtracking ``re`` can take
exponential time on patterns such as ``(a+)+b``, ``(a?a?)*b`` or ``a*a*a*a*a*a*b`` (measured: ``(a?a?)*b`` against
20 ``a`` took 5.4 s, and doubles with each further ``a``), which would freeze the console.  RE2 (``google-re2``)
matches in time linear in the line, whatever the pattern; it has no lookarounds or backreferences, and such a
pattern is refused with a message that says so.  RE2 reports errors through its return value only
(``log_errors`` off): nothing may write to the terminal under the console.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import re2

MAX_FILTER_PATTERN = 256
"""The longest regular expression the event filter takes, in characters (longer ones are refused)."""

_OPTIONS = re2.Options()
_OPTIONS.case_sensitive = False
_OPTIONS.log_errors = False


class FilterError(ValueError):
    """A filter was refused; the message names the problem and the fix (the filter in force stays)."""


class FilterPattern:
    """A compiled filter pattern: ``search`` and ``finditer`` over ``str``, with ``re``'s match objects' spans."""

    __slots__ = ("text", "_compiled")

    def __init__(self, text: str, compiled: Any) -> None:
        self.text = text
        self._compiled = compiled

    def search(self, line: str) -> Any:
        """The first match in ``line`` (with ``span()``), or None."""
        return self._compiled.search(_encodable(line))

    def finditer(self, line: str) -> Iterator[Any]:
        """Every non-overlapping match in ``line``, left to right."""
        return self._compiled.finditer(_encodable(line))

    def __repr__(self) -> str:
        return f"FilterPattern({self.text!r})"


def compile_pattern(text: str) -> FilterPattern:
    """``text`` as a case-insensitive RE2 pattern, or ``FilterError`` saying what is wrong with it."""
    if len(text) > MAX_FILTER_PATTERN:
        raise FilterError(f"the pattern is {len(text)} characters long; the limit is {MAX_FILTER_PATTERN}: "
                          "shorten it (box:NAME and kind:PREFIX narrow the events without a pattern)")
    try:
        compiled = re2.compile(_encodable(text), _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "unknown error"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise FilterError(f"'{text}' is not a valid regular expression: {reason}; escape special characters "
                          "with \\ (lookarounds and backreferences are not supported: they can stall a search)"
                          ) from None
    return FilterPattern(text, compiled)


def _encodable(text: str) -> str:
    """``text`` with any lone surrogate (which UTF-8 cannot hold) replaced by ``?``: same length, same offsets."""
    if text.isascii():
        return text
    return text.encode("utf-8", "replace").decode("utf-8")
