"""The daemon's registry of its boxes on disk: one record per box, written atomically, read back strictly.

``<state>/registry/<box id>.json`` (0600 in a 0700 directory, the daemon's own) holds what a restarted daemon
needs to list a box and to remove it: its public settings (never a secret value, never the task), state and
reason, times, both host uids, the backend, the id of its run and whether that run was closed.  It never holds a
run token: tokens live in the daemon's memory only, so a run left open by an earlier daemon stays open
(``orphaned``).  Records are rewritten whole on every state change (``fsutil.write_atomically``: a reader sees the
old record or the new one, never a mix) and deleted once a removal is complete.

Reading is strict: a record must be one JSON object of at most ``MAX_RECORD_BYTES`` with exactly the fields of
``RECORD_FIELDS``, each of its type and within its bounds, for the box its file is named after.  ``load`` never
raises for one bad file: a record it cannot read is set aside (renamed ``<name>.unreadable``), a record of an
unknown version (a newer tkbox's) is left in place, and both are reported as ``RegistryProblem``s for the daemon
to emit; neither becomes a box.  Only a registry directory that cannot be used at all raises ``RegistryError``.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import strictjson
from ..box.uids import FIRST_BOX_UID
from ..egress.allowlist import EntryError, parse_entry
from ..fsutil import write_atomically
from ..limits import ALLOWLIST_ENTRIES
from ..processes import AlreadyRunning, take_lock
from ..signer.paths import PathError
from .settings import HOST, LIMIT_FIELDS, NAME, SECRET_NAME, BoxSettings, Secret

REGISTRY_VERSION = 1
MAX_RECORD_BYTES = 64 * 1024
MAX_TEXT = 4096  # characters of a reason, path or image kept in a record
BOX_ID = re.compile(r"^[0-9a-f]{12}\Z", re.ASCII)  # the ids BoxManager.create makes (secrets.token_hex(6))
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\Z", re.ASCII)
KIND = re.compile(r"^[a-z][a-z_.]{0,63}\Z", re.ASCII)
RECORD_STATES = ("creating", "running", "held", "stopping", "stopped", "failed", "lost", "removed")
LIVE_RECORD_STATES = ("creating", "running", "held", "stopping")  # a record left in one of these: the box is lost
RECORD_FIELDS = frozenset({"version", "id", "state", "reason", "removing", "created_at", "expires_at", "backend",
                           "uids", "run", "execs_total", "last_event", "settings"})
SETTINGS_RECORD_FIELDS = frozenset({"name", "workspace", "image", "allow", "secrets", "limits"})
SET_ASIDE_SUFFIX = ".unreadable"
LOCK_NAME = ".lock"
_MAX_UID = 0xFFFF_FFFE


class RegistryError(PathError):
    """The registry directory itself cannot be used; the message says what to fix (the daemon does not start)."""


class RecordError(ValueError):
    """A record is not one this daemon wrote: torn, hand-edited or for another box. The message says which field."""


class UnknownVersion(RecordError):
    """A record of a registry version this daemon does not read (written by a newer tkbox)."""


@dataclass(frozen=True)
class RunNote:
    """A box's run as the registry keeps it: its id and whether it was closed (never its token)."""

    id: str
    closed: bool


