"""A small blocking client for the signer's socket, used by the CLI, tests and benches.

It sends one request per line and reads the answers in order; ``pipeline`` sends many
before reading any.  Errors come back as ``SignerError`` with the signer's code.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from .. import strictjson
from .idempotency import new_request_id
from .rpc_schema import MAX_LINE_BYTES

__all__ = ["SignerClient", "SignerError", "SignerUnreachable", "new_request_id"]


class SignerError(RuntimeError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class SignerUnreachable(SignerError):
    def __init__(self, message: str) -> None:
        super().__init__("unreachable", message)


class SignerClient:
    def __init__(self, socket_path: Path | str, *, timeout: float = 30.0) -> None:
        self.socket_path = str(socket_path)
        try:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.settimeout(timeout)
            self._sock.connect(self.socket_path)
        except OSError as exc:
            self._sock.close()
            raise SignerUnreachable(
                f"cannot reach the signer at {self.socket_path} ({exc.strerror or exc}); start one with: tkbox signer up"
            ) from None
        self._file = self._sock.makefile("rb")

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def __enter__(self) -> SignerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, line: bytes) -> None:
        self._sock.sendall(line)

    def read_reply(self) -> dict[str, Any]:
        line = self._file.readline(MAX_LINE_BYTES + 2)
        if not line:
            raise SignerUnreachable("the signer closed the connection without an answer")
        return strictjson.loads_object(line, max_bytes=MAX_LINE_BYTES + 1)

    def call_raw(self, request: dict[str, Any]) -> dict[str, Any]:
        self.send_raw(json.dumps(request, separators=(",", ":")).encode() + b"\n")
        return self.read_reply()

    def call(self, method: str, **fields: Any) -> dict[str, Any]:
        """Call ``method``; a state-changing call gets a fresh request_id unless one is given."""
        reply = self.call_raw({"method": method, **fields})
        if "error" in reply:
            raise SignerError(reply["error"].get("code", "?"), reply["error"].get("message", ""))
        return reply

    def pipeline(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send every request, then read every reply (in the same order)."""
        self.send_raw(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in requests))
        return [self.read_reply() for _ in requests]
