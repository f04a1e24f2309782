"""A box's workspace patch: made by the host from the box's overlay layers, saved beside its summary, read back.

The patch is the host's own (``daemon/patch``): the guest is never asked for it, so nothing a box says can change
what is saved, listed or later applied (docs/guest.md, "What the host believes"). A saved patch is made once
the box's processes are gone, so nothing changes under the walk; a live one (``tkbox diff`` of a running box) is
made while a job may still write, and then fails with the file named rather than mixing two moments.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path
from typing import Any, BinaryIO

from .. import limits
from ..fsutil import write_atomically
from ..patch import PatchSummary, compute_patch
from .layers import BoxLayers
from .settings import BoxSettings

EXTRA_ENTRIES = 10_000  # entries a job may add beyond twice the workspace's own file count


class BoxPatches:
    """The patch files of one box: ``state_dir/patch.diff`` and ``state_dir/patch-summary.json``."""

    def __init__(self, layers: BoxLayers, state_dir: Path, settings: BoxSettings) -> None:
        self.layers = layers
        self.state_dir = state_dir
        self.settings = settings

    def _compute(self, out: BinaryIO | Path) -> PatchSummary:
        return compute_patch(self.layers.upper, self.layers.base, out,
                             max_bytes=limits.PATCH_SIZE.default,
                             max_entries=2 * self.settings.limit("workspace_files") + EXTRA_ENTRIES,
                             deadline=time.monotonic() + limits.PATCH_TIME.default,
                             linked_at=self.layers.linked_at())

    async def live(self) -> tuple[bytes, list[dict[str, Any]]]:
        """The patch as the layers are now (off the event loop). Raises ``PatchError``."""
        buffer = io.BytesIO()
        summary = await asyncio.to_thread(self._compute, buffer)
        return buffer.getvalue(), [entry.to_json() for entry in summary.files]

    async def save(self) -> PatchSummary:
        """Make and keep the patch and its summary (each written all or nothing). Raises ``PatchError``."""
        summary = await asyncio.to_thread(self._compute, self.state_dir / "patch.diff")
        write_atomically(self.state_dir / "patch-summary.json", json.dumps(summary.to_json(), indent=1).encode())
        return summary

    def saved(self) -> tuple[bytes, list[dict[str, Any]]] | None:
        """The saved patch and its file list, or None when none was saved."""
        try:
            patch = (self.state_dir / "patch.diff").read_bytes()
            summary = json.loads((self.state_dir / "patch-summary.json").read_text())
        except (OSError, ValueError):
            return None
        return patch, summary["files"]
