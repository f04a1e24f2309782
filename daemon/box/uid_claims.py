"""One uid claim: the file ``<registry>/<uid>`` that says which box holds the uid and which daemon made the claim.

A claim is one strict JSON object (``encode_claim``, ``parse_claim``)::

    {"version": 1, "uid": U, "box": "<box id>", "daemon": "<who>", "boot": "<boot id>", "pid": P, "start": T,
     "records": "<directory>" | null}

``daemon`` names the holder across restarts: a daemon's state directory (a restarted daemon owns the claims of its
earlier lives), or ``pid P started T`` for a process that is no daemon (a test lab). ``boot``, ``pid`` and
``start`` name the process that wrote the claim, so another daemon can tell whether it still runs. ``records`` is
the holder's box registry directory: while an entry there is named after the box (``<box>.json``, or the same set
aside), the box exists and its claim stands.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tkbox_daemon import strictjson
from tkbox_daemon.box.host_ids import boot_id, is_running, process_start

CLAIM_VERSION = 1
MAX_CLAIM_BYTES = 8192
MAX_NAME = 4096  # characters of a holder's name or records path
MAX_PID = 1 << 22  # the kernel's PID_MAX_LIMIT
BOX_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}\Z", re.ASCII)
BOOT_ID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?\Z", re.ASCII)
CLAIM_FIELDS = frozenset({"version", "uid", "box", "daemon", "boot", "pid", "start", "records"})


class ClaimError(ValueError):
    """A claim file is not one a daemon wrote (torn, hand-edited, for another uid); the message says which field."""


@dataclass(frozen=True)
class ClaimHolder:
    """Who makes a claim: the daemon (by a name that survives its restarts) and the process that writes it."""

    daemon: str
    boot: str
    pid: int
    start: int
    records: str | None = None

    @classmethod
    def this_process(cls, *, daemon: str | None = None, records: Path | None = None) -> ClaimHolder:
        pid = os.getpid()
        start = process_start(pid) or 0
        return cls(daemon if daemon is not None else f"pid {pid} started {start}", boot_id(), pid, start,
                   str(records) if records is not None else None)

    def running(self) -> bool:
        """Whether the process that wrote the claim still runs."""
        return is_running(self.pid, self.start, self.boot)

    def names_box(self, box_id: str) -> bool:
        """Whether the holder's box registry still has an entry for ``box_id`` (True when it cannot be read:
        only a registry that can be listed proves a box gone)."""
        if self.records is None:
            return False
        try:
            with os.scandir(self.records) as entries:
                return any(entry.name.partition(".")[0] == box_id for entry in entries)
        except FileNotFoundError:
            return False  # the holder's whole state is gone
        except OSError:
            return True


@dataclass(frozen=True)
class Claim:
    uid: int
    box: str
    holder: ClaimHolder


def encode_claim(claim: Claim) -> bytes:
    holder = claim.holder
    return strictjson.compact({
        "version": CLAIM_VERSION, "uid": claim.uid, "box": claim.box, "daemon": holder.daemon, "boot": holder.boot,
        "pid": holder.pid, "start": holder.start, "records": holder.records,
    }) + b"\n"


def _text(value: Any, name: str) -> str:
    if type(value) is not str or not value or len(value) > MAX_NAME or not value.isprintable():
        raise ClaimError(f"{name}: a non-empty printable text of at most {MAX_NAME} characters")
    return value


def _whole(value: Any, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ClaimError(f"{name}: a whole number in [{low}, {high}]")
    return value


def parse_claim(data: bytes, *, uid: int) -> Claim:
    """The claim in a file's bytes, for the uid the file is named after. Raises ``ClaimError`` only."""
    try:
        value = strictjson.loads_object(data, max_bytes=MAX_CLAIM_BYTES)
    except (strictjson.StrictJSONError, ValueError) as exc:
        raise ClaimError(f"not one strict JSON object: {exc}") from None
    if set(value) != CLAIM_FIELDS:
        raise ClaimError(f"fields {sorted(value)} instead of {sorted(CLAIM_FIELDS)}")
    if value["version"] != CLAIM_VERSION or type(value["version"]) is not int:
        raise ClaimError(f"version: {CLAIM_VERSION}")
    if _whole(value["uid"], "uid", 1, 0xFFFF_FFFE) != uid:
        raise ClaimError(f"uid: the claim says {value['uid']}, its file is named {uid}")
    box = value["box"]
    if type(box) is not str or not BOX_ID.match(box):
        raise ClaimError("box: a box id")
    boot = value["boot"]
    if type(boot) is not str or not BOOT_ID.match(boot):
        raise ClaimError("boot: a boot id or empty")
    records = value["records"]
    if records is not None and not os.path.isabs(_text(records, "records")):
        raise ClaimError("records: an absolute path or null")
    holder = ClaimHolder(_text(value["daemon"], "daemon"), boot, _whole(value["pid"], "pid", 1, MAX_PID),
                         _whole(value["start"], "start", 0, strictjson.MAX_SAFE_INTEGER), records)
    return Claim(uid, box, holder)
