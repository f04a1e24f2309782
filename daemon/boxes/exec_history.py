"""A box's execs for its page: each one's decision, end and the tails of its output, kept within a per-box budget.

What is kept, and where (so that it survives what the box survives):

- while a command runs, the last ``exec_output_tail`` bytes (256 KiB) of its stdout and of its stderr, in memory
  (``OutputRing``); its record (command, decision, start) is already on disk;
- once it ends, its record and both tails in the box's state dir (``<state>/boxes/<id>/execs/``: ``N.json``,
  ``N.stdout``, ``N.stderr``; 0700, the daemon's), and nothing in memory but the record.  So a stopped box's
  execs and their output survive a daemon restart, as its patch does; a command that was running when the daemon
  ended is listed as ``lost`` afterwards (its end and the output it held in memory are not known); removing the
  box deletes it all.  Files are written whole and renamed into place, without fsync: they survive the daemon
  dying, not necessarily a power cut (a record that no longer parses is skipped);
- all of a box's kept output stays within ``exec_output_per_box`` (16 MiB, memory and disk together): making room
  drops the oldest execs' output first (never the exec being written), and their records say ``output_dropped``;
- at most ``exec_records_per_box`` (1,000) records: past it the oldest ended ones are forgotten, files and all
  (the event log and the signer's run keep every command).

Box output is bytes the box controls: only its length is bounded here; the API sends it as base64 and every
console or CLI shows it escaped.  The command, the decision's reason and hint and the end's error are cut
(``COMMAND_KEPT``, ``TEXT_KEPT``), so a record file stays small (``RECORD_FILE_MAX``).

``ExecSession`` opens one ``KeptExec`` per decided command (``history_of(box).begin``) and calls its ``write``
and ``end`` where output and the end pass; the API lists (``execs``) and reads (``output``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import limits, strictjson
from ..wire import ExecInfo, ExecOutput, OutputTail
from .output_ring import OutputBudget, OutputRing

if TYPE_CHECKING:
    pass

COMMAND_KEPT = 4 * limits.KIB  # characters of the decided command line a record keeps
TEXT_KEPT = 1 * limits.KIB  # characters of a reason, hint or error a record keeps
RECORD_FILE_MAX = 64 * limits.KIB  # a record file larger than this is not read back
STREAMS = {1: "stdout", 2: "stderr"}
_RECORD_NAME = re.compile(r"^([1-9][0-9]{0,11})\.json\Z")
LOST_REASON = ("the daemon ended before this command did: its end is not known, and the output it held in memory "
               "is lost")


def _cut(text: Any, limit: int) -> str:
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _write_replacing(path: Path, data: bytes) -> None:
    """``data`` into ``path`` whole: a temporary file beside it (0600), then a rename (no fsync: see above)."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


class KeptExec:
    """One exec's entry: its record, and while it runs, the tails of its output.  ``ExecSession`` calls ``write``
    with each output chunk and ``end`` once."""

    def __init__(self, history: ExecHistory, info: ExecInfo, tail_bytes: int) -> None:
        self.history = history
        self.info = info
        self.rings: dict[int, OutputRing] | None = None
        if info.state == "running":
            self.rings = {stream: OutputRing(tail_bytes) for stream in STREAMS}
        self._started = time.monotonic()

    def write(self, stream: int, data: bytes) -> None:
        """Keep the end of a chunk of output (``stream`` 1 is stdout, 2 stderr; others are ignored)."""
        self.history._write(self, stream, data)

    def note(self, reason: str) -> None:
        """Say on the page why a running exec waits or may run (a held exec: its approval, then who approved)."""
        self.history._note(self, reason)

    def refuse(self, reason: str) -> None:
        """A held exec that will never run (its approval was not given): ``denied``, with why."""
        self.history._refuse(self, reason)

    def end(self, exit_info: dict[str, Any], outcome: str) -> None:
        """The exec ended: ``exit_info`` as its client gets it (exit_code, signal, timed_out, reported_by, error),
        ``outcome`` what the host saw (``reported`` when the guest reported an exit)."""
        self.history._end(self, exit_info, outcome)

    def tails(self) -> dict[str, OutputTail]:
        if self.rings is None:
            return {"stdout": self.info.stdout, "stderr": self.info.stderr}
        return {name: OutputTail(self.rings[stream].kept, self.rings[stream].total)
                for stream, name in STREAMS.items()}

    def current(self) -> ExecInfo:
        """The record as it stands (a running exec's output sizes as of now)."""
        return replace(self.info, **self.tails()) if self.rings is not None else self.info


