"""The workspace patch as the host knows it: computed from the box's overlay layers, and the guest's claim about
it checked against that.

- ``host``: ``compute_patch(upper, lower, out, max_bytes=...)`` walks the layers (host directories) through
  directory descriptors, never following a link, with bounds, and writes the patch; it returns the host's
  ``PatchSummary`` (files, size, sha256 of the bytes it wrote).
- ``summary``: ``PatchSummary`` and ``FileChange``, what the host says about its own patch.
- ``claim``: ``check_guest_claim(claim, data, host)`` refuses a guest ``diff`` response whose file list, size,
  hash or bytes differ from the data and the host's patch.
"""

from __future__ import annotations

from .claim import GuestClaimRefused, check_guest_claim, expected_file_list
from .host import MAX_CONTENT_BYTES, MAX_DEPTH, MAX_ENTRIES, PatchError, PatchLimitExceeded, compute_patch
from .summary import FileChange, PatchSummary

__all__ = ["MAX_CONTENT_BYTES", "MAX_DEPTH", "MAX_ENTRIES", "FileChange", "GuestClaimRefused", "PatchError",
           "PatchLimitExceeded", "PatchSummary", "check_guest_claim", "compute_patch", "expected_file_list"]
