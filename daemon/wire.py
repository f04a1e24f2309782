"""The one wire schema of the daemon's API, shared by the daemon, the CLI and the console (standard library only).

Events: every event has a daemon-wide sequence number, a time, a box id ("" for the daemon
itself), a kind from ``EVENT_KINDS`` and a small JSON payload.  Boxes are described by
``BoxInfo``; a box's execs by ``ExecInfo`` and, with the output the daemon kept, ``ExecOutput``.
``API_VERSION`` prefixes every route (``/v1/…``).
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

from .wire_record import as_dict, field, record

API_VERSION = "v1"

BOX_STATES = ("creating", "running", "held", "stopping", "stopped", "failed", "lost", "removed")
"""``lost``: the box was live when its daemon ended (stopped or died); a restarted daemon lists it, runs nothing in
it and can only remove it (docs/boxes.md)."""

RUN_STATES = ("open", "closed", "orphaned")
"""A recorded box's run: ``open`` (this daemon holds its token), ``closed``, or ``orphaned`` (still open in the
signer's log, but its token was in an earlier daemon's memory only: nothing more is recorded into it)."""

EVENT_KINDS = frozenset(
    {
        "daemon.started", "daemon.stopping", "daemon.unrecorded", "daemon.pool",
        "box.created", "box.started", "box.stopped", "box.removed", "box.failed", "box.held", "box.released",
        "exec.started", "exec.finished", "exec.denied", "exec.refused",
        "signer.unavailable", "gap", "containment.changed", "patch.saved", "patch.applied",
        "guest.protocol_error", "guest.ended", "box.lost", "box.oom", "box.disk_full", "daemon.registry",
        "approval.pending", "approval.answered", "approval.expired", "approval.rule_added", "approval.rule_removed",
        "box.exported", "egress.allowlist",
        "egress.allowed", "egress.held", "egress.approved", "egress.rejected", "egress.expired", "egress.refused",
        "egress.closed", "egress.resolve_failed", "events.missing",
    }
)
"""``daemon.pool``: a box was started ahead (``data``: ``ready``, ``size``) or could not be (``reason``).
``events.missing``: sequence numbers a reader asked for that the daemon can no longer serve (older than the
history it keeps, or lost to a damaged history file); ``data``: ``first``, ``last`` (its own ``seq``) and ``reason``."""


@record(frozen=True)
class Event:
    seq: int
    time: str
    box_id: str
    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return as_dict(self)

    @classmethod
    def from_json(cls, value: Any) -> Event:
        if not isinstance(value, dict) or set(value) != {"seq", "time", "box_id", "kind", "data"}:
            raise ValueError("an event has exactly seq, time, box_id, kind, data")
        if type(value["seq"]) is not int or value["seq"] < 1:
            raise ValueError("event seq must be a positive integer")
        if not all(isinstance(value[k], str) for k in ("time", "box_id", "kind")) or not isinstance(value["data"], dict):
            raise ValueError("event time, box_id and kind are strings and data an object")
        return cls(value["seq"], value["time"], value["box_id"], value["kind"], value["data"])


EVENT_PAGE_FIELDS = frozenset({"events", "last_seq", "first_kept", "more"})


@record(frozen=True)
class EventPage:
    """One page of the event history (``GET /v1/events/page?before=SEQ&limit=N&box=ID``): the last ``limit`` events
    before ``before`` (the newest without it), oldest first; ``last_seq``: the daemon's newest sequence number when
    it answered; ``first_kept``: the oldest it still stores (0: none); ``more``: older events may exist (ask again
    with ``before`` = the first event's seq)."""

    events: list[Event]
    last_seq: int
    first_kept: int
    more: bool

    @classmethod
    def from_json(cls, value: Any) -> EventPage:
        if not isinstance(value, dict) or set(value) != EVENT_PAGE_FIELDS:
            raise ValueError(f"an event page has exactly {sorted(EVENT_PAGE_FIELDS)}")
        if not isinstance(value["events"], list) or type(value["more"]) is not bool:
            raise ValueError("an event page's events is a list and more a boolean")
        for name in ("last_seq", "first_kept"):
            if type(value[name]) is not int or value[name] < 0:
                raise ValueError(f"an event page's {name} is a sequence number")
        events = [Event.from_json(item) for item in value["events"]]
        if any(later.seq <= earlier.seq for earlier, later in zip(events, events[1:], strict=False)):
            raise ValueError("an event page's events are in increasing sequence order")
        return cls(events, value["last_seq"], value["first_kept"], value["more"])


@record(frozen=True)
class SecretBinding:
    """A secret as the API shows it: its name and bound hosts, never its value."""

    name: str
    hosts: tuple[str, ...]
    header: str = "Authorization"


@record
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
    run_state: str = ""  # one of RUN_STATES for a recorded box, "" for an unrecorded one
    remembered: list[dict[str, Any]] = field(default_factory=list)  # RememberedRule.to_json() of each
    exported: dict[str, Any] | None = None  # RunExport.to_json() of the box's last export, None before one
    allow_presets: list[str] = field(default_factory=list)  # the presets its settings named (entries in ``allow``)
    resolve: dict[str, list[str]] = field(default_factory=dict)  # pinned name -> addresses (--resolve)
    inspect: str = "bound"  # the egress proxy's inspect mode (settings.INSPECT_MODES)

    def to_json(self) -> dict[str, Any]:
        return as_dict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> BoxInfo:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in value.items() if k in known})