@dataclass(frozen=True)
class BoxRecord:
    """One box as the registry keeps it."""

    id: str
    state: str
    settings: BoxSettings
    created_at: str
    expires_at: str
    uid: int
    job_uid: int
    backend: str
    reason: str = ""
    removing: bool = False  # a removal began: a restart finishes it
    run: RunNote | None = None  # None: the box was unrecorded
    execs_total: int = 0
    last_event: str = ""

    def to_json(self) -> dict[str, Any]:
        public = self.settings.public()
        return {
            "version": REGISTRY_VERSION, "id": self.id, "state": self.state, "reason": _clip(self.reason),
            "removing": self.removing, "created_at": self.created_at, "expires_at": self.expires_at,
            "backend": self.backend, "uids": {"guest": self.uid, "job": self.job_uid},
            "run": None if self.run is None else {"id": self.run.id, "closed": self.run.closed},
            "execs_total": self.execs_total, "last_event": self.last_event,
            "settings": {key: public[key] for key in sorted(SETTINGS_RECORD_FIELDS)},
        }

    @classmethod
    def from_json(cls, value: Any, *, box_id: str) -> BoxRecord:
        """Check every field of a parsed record of ``box_id``; raises ``UnknownVersion`` or ``RecordError``."""
        if not isinstance(value, dict):
            raise RecordError("a record is one JSON object")
        version = value.get("version")
        if type(version) is int and version != REGISTRY_VERSION:
            raise UnknownVersion(f"registry version {value['version']!r}; this daemon reads version "
                                 f"{REGISTRY_VERSION} (a newer tkbox wrote it)")
        _exact_keys("record", value, RECORD_FIELDS)
        if type(version) is not int:
            raise RecordError(f"version: expected the number {REGISTRY_VERSION}")
        if value["id"] != box_id:
            raise RecordError(f"id: the record names box {_show(value['id'])}, its file box {box_id}")
        state = value["state"]
        if state not in RECORD_STATES:
            raise RecordError(f"state: {_show(state)} is not one of {', '.join(RECORD_STATES)}")
        for key in ("created_at", "expires_at"):
            if not isinstance(value[key], str) or not TIME.match(value[key]):
                raise RecordError(f"{key}: expected a time like 2025-03-01T12:00:00Z")
        uids = value["uids"]
        _exact_keys("uids", uids, {"guest", "job"})
        if not all(_is_box_uid(uids[key]) for key in ("guest", "job")) or uids["guest"] == uids["job"]:
            raise RecordError(f"uids: two different box uids in [{FIRST_BOX_UID}, {_MAX_UID}]")
        if type(value["execs_total"]) is not int or value["execs_total"] < 0:
            raise RecordError("execs_total: a whole number, 0 or more")
        if not isinstance(value["last_event"], str) or (value["last_event"] and not KIND.match(value["last_event"])):
            raise RecordError("last_event: an event kind")
        if type(value["removing"]) is not bool:
            raise RecordError("removing: true or false")
        return cls(id=box_id, state=state, settings=_settings_from_json(value["settings"]),
                   created_at=value["created_at"], expires_at=value["expires_at"], uid=uids["guest"],
                   job_uid=uids["job"], backend=_text("backend", value["backend"], limit=64),
                   reason=_text("reason", value["reason"]), removing=value["removing"], run=_run_from_json(value["run"]),
                   execs_total=value["execs_total"], last_event=value["last_event"])


@dataclass(frozen=True)
class RegistryProblem:
    """A file of the registry that gave no box: what was wrong and what was done with it."""

    file: str
    box_id: str | None  # None when the file name names no box
    error: str
    action: str

    def to_event(self) -> dict[str, Any]:
        return {"file": self.file, "error": self.error, "action": self.action}


@dataclass
class LoadedRegistry:
    """What ``BoxRegistry.load`` found: the records, the problems, and every box id a file names (a record set
    aside or of an unknown version still names its box, whose uid claims and layers are therefore kept)."""

    records: list[BoxRecord] = field(default_factory=list)
    problems: list[RegistryProblem] = field(default_factory=list)
    named_ids: set[str] = field(default_factory=set)


def parse_record(data: bytes, *, box_id: str) -> BoxRecord:
    """A record from the bytes of its file. Raises ``UnknownVersion`` or ``RecordError`` (never anything else)."""
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"the record is larger than {MAX_RECORD_BYTES} bytes")
    try:
        value = strictjson.loads_object(data, max_bytes=MAX_RECORD_BYTES)
    except (strictjson.StrictJSONError, UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"not one strict JSON object (torn or hand-edited?): {exc}") from None
    return BoxRecord.from_json(value, box_id=box_id)