class ExecHistory:
    """The execs of one box, oldest first, with their kept output; ``directory`` is the box's ``execs/`` dir."""

    def __init__(self, directory: Path, *, tail_bytes: int | None = None, budget_bytes: int | None = None,
                 max_records: int | None = None) -> None:
        """Limits default to ``exec_output_tail``, ``exec_output_per_box`` and ``exec_records_per_box``."""
        tail_bytes = tail_bytes or limits.EXEC_OUTPUT_TAIL.default
        budget_bytes = budget_bytes or limits.EXEC_OUTPUT_PER_BOX.default
        max_records = max_records or limits.EXEC_RECORDS_PER_BOX.default
        if budget_bytes < 2 * tail_bytes:
            raise ValueError("the per-box budget must hold both tails of one exec")
        self.directory = directory
        self.tail_bytes = tail_bytes
        self.max_records = max_records
        self.budget = OutputBudget(budget_bytes)
        self._entries: dict[int, KeptExec] = {}  # by id, oldest first
        self._next_id = 1
        self._directory_made = False  # made once, on the first write: not a mkdir per exec
        self._load()

    # ---- what the API reads ----------------------------------------------------------------
    def execs(self) -> list[ExecInfo]:
        return [entry.current() for entry in self._entries.values()]

    def output(self, exec_id: int) -> ExecOutput | None:
        entry = self._entries.get(exec_id)
        if entry is None:
            return None
        if entry.rings is not None:
            return ExecOutput(entry.current(), entry.rings[1].tail(), entry.rings[2].tail())
        info = entry.info
        streams = [self._read_tail(exec_id, name, getattr(info, name).kept) for name in STREAMS.values()]
        return ExecOutput(info, *streams)

    @property
    def kept_bytes(self) -> int:
        return self.budget.used

    # ---- what an exec writes -----------------------------------------------------------------
    def begin(self, command: str, decision: dict[str, Any], *, tty: bool = False, held: bool = False) -> KeptExec:
        """A decided command: ``decision`` as the client is shown it (decision, verdict, rule_ids, reason, hint).
        A denied one is recorded as ended at once; a ``held`` one (an ask waiting for a person) is ``running``
        until it is approved (it runs) or refused (``KeptExec.refuse``)."""
        exec_id = self._next_id
        self._next_id += 1
        denied = decision.get("decision") != "allow" and not held
        info = ExecInfo(
            id=exec_id, command=_cut(command, COMMAND_KEPT), command_cut=len(command) > COMMAND_KEPT,
            state="denied" if denied else "running", verdict=str(decision.get("verdict", "")),
            started_at=_now_iso(), rule_ids=tuple(str(rule) for rule in decision.get("rule_ids", ())),
            reason=_cut(decision.get("reason") or "", TEXT_KEPT), hint=_cut(decision.get("hint") or "", TEXT_KEPT),
            tty=tty, duration_ms=0 if denied else None)
        entry = KeptExec(self, info, self.tail_bytes)
        self._entries[exec_id] = entry
        self.budget.add(exec_id)
        self._save_record(entry)
        self._forget_past_max()
        return entry

    def _write(self, entry: KeptExec, stream: int, data: bytes) -> None:
        if entry.rings is None or stream not in entry.rings:
            return
        ring = entry.rings[stream]
        growth = 0 if ring.dropped else min(len(data), ring.capacity - ring.kept)
        if growth:
            for victim in self.budget.make_room(entry.info.id, growth):
                self._drop_output(self._entries[victim])
        self.budget.grow(entry.info.id, ring.write(data))

    def _note(self, entry: KeptExec, reason: str) -> None:
        entry.info = replace(entry.info, reason=_cut(reason, TEXT_KEPT))
        self._save_record(entry)

    def _refuse(self, entry: KeptExec, reason: str) -> None:
        if entry.rings is None:
            return
        entry.rings = None  # it never ran: no output
        entry.info = replace(entry.info, state="denied", reason=_cut(reason, TEXT_KEPT),
                             duration_ms=int((time.monotonic() - entry._started) * 1000))
        self._save_record(entry)

    def _end(self, entry: KeptExec, exit_info: dict[str, Any], outcome: str) -> None:
        if entry.rings is None:
            return
        reported = outcome == "reported"
        entry.info = replace(
            entry.current(), state="finished" if reported else "failed",
            duration_ms=int((time.monotonic() - entry._started) * 1000),
            exit_code=exit_info.get("exit_code"), signal=exit_info.get("signal"),
            timed_out=bool(exit_info.get("timed_out")), reported_by=str(exit_info.get("reported_by", "")),
            error=_cut(exit_info.get("error") or "", TEXT_KEPT))
        rings, entry.rings = entry.rings, None
        if not entry.info.output_dropped:
            try:
                for stream, name in STREAMS.items():
                    self._save_tail(entry.info.id, name, rings[stream].tail())
            except OSError:  # the state dir cannot take it: the output is dropped, and the record says so
                self._drop_output(entry)
        self._save_record(entry)
        self._forget_past_max()

    # ---- dropping and forgetting ---------------------------------------------------------------
    def _drop_output(self, entry: KeptExec) -> None:
        """Drop one exec's kept output (the budget needs the room, or it could not be written)."""
        self.budget.release(entry.info.id)
        entry.info = replace(entry.current(), output_dropped=True)
        if entry.rings is not None:
            for ring in entry.rings.values():
                ring.drop()
        else:
            entry.info = replace(entry.info, stdout=OutputTail(0, entry.info.stdout.total),
                                 stderr=OutputTail(0, entry.info.stderr.total))
        self._unlink(entry.info.id, *STREAMS.values())
        self._save_record(entry)

    def _forget_past_max(self) -> None:
        """Past ``max_records``, forget the oldest execs that have ended (a running one is never forgotten)."""
        excess = len(self._entries) - self.max_records
        if excess <= 0:  # the common case, on every exec: no walk over the records
            return
        for exec_id in [i for i, entry in self._entries.items() if entry.rings is None][:excess]:
            del self._entries[exec_id]
            self.budget.forget(exec_id)
            self._unlink(exec_id, "json", *STREAMS.values())

    def discard(self) -> None:
        """The box is removed: forget every exec and delete the directory."""
        self._entries.clear()
        self.budget = OutputBudget(self.budget.limit)
        shutil.rmtree(self.directory, ignore_errors=True)
        self._directory_made = False

    # ---- files ------------------------------------------------------------------------------------
    def _path(self, exec_id: int, suffix: str) -> Path:
        return self.directory / f"{exec_id}.{suffix}"

    def _ensure_directory(self) -> None:
        if not self._directory_made:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._directory_made = True

    def _save_record(self, entry: KeptExec) -> None:
        with contextlib.suppress(OSError):  # the record stays right in memory for this daemon's life
            self._ensure_directory()
            record = json.dumps(entry.current().to_json(), separators=(",", ":")).encode()
            _write_replacing(self._path(entry.info.id, "json"), record)

    def _save_tail(self, exec_id: int, name: str, data: bytes) -> None:
        """Once per exec, when it ends (ids are never reused, so no earlier tail of it is on disk)."""
        if data:
            self._ensure_directory()
            _write_replacing(self._path(exec_id, name), data)

    def _read_tail(self, exec_id: int, name: str, expected: int) -> bytes:
        if not expected:
            return b""
        try:
            with open(self._path(exec_id, name), "rb") as handle:
                return handle.read(self.tail_bytes)
        except OSError:
            return b""

    def _unlink(self, exec_id: int, *suffixes: str) -> None:
        for suffix in suffixes:
            with contextlib.suppress(OSError):
                self._path(exec_id, suffix).unlink()

    def _load(self) -> None:
        """Read back the records of an earlier daemon (a restart): bounded, strict, anything odd skipped."""
        try:
            names = [name for name in os.listdir(self.directory) if _RECORD_NAME.match(name)]
        except OSError:
            return
        loaded: dict[int, ExecInfo] = {}
        for name in names:
            exec_id = int(name.split(".")[0])
            try:
                with open(self.directory / name, "rb") as handle:
                    raw = handle.read(RECORD_FILE_MAX + 1)
                info = ExecInfo.from_json(strictjson.loads_object(raw, max_bytes=RECORD_FILE_MAX))
            except (OSError, ValueError):
                continue
            if info.id != exec_id:
                continue
            loaded[exec_id] = self._checked(info)
        for exec_id in sorted(loaded):
            info = loaded[exec_id]
            entry = KeptExec(self, info, self.tail_bytes)
            self._entries[exec_id] = entry
            kept = info.stdout.kept + info.stderr.kept
            self.budget.add(exec_id)
            for victim in self.budget.make_room(exec_id, kept):
                self._drop_output(self._entries[victim])
            self.budget.grow(exec_id, kept)
            if info.state == "running":
                entry.info = replace(info, state="lost", error=LOST_REASON)
                self._save_record(entry)
        self._next_id = max(loaded, default=0) + 1
        self._forget_past_max()

    def _checked(self, info: ExecInfo) -> ExecInfo:
        """A loaded record with its kept sizes as the files on disk say: a tail file that is missing, of another
        size or larger than a tail can be is deleted and the output counted as dropped; a running exec's tails
        were in memory (none kept)."""
        tails = {}
        dropped = info.output_dropped
        for name in STREAMS.values():
            tail = getattr(info, name)
            try:
                size = os.stat(self._path(info.id, name)).st_size
            except OSError:
                size = 0
            if info.state != "running" and size == tail.kept and size <= self.tail_bytes:
                tails[name] = tail
                continue
            if size:
                self._unlink(info.id, name)
            dropped = dropped or (info.state != "running" and tail.kept > 0)
            tails[name] = OutputTail(0, tail.total)
        return replace(info, output_dropped=dropped, **tails)
