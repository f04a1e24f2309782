"""The two ways a call to the daemon fails, whatever carried it: ``DaemonError`` (the daemon refused, or its reply
was broken) and ``DaemonUnreachable`` (nothing answers on its socket).  Standard library only.

The words shared by every transport are written once here: no daemon (``unreachable``), a daemon that hung up
mid-reply (``lost``), a reply past its size cap (``too_large``), and the daemon's own error body (``error_from``).
"""

from __future__ import annotations

import json
from typing import Any

NO_DAEMON_HINT = "start it with: tkbox up (or tkbox daemon)"


class DaemonError(RuntimeError):
    def __init__(self, code: str, message: str, status: int = 0, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.extra = extra


class DaemonUnreachable(DaemonError):
    """Nothing answers on the daemon's socket; ``extra["hint"]`` says how to start one."""

    def __init__(self, message: str) -> None:
        super().__init__("no_daemon", message, hint=NO_DAEMON_HINT)


def unreachable(socket_path: object, error: OSError) -> DaemonUnreachable:
    """The same words for every call that finds no daemon (the OS's reason, never a library's text)."""
    reason = error.strerror or ("timed out" if isinstance(error, TimeoutError) else "nothing accepts")
    return DaemonUnreachable(f"no daemon answers at {socket_path} ({reason})")


def lost() -> DaemonError:
    """The daemon hung up or broke off mid-reply (it stopped, or crashed), or broke HTTP or WebSocket framing."""
    return DaemonError("daemon_lost", "the daemon closed the connection before it answered",
                       hint="see whether it still runs: tkbox ls")


def too_large(what: str, cap: int) -> DaemonError:
    """A reply (or one message of a stream) past the size the client reads; nothing past the cap was read."""
    return DaemonError("reply_too_large", f"the daemon's {what} is over the {cap} bytes this client reads",
                       hint="the daemon sent more than any reply of its API holds; see whether it is a tkbox daemon")


def json_reply(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise DaemonError("bad_reply", "the daemon's reply is not JSON") from None


def error_from(status: int, body: bytes) -> DaemonError:
    """The daemon's ``{"error": {"code", "message", …}}`` as a DaemonError; any other body quoted as JSON text."""
    try:
        error = json.loads(body)["error"]
        extra = {k: v for k, v in error.items() if k not in ("code", "message")}
        return DaemonError(str(error["code"]), str(error["message"]), status, **extra)
    except (ValueError, KeyError, TypeError, AttributeError):
        shown = json.dumps(body[:200].decode("utf-8", "replace"))  # JSON spelling, escaped, never b'...'
        return DaemonError("http_error", f"the daemon answered {status}: {shown}", status)
