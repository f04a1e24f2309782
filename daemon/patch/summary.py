"""What the host says about a patch it computed: one ``FileChange`` per ``diff --git`` section, the size and the
sha256 of the bytes it wrote. Nothing here comes from the guest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GUEST_KEYS = ("path", "change", "binary", "old_mode", "new_mode")  # a guest diff response's files item


@dataclass(frozen=True)
class FileChange:
    """One section of the patch.

    ``path`` is the path's bytes as UTF-8, other bytes as ``\\xNN`` (the guest's rule; it may hold control
    characters: escape it before showing it). ``change`` is ``added``, ``deleted``, ``modified`` or ``mode``; the
    modes are git's (``100644``, ``100755``, ``120000``) or None for the missing side; the sizes are the file's
    bytes (a symlink's target length), None for the missing side.
    """

    path: str
    change: str
    binary: bool
    old_mode: str | None
    new_mode: str | None
    old_size: int | None
    new_size: int | None

    def guest_entry(self) -> dict[str, Any]:
        """The entry a truthful guest lists for this section in its ``diff`` response."""
        return {key: getattr(self, key) for key in GUEST_KEYS}

    def to_json(self) -> dict[str, Any]:
        return {**self.guest_entry(), "old_size": self.old_size, "new_size": self.new_size}


@dataclass(frozen=True)
class PatchSummary:
    """The host's patch: its sections in patch order, its size in bytes and ``sha256:<hex>`` of those bytes."""

    files: tuple[FileChange, ...]
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """For ``patch-summary.json``."""
        return {"files": [entry.to_json() for entry in self.files], "size": self.size, "sha256": self.sha256}
