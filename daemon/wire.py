"""The one wire schema of the daemon's API, shared by the daemon, the CLI and the console (standard library only).

Events: every event has a daemon-wide sequence number, a time, a box id ("" for the daemon
itself), a kind from ``EVENT_KINDS`` and a small JSON payload.  Boxes are described by
``BoxInfo``.  ``API_VERSION`` prefixes every route (``/v1/…``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

API_VERSION = "v1"

BOX_STATES = ("creating", "running", "held", "stopping", "stopped", "failed", "removed")

EVENT_KINDS = frozenset(
    {
        "daemon.started", "daemon.stopping", "daemon.unrecorded",
        "box.created", "box.started", "box.stopped", "box.removed", "box.failed", "box.held", "box.released",
        "exec.started", "exec.finished", "exec.denied", "exec.refused",
        "signer.unavailable", "gap", "containment.changed", "patch.saved",
        "guest.protocol_error",
    }
)


@dataclass(frozen=True)
class Event:
    seq: int
    time: str
    box_id: str
    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Any) -> Event:
        if not isinstance(value, dict) or set(value) != {"seq", "time", "box_id", "kind", "data"}:
            raise ValueError("an event has exactly seq, time, box_id, kind, data")
        if type(value["seq"]) is not int or value["seq"] < 1:
            raise ValueError("event seq must be a positive integer")
        if not all(isinstance(value[k], str) for k in ("time", "box_id", "kind")) or not isinstance(value["data"], dict):
            raise ValueError("event time, box_id and kind are strings and data an object")
        return cls(value["seq"], value["time"], value["box_id"], value["kind"], value["data"])


@dataclass(frozen=True)
class SecretBinding:
    """A secret as the API shows it: its name and bound hosts, never its value."""

    name: str
    hosts: tuple[str, ...]
    header: str = "Authorization"


@dataclass
class BoxInfo:
    id: str
    name: str
    state: str
    image: str
    workspace: str
    created_at: str
    expires_at: str
    run_id: str | None
    recorded: bool
    execs_running: int = 0
    execs_total: int = 0
    connections_open: int = 0
    approvals_pending: int = 0
    last_event: str = ""
    allow: list[str] = field(default_factory=list)
    secrets: list[dict[str, Any]] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)
    backend: str = ""
    reason: str = ""
    pid: int | None = None  # host pid of the box's init process, while it runs

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> BoxInfo:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in value.items() if k in known})


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The API's one error shape."""
    return {"error": {"code": code, "message": message, **extra}}


def daemon_runtime_dir(environ: dict[str, str] | None = None) -> str:
    """Where the daemon's API socket lives: ``$TKBOX_DAEMON_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/tkbox-daemon``,
    else ``/tmp/tkbox-daemon-<uid>``."""
    env = os.environ if environ is None else environ
    if env.get("TKBOX_DAEMON_RUNTIME_DIR"):
        return os.path.abspath(env["TKBOX_DAEMON_RUNTIME_DIR"])
    if env.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.path.abspath(env["XDG_RUNTIME_DIR"]), "tkbox-daemon")
    return f"/tmp/tkbox-daemon-{os.getuid()}"
