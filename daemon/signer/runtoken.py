"""Run tokens: an HMAC-bound capability for one run, one caller identity, until it expires.

Format ``b64url(payload).b64url(mac)`` without padding; payload is compact sorted
JSON ``{"exp":…, "run_id":…, "sub":"uid:N"}``; mac = HMAC-SHA256(run_token.key,
``"tkbox.run_token.v1\\n"`` + payload).  Never the record key.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json

TAG = b"tkbox.run_token.v1\n"
MAX_TOKEN_LENGTH = 1024
EXPIRED = "run token has expired; register a new run"


class RunTokenError(ValueError):
    """The token is malformed, forged, for another run or caller, or expired."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise RunTokenError("run token is not base64url") from None


def mint(key: bytes, run_id: str, subject: str, expires: int) -> str:
    payload = json.dumps({"exp": expires, "run_id": run_id, "sub": subject}, sort_keys=True, separators=(",", ":")).encode()
    mac = hmac.new(key, TAG + payload, "sha256").digest()
    return f"{_b64(payload)}.{_b64(mac)}"


def check(key: bytes, token: str, run_id: str, subject: str, now: int) -> int:
    """Raise RunTokenError unless ``token`` was minted for this run and caller and is unexpired; return its expiry."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH or token.count(".") != 1:
        raise RunTokenError("run token is malformed")
    payload_text, mac_text = token.split(".")
    payload, mac = _unb64(payload_text), _unb64(mac_text)
    if _b64(payload) != payload_text or _b64(mac) != mac_text:
        raise RunTokenError("run token is not canonical base64url")
    if not hmac.compare_digest(hmac.digest(key, TAG + payload, "sha256"), mac):
        raise RunTokenError("run token was not issued by this signer")
    try:
        claims = json.loads(payload)
    except ValueError:
        raise RunTokenError("run token payload is not JSON") from None
    if claims.get("run_id") != run_id:
        raise RunTokenError("run token is for another run")
    if claims.get("sub") != subject:
        raise RunTokenError("run token was issued to another caller")
    if not isinstance(claims.get("exp"), int) or claims["exp"] <= now:
        raise RunTokenError(EXPIRED)
    return int(claims["exp"])