@record(frozen=True)
class RunExport:
    """A box's run as its last export gave it (``POST /v1/boxes/{box}/export``; ``BoxInfo.exported``; the event
    ``box.exported``): the run, the bundle's SHA-256 (``sha256:<hex>``) and size, and when (RFC 3339 UTC). A run
    exports once closed, so exporting it again gives the same bytes."""

    run_id: str
    sha256: str
    size: int
    exported_at: str

    def to_json(self) -> dict[str, Any]:
        return as_dict(self)

    @classmethod
    def from_json(cls, value: Any) -> RunExport:
        if not isinstance(value, dict) or set(value) != {"run_id", "sha256", "size", "exported_at"}:
            raise ValueError("a run export has exactly run_id, sha256, size and exported_at")
        if not all(isinstance(value[key], str) for key in ("run_id", "sha256", "exported_at")):
            raise ValueError("a run export's run_id, sha256 and exported_at are strings")
        if type(value["size"]) is not int or value["size"] < 0:
            raise ValueError("a run export's size is a non-negative integer")
        if not value["sha256"].startswith("sha256:") or len(value["sha256"]) != 71:
            raise ValueError("a run export's sha256 is sha256:<64 hex>")
        return cls(value["run_id"], value["sha256"], value["size"], value["exported_at"])


EXPORT_HEADERS = {"run_id": "X-Tkbox-Run-Id", "sha256": "X-Tkbox-Bundle-Sha256", "size": "X-Tkbox-Bundle-Size"}
"""The headers of an export's answer (its body is the bundle's bytes, chunked): what the daemon announces before
the bytes, as the signer announced it, so the client checks what it received."""


EXEC_STATES = ("running", "finished", "denied", "failed", "lost")
"""An exec's state on its box's page: ``running``; ``finished`` (the guest reported an exit); ``denied`` (never
ran); ``failed`` (allowed, but the host ended it or it never started: ``error`` says why); ``lost`` (the daemon
ended before the command did, so neither its end nor the output it held in memory is known)."""


@record(frozen=True)
class OutputTail:
    """What the daemon kept of one output stream of an exec: the last ``kept`` of ``total`` bytes written."""

    kept: int = 0
    total: int = 0

    @property
    def truncated(self) -> bool:
        """Whether the start of the stream was cut (only its last ``kept`` bytes are kept)."""
        return self.total > self.kept

    def to_json(self) -> dict[str, Any]:
        return {"kept": self.kept, "total": self.total, "truncated": self.truncated}

    @classmethod
    def from_json(cls, value: Any) -> OutputTail:
        if not isinstance(value, dict) or not all(type(value.get(k)) is int and value[k] >= 0
                                                  for k in ("kept", "total")):
            raise ValueError("an output tail has integer kept and total")
        return cls(value["kept"], value["total"])


