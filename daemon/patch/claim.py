"""The guest's ``diff`` response is a claim: check it against the DATA it came with and the host's own patch.

A guest can be replaced by anything in the box. Its response says which files changed (``files``, maybe cut
short with ``files_truncated``), how many bytes the patch has (``size``) and their hash (``sha256``); every one of
those is recomputed here, and the bytes must be the host's patch (same size and sha256 as the host wrote).
``check_guest_claim`` refuses any difference with one message naming each field that differs; it never shows a
box-controlled string unescaped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from tkbox_guest import protocol as wire

from .summary import PatchSummary

# The guest's FILES_LIST_BUDGET (guest/agent.py): how many bytes of JSON its file list may take. A test keeps the
# two equal; a list cut shorter than this allows is a list that hides files.
GUEST_FILES_LIST_BUDGET = 900_000


class GuestClaimRefused(ValueError):
    """The guest's claim differs from the data or from the host's patch; ``differences`` lists each field."""

    def __init__(self, differences: list[str]) -> None:
        super().__init__("the guest's diff response is refused: " + "; ".join(differences))
        self.differences = differences


def _shown(value: Any) -> str:
    """Any JSON value on one printable ASCII line."""
    try:
        return json.dumps(value, ensure_ascii=True, sort_keys=True)
    except (TypeError, ValueError):
        return ascii(value)


def _canonical(value: Any) -> bytes | None:
    """``value`` as compact key-sorted JSON, so that ``0`` never passes for ``false``; None if it is not JSON."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                          allow_nan=False).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        return None


def expected_file_list(host: PatchSummary, budget: int | None = None) -> tuple[list[dict[str, Any]], bool]:
    """The ``files`` and ``files_truncated`` a truthful guest sends for the host's patch (the guest's rule: entries
    in patch order while their compact JSON lines fit the budget, by default ``GUEST_FILES_LIST_BUDGET``)."""
    budget = GUEST_FILES_LIST_BUDGET if budget is None else budget
    out: list[dict[str, Any]] = []
    used = 0
    for entry in host.files:
        item = entry.guest_entry()
        used += len(wire.dumps(item)) + 1
        if used > budget:
            return out, True
        out.append(item)
    return out, False


def _file_differences(claim: Mapping[str, Any], host: PatchSummary) -> list[str]:
    claimed, truncated = claim.get("files"), claim.get("files_truncated")
    expected, expected_truncated = expected_file_list(host)
    if type(claimed) is not list:
        return [f"files: the guest sends {_shown(claimed)}, not a list"]
    found: list[str] = []
    for index, (theirs, ours) in enumerate(zip(claimed, expected, strict=False)):
        if _canonical(theirs) is None or _canonical(theirs) != _canonical(ours):
            found.append(f"files[{index}]: the guest claims {_shown(theirs)}, the host found {_shown(ours)}")
            break
    if len(claimed) != len(expected):
        found.append(f"files: the guest lists {len(claimed)} entries, the host's patch has {len(host.files)} "
                     f"sections of which {len(expected)} fit the list")
    if truncated is not expected_truncated:
        found.append(f"files_truncated: the guest says {_shown(truncated)}, the host's list "
                     f"{'is' if expected_truncated else 'is not'} cut short")
    return found


def check_guest_claim(claim: Mapping[str, Any], data: bytes, host: PatchSummary) -> None:
    """Refuse (``GuestClaimRefused``) unless the guest's ``diff`` response ``claim`` (its ``size``, ``sha256``,
    ``files``, ``files_truncated``; other keys such as ``id``, ``ok``, ``_data`` are ignored) is true of ``data``
    (the DATA bytes it sent) and ``data`` is the host's patch, summarised by ``host``."""
    differences: list[str] = []
    data_sha256 = "sha256:" + hashlib.sha256(data).hexdigest()
    if claim.get("size") != len(data) or type(claim.get("size")) is not int:
        differences.append(f"size: the guest claims {_shown(claim.get('size'))} bytes, its DATA has {len(data)}")
    if claim.get("sha256") != data_sha256:
        differences.append(f"sha256: the guest claims {_shown(claim.get('sha256'))}, its DATA hashes to "
                           f"{data_sha256}")
    if (len(data), data_sha256) != (host.size, host.sha256):
        differences.append(f"data: the guest's patch ({len(data)} bytes, {data_sha256}) is not the host's "
                           f"({host.size} bytes, {host.sha256})")
    differences += _file_differences(claim, host)
    if differences:
        raise GuestClaimRefused(differences)
