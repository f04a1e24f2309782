"""Salted commitments: how content is recorded without being stored.

``hash`` = ``hmac-sha256:`` + HMAC-SHA256(salt, ``sha256:<hex>`` of the value's RFC 8785
bytes), with salt = HMAC-SHA256(salt key, label); ``size`` = the canonical byte length.
Revealing one label's salt lets a holder of the content prove it, and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from .. import strictjson


def digest_of(value: Any, encoded: dict[str, bytes] | None = None) -> tuple[str, int]:
    """``sha256:<hex>`` of the value's canonical bytes, and their length; ``encoded`` as for
    ``strictjson.canonical_object`` (an object's members already encoded)."""
    body = strictjson.canonical(value) if encoded is None else strictjson.canonical_object(value, encoded)
    return "sha256:" + hashlib.sha256(body).hexdigest(), len(body)


def commit_digest(salt: bytes, digest: str) -> str:
    return "hmac-sha256:" + hmac.digest(salt, digest.encode(), "sha256").hex()


def commit(salt: bytes, value: Any, encoded: dict[str, bytes] | None = None) -> dict[str, Any]:
    digest, size = digest_of(value, encoded)
    return {"hash": commit_digest(salt, digest), "size": size}