@record(frozen=True)
class ExecInfo:
    """One exec of a box as its page lists it (``GET /v1/boxes/{box}/execs``).

    ``command`` is the decided command line (cut to 4 KiB, ``command_cut`` then true); ``verdict``, ``rule_ids``,
    ``reason`` and ``hint`` are the signer's decision; ``exit_code``/``signal``/``timed_out`` the end, and
    ``reported_by`` whose word that end is (``guest``: the guest agent reported it, ``host``: the daemon ended the
    command or saw the box end, empty while running or when denied).  ``started_at`` is when the daemon decided
    it; ``duration_ms`` is set once it has ended.  ``output_dropped``: the per-box budget needed the room and
    this exec's output was dropped (oldest execs first); ``stdout``/``stderr`` still count what was written.
    """

    id: int
    command: str
    state: str
    verdict: str
    started_at: str
    rule_ids: tuple[str, ...] = ()
    reason: str = ""
    hint: str = ""
    command_cut: bool = False
    tty: bool = False
    duration_ms: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    reported_by: str = ""
    error: str = ""
    stdout: OutputTail = field(default_factory=OutputTail)
    stderr: OutputTail = field(default_factory=OutputTail)
    output_dropped: bool = False

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}  # every other field is a plain value
        out.update(rule_ids=list(self.rule_ids), stdout=self.stdout.to_json(), stderr=self.stderr.to_json())
        return out

    @classmethod
    def from_json(cls, value: Any) -> ExecInfo:
        """Strict about types (it comes from the daemon, or from a record file the daemon wrote); unknown keys are
        ignored so a newer daemon can add fields."""
        if not isinstance(value, dict):
            raise ValueError("an exec is a JSON object")
        fields = cls.__dataclass_fields__
        known = {key: item for key, item in value.items() if key in fields}
        kinds: dict[str, tuple[type, ...]] = {
            "id": (int,), "command": (str,), "state": (str,), "verdict": (str,), "started_at": (str,),
            "reason": (str,), "hint": (str,), "command_cut": (bool,), "tty": (bool,), "timed_out": (bool,),
            "reported_by": (str,), "error": (str,), "output_dropped": (bool,),
            "duration_ms": (int, type(None)), "exit_code": (int, type(None)), "signal": (int, type(None)),
        }
        for key, allowed in kinds.items():
            if key in known and type(known[key]) not in allowed:
                raise ValueError(f"exec field {key} has the wrong type")
        if any(key not in known for key in ("id", "command", "state", "verdict", "started_at")):
            raise ValueError("an exec has id, command, state, verdict and started_at")
        if known["state"] not in EXEC_STATES:
            raise ValueError(f"unknown exec state {known['state']!r}")
        rule_ids = known.get("rule_ids", [])
        if not isinstance(rule_ids, list) or not all(isinstance(rule, str) for rule in rule_ids):
            raise ValueError("exec rule_ids is a list of strings")
        known["rule_ids"] = tuple(rule_ids)
        for stream in ("stdout", "stderr"):
            known[stream] = OutputTail.from_json(known[stream]) if stream in known else OutputTail()
        return cls(**known)


@record(frozen=True)
class ExecOutput:
    """One exec with the output the daemon kept (``GET /v1/boxes/{box}/execs/{id}``): box-controlled bytes, to be
    shown escaped (``tkbox_tui/terminal_text.py``).  On the wire the bytes are base64."""

    exec: ExecInfo
    stdout: bytes = b""
    stderr: bytes = b""

    def to_json(self) -> dict[str, Any]:
        return {"exec": self.exec.to_json(), "stdout": base64.b64encode(self.stdout).decode("ascii"),
                "stderr": base64.b64encode(self.stderr).decode("ascii")}

    @classmethod
    def from_json(cls, value: Any) -> ExecOutput:
        if not isinstance(value, dict) or set(value) != {"exec", "stdout", "stderr"}:
            raise ValueError("an exec output has exactly exec, stdout and stderr")
        try:
            streams = [base64.b64decode(value[key], validate=True) for key in ("stdout", "stderr")]
        except (binascii.Error, TypeError, ValueError):
            raise ValueError("exec output streams are base64") from None
        return cls(ExecInfo.from_json(value["exec"]), *streams)


APPROVAL_KINDS = ("exec", "write", "host")
"""What an approval holds: ``exec`` (a command the policy answered ``ask``: ``asked`` is ``{command, cwd, tty}``)
or ``write`` (a file of a box's patch that ``tkbox apply`` would write: ``asked`` is ``{path, action}`` and
``old_path`` for a rename or copy; ``program`` is ``Write``) or ``host`` (a connection whose host is not on the
box's allowlist, TK-A008: ``asked`` is ``{host, port, url, because}``, ``context`` ``{execs_running}``; ``program``
is the host, so a remembered rule is per host)."""