def encode_record(record: BoxRecord) -> bytes:
    return strictjson.compact(record.to_json())


class BoxRegistry:
    """The records in one directory: ``save`` and ``forget`` as boxes change, ``load`` once at daemon start.
    ``lock`` holds the directory for one daemon's life: a second daemon on the same state would take the first one's
    live boxes for lost ones."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._lock_fd: int | None = None
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.lstat(self.directory)
        except OSError as exc:
            raise RegistryError(f"the box registry {self.directory} cannot be created: {exc.strerror}") from None
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise RegistryError(f"the box registry {self.directory} must be a directory of the daemon's user with "
                                "mode 0700; fix its owner and mode")

    def lock(self) -> None:
        """Hold the registry for this daemon (released by ``unlock`` or when the process ends, however it ends)."""
        try:
            self._lock_fd = take_lock(self.directory / LOCK_NAME)
        except AlreadyRunning:
            raise RegistryError(f"another daemon uses the box registry {self.directory}; stop it (tkbox down), or "
                                "give this one its own state directory (TKBOX_DAEMON_STATE_DIR)") from None

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def path(self, box_id: str) -> Path:
        if not BOX_ID.match(box_id):
            raise ValueError(f"invalid box id {box_id!r}")
        return self.directory / f"{box_id}.json"

    def save(self, record: BoxRecord) -> None:
        """Write ``record`` all or nothing (raises ``OSError`` when the disk refuses)."""
        write_atomically(self.path(record.id), encode_record(record))

    def forget(self, box_id: str) -> None:
        self.path(box_id).unlink(missing_ok=True)

    def load(self) -> LoadedRegistry:
        """Every record, in creation order; never raises for a bad file (see the module docstring)."""
        loaded = LoadedRegistry()
        try:
            entries = sorted(os.scandir(self.directory), key=lambda entry: entry.name)
        except OSError as exc:
            raise RegistryError(f"the box registry {self.directory} cannot be listed: {exc.strerror}") from None
        for entry in entries:
            name = entry.name
            if name.startswith(".") and name.endswith(".tmp"):
                Path(entry.path).unlink(missing_ok=True)  # an interrupted write: the record before it stands
                continue
            stem = name.removesuffix(SET_ASIDE_SUFFIX).removesuffix(".json")
            box_id = stem if BOX_ID.match(stem) else None
            if name.endswith(SET_ASIDE_SUFFIX):
                if box_id:
                    loaded.named_ids.add(box_id)
                continue
            if not name.endswith(".json"):
                continue
            if box_id:
                loaded.named_ids.add(box_id)
            try:
                if box_id is None:
                    raise RecordError("the file name is not <box id>.json")
                record = parse_record(_read_bounded(Path(entry.path)), box_id=box_id)
            except UnknownVersion as exc:
                loaded.problems.append(RegistryProblem(name, box_id, str(exc), "left in place; the box is not "
                                                       "listed (its uid claims and layers are kept)"))
                continue
            except (RecordError, OSError) as exc:
                error = str(exc) if isinstance(exc, RecordError) else f"unreadable: {exc.strerror}"
                loaded.problems.append(RegistryProblem(name, box_id, error, self._set_aside(name)))
                continue
            loaded.records.append(record)
        loaded.records.sort(key=lambda record: (record.created_at, record.id))
        self._set_aside_duplicate_names(loaded)
        return loaded

    def _set_aside(self, name: str) -> str:
        try:
            os.replace(self.directory / name, self.directory / f"{name}{SET_ASIDE_SUFFIX}")
        except OSError as exc:
            return f"not listed; it could not be set aside ({exc.strerror})"
        return (f"set aside as {name}{SET_ASIDE_SUFFIX}; the box is not listed (its uid claims and layers are "
                "kept: mend the record and rename it back, then restart the daemon)")

    def _set_aside_duplicate_names(self, loaded: LoadedRegistry) -> None:
        """Names are unique among a daemon's boxes; a second record of a name (hand-edited) is set aside."""
        seen: set[str] = set()
        kept = []
        for record in loaded.records:
            if record.settings.name in seen and not record.removing:
                name = f"{record.id}.json"
                loaded.problems.append(RegistryProblem(name, record.id, f"name: another box is named "
                                                       f"{record.settings.name}", self._set_aside(name)))
                continue
            seen.add(record.settings.name)
            kept.append(record)
        loaded.records = kept


