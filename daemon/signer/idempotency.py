"""The signer's bounded idempotency window: which recent request made which record, so a retry gets its first answer.

A state-changing request's ``request_id`` is ``req-`` + 32 lowercase hex digits whose first 12 are the caller's
Unix time in milliseconds when it first sent the request (``new_request_id``).  The window remembers, per
(caller, request_id), only the log position of the record the request made (a 16-byte key and one integer); the
reply is rebuilt from that record on disk.  It keeps at most ``SIGNER_IDEMPOTENCY_WINDOW`` entries and none older
than ``SIGNER_IDEMPOTENCY_SECONDS``.  A request whose time is at or before the newest time ever dropped from the
window, or older than the window's span, cannot be told apart from a retry of a forgotten one: it is refused
(``request_expired``), never recorded a second time.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import deque

from ..limits import SIGNER_IDEMPOTENCY_SECONDS, SIGNER_IDEMPOTENCY_WINDOW
from .rpc_schema import REQUEST_ID_PATTERN

FUTURE_SKEW_MS = 5_000  # a request_id's time may be this far ahead of the signer's clock (same host)
_SEQ_SHIFT = 48  # an entry's value is seq << 48 | stamp_ms (a millisecond time fits 48 bits until year 10889)
_STAMP_MASK = (1 << _SEQ_SHIFT) - 1


def new_request_id(now: float | None = None) -> str:
    """A fresh request id stamped with ``now`` (default: the clock), as the window requires."""
    stamp = int((time.time() if now is None else now) * 1000)
    return f"req-{stamp:012x}{os.urandom(10).hex()}"


def request_stamp_ms(request_id: str) -> int:
    """The millisecond time in a request id that ``REQUEST_ID_PATTERN`` matched."""
    return int(request_id[4:16], 16)


class RequestExpired(Exception):
    """The request cannot be matched to the window; the message says why and what to do."""


class ReplyWindow:
    """Recent (caller, request_id) -> log seq, bounded by count and by time; see the module docstring."""

    def __init__(self, *, limit: int = SIGNER_IDEMPOTENCY_WINDOW.default,
                 seconds: int = SIGNER_IDEMPOTENCY_SECONDS.default) -> None:
        self.limit = limit
        self.span_ms = seconds * 1000
        self._entries: dict[bytes, int] = {}
        self._order: deque[bytes] = deque()
        self.floor_ms = -1  # the newest stamp ever dropped: a request stamped at or before it may be a forgotten retry

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(identity: str, request_id: str) -> bytes:
        return hashlib.blake2b(f"{identity}\n{request_id}".encode(), digest_size=16).digest()

    def lookup(self, key: bytes) -> int | None:
        """The seq of the record this request made, if it is still in the window."""
        value = self._entries.get(key)
        return None if value is None else value >> _SEQ_SHIFT

    def check_new(self, request_id: str, now_ms: int) -> None:
        """Raise ``RequestExpired`` unless a request not in the window may be taken as new."""
        stamp = request_stamp_ms(request_id)
        if stamp > now_ms + FUTURE_SKEW_MS:
            raise RequestExpired(f"request_id {request_id!r} is stamped {stamp - now_ms} ms ahead of the signer's "
                                 "clock; make request ids with new_request_id() on this host")
        if stamp < now_ms - self.span_ms or stamp <= self.floor_ms:
            raise RequestExpired(
                f"request_id {request_id!r} was made {max(0, now_ms - stamp) / 1000:.1f} s ago, before the signer's "
                f"idempotency window (the last {self.limit} requests, at most {self.span_ms // 1000} s); a retry "
                "this late cannot be matched to its first answer: read the run (read) to see whether it was "
                "recorded, and send anything new with a new request_id")

    def remember(self, key: bytes, request_id: str, seq: int, now_ms: int) -> None:
        """Note that the request made the record at ``seq``; drop what falls out of the window."""
        stamp = request_stamp_ms(request_id) if REQUEST_ID_PATTERN.match(request_id) else 0
        if key not in self._entries:
            self._order.append(key)
        self._entries[key] = seq << _SEQ_SHIFT | stamp
        oldest_kept = now_ms - self.span_ms
        while self._order and (len(self._order) > self.limit
                               or self._entries[self._order[0]] & _STAMP_MASK < oldest_kept):
            dropped = self._entries.pop(self._order.popleft())
            self.floor_ms = max(self.floor_ms, dropped & _STAMP_MASK)