APPROVAL_STATES = ("pending", "approved", "rejected", "expired", "withdrawn", "lost")
"""``pending``: waiting for a person; ``approved``/``rejected``: a person answered (``answered_by``), or a
remembered rule approved it (``remembered_by``); ``expired``: nobody answered in time; ``withdrawn``: the request
went away before an answer (its client disconnected, or its box stopped); ``lost``: the daemon stopped with it
pending, or the signer refused to keep its answer's record (the action is refused and the box stopped). Only
``approved`` lets the action run."""


@record(frozen=True)
class ApprovalInfo:
    """One approval as the API, the CLI and the console show it (``GET /v1/approvals``; events
    ``approval.pending``/``approval.answered``/``approval.expired`` carry it as ``data["approval"]``).

    ``asked`` is what the action is, exactly as decided: for ``exec`` ``{"command", "cwd", "tty"}`` (the decided
    command line). ``program`` is the program that would run (argv[0]): a remembered rule is per rule id and
    program. ``decision_id``, ``rule_ids``, ``reason`` and ``hint`` are the signer's ``ask`` decision.
    ``context`` says who asked, where known (``{"exec_id": n}``: the exec on the box's page). Times are RFC 3339
    UTC. ``answered_by`` is the operator's identity from the API socket's peer credentials (``uid 1000 (alice)``);
    ``answer_reason`` the operator's reason (a reject's), or why it expired or was withdrawn. ``remembered_by``:
    the id of the remembered rule that approved it without a person (the person's answer that made that rule is
    in the rule). Box-controlled text (command, cwd) is shown escaped, as every box byte is.
    """

    id: str
    box_id: str
    box_name: str
    kind: str
    state: str
    asked: dict[str, Any]
    program: str
    decision_id: str
    rule_ids: tuple[str, ...]
    reason: str
    created_at: str
    expires_at: str
    hint: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    answered_at: str = ""
    answered_by: str = ""
    answer_reason: str = ""
    remember: bool = False
    remembered_by: str = ""

    @property
    def pending(self) -> bool:
        return self.state == "pending"

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["rule_ids"] = list(self.rule_ids)
        return out

    @classmethod
    def from_json(cls, value: Any) -> ApprovalInfo:
        """Strict about the types of the fields it knows; unknown keys are ignored (a newer daemon may add some)."""
        if not isinstance(value, dict):
            raise ValueError("an approval is a JSON object")
        fields = cls.__dataclass_fields__
        known = {key: item for key, item in value.items() if key in fields}
        required = ("id", "box_id", "box_name", "kind", "state", "asked", "program", "decision_id", "rule_ids",
                    "reason", "created_at", "expires_at")
        missing = [key for key in required if key not in known]
        if missing:
            raise ValueError(f"an approval has {', '.join(missing)}")
        for key, item in known.items():
            wanted: type = {"asked": dict, "context": dict, "rule_ids": list, "remember": bool}.get(key, str)
            if type(item) is not wanted:
                raise ValueError(f"approval field {key} has the wrong type")
        if known["state"] not in APPROVAL_STATES:
            raise ValueError(f"unknown approval state {known['state']!r}")
        if not all(isinstance(rule, str) for rule in known["rule_ids"]):
            raise ValueError("approval rule_ids is a list of strings")
        known["rule_ids"] = tuple(known["rule_ids"])
        return cls(**known)


@record(frozen=True)
class RememberedRule:
    """"Approve and remember": for the rest of its box's life, an ``ask`` of the same program whose rule ids are
    all remembered for it is approved without a person (each such approval is still recorded). Listed on the box
    (``BoxInfo.remembered``), removable (``DELETE /v1/boxes/{box}/remembered/{id}``)."""

    id: str
    program: str
    rule_id: str
    approval_id: str
    by: str
    created_at: str

    def to_json(self) -> dict[str, Any]:
        return as_dict(self)

    @classmethod
    def from_json(cls, value: Any) -> RememberedRule:
        names = tuple(cls.__dataclass_fields__)
        if not isinstance(value, dict) or not all(type(value.get(name)) is str for name in names):
            raise ValueError(f"a remembered rule has string {', '.join(names)}")
        return cls(*(value[name] for name in names))


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