def _read_bounded(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RecordError("not a regular file")
        chunks, size = [], 0
        while size <= MAX_RECORD_BYTES and (chunk := os.read(fd, MAX_RECORD_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _exact_keys(what: str, value: Any, keys: set[str] | frozenset[str]) -> None:
    if not isinstance(value, dict):
        raise RecordError(f"{what}: expected an object")
    if set(value) != set(keys):
        missing, extra = sorted(set(keys) - set(value)), sorted(set(value) - set(keys))
        raise RecordError(f"{what}: " + "; ".join([f"missing {', '.join(missing)}"] * bool(missing)
                                                   + [f"unknown {', '.join(map(_show, extra))}"] * bool(extra)))


def _text(what: str, value: Any, *, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise RecordError(f"{what}: text of at most {limit} characters")
    return value


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _show(value: Any) -> str:
    return repr(value)[:80]


def _is_box_uid(value: Any) -> bool:
    return type(value) is int and FIRST_BOX_UID <= value <= _MAX_UID


def _run_from_json(value: Any) -> RunNote | None:
    if value is None:
        return None
    _exact_keys("run", value, {"id", "closed"})
    if not isinstance(value["id"], str) or not 0 < len(value["id"]) <= 128 or type(value["closed"]) is not bool:
        raise RecordError("run: {id: text, closed: true or false}, or null for an unrecorded box")
    return RunNote(value["id"], value["closed"])


def _settings_from_json(value: Any) -> BoxSettings:
    """The public settings back as ``BoxSettings``; a secret's source variable is not kept (only names, hosts and
    the header are shown), and the workspace need not exist any more (a removed checkout still lists its box)."""
    _exact_keys("settings", value, SETTINGS_RECORD_FIELDS)
    if not isinstance(value["name"], str) or not NAME.match(value["name"]):
        raise RecordError("settings.name: a box name (a-z, 0-9 and '-')")
    workspace = _text("settings.workspace", value["workspace"])
    if not workspace.startswith("/"):
        raise RecordError("settings.workspace: an absolute path")
    image = _text("settings.image", value["image"])
    allow = value["allow"]
    try:
        if not isinstance(allow, list) or len(allow) > ALLOWLIST_ENTRIES.default:
            raise EntryError("not a list of entries")
        for entry in allow:
            parse_entry(entry)
    except EntryError:
        raise RecordError("settings.allow: a list of allowlist entries") from None
    secrets = value["secrets"]
    if not isinstance(secrets, list):
        raise RecordError("settings.secrets: a list")
    parsed_secrets = []
    for secret in secrets:
        _exact_keys("settings.secrets[]", secret, {"name", "hosts", "header"})
        hosts = secret["hosts"]
        if (not isinstance(secret["name"], str) or not SECRET_NAME.match(secret["name"])
                or not isinstance(hosts, list) or not all(isinstance(h, str) and HOST.match(h) for h in hosts)):
            raise RecordError("settings.secrets[]: a secret name and its host names")
        parsed_secrets.append(Secret(secret["name"], "", tuple(hosts),
                                     _text("settings.secrets[].header", secret["header"], limit=128)))
    limits = value["limits"]
    if not isinstance(limits, dict) or not all(key in LIMIT_FIELDS and type(number) is int and number > 0
                                               for key, number in limits.items()):
        raise RecordError(f"settings.limits: positive whole numbers for {', '.join(sorted(LIMIT_FIELDS))}")
    return BoxSettings(value["name"], Path(workspace), image, tuple(allow), tuple(parsed_secrets), dict(limits))
