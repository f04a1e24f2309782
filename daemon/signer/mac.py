"""HMAC-SHA256 set up once for a key used on every decision.

``HmacSha256(key).digest(message)`` is exactly ``hmac.digest(key, message, "sha256")``, taken from a copy of
one prepared ``hmac`` object: a one-shot ``hmac.digest`` sets OpenSSL's HMAC up again on each call (2.4 against
2.0 µs here). A property test holds the two equal for any key and message.
"""

from __future__ import annotations

import hmac


class HmacSha256:
    """One key's HMAC-SHA256, ready to digest messages."""

    __slots__ = ("_prepared",)

    def __init__(self, key: bytes) -> None:
        self._prepared = hmac.new(key, digestmod="sha256")

    def digest(self, message: bytes) -> bytes:
        mac = self._prepared.copy()
        mac.update(message)
        return mac.digest()
