"""What the checkout writer did, per path: the report a caller records and shows.

``outcome`` is ``written`` (every change is on disk), ``refused`` (the check found the checkout differs from the
plan's pre-images, or unsafe to walk: nothing was written, ``problems`` names every path and what differs) or
``failed`` (a write failed midway: ``failure`` says where and why; each path is ``written``, ``not_written``,
``rolled_back`` or ``rollback_failed`` with its reason). Paths are shown escaped (``tkbox_guest.layers.shown``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tkbox_guest.layers import shown

STATUSES = ("written", "not_written", "rolled_back", "rollback_failed")
OUTCOMES = ("written", "refused", "failed")


@dataclass(frozen=True)
class FileOutcome:
    """One planned path: ``status`` (one of ``STATUSES``) and, unless it was written, why."""

    path: bytes
    status: str
    reason: str = ""


@dataclass(frozen=True)
class CheckoutReport:
    outcome: str
    files: tuple[FileOutcome, ...]
    problems: tuple[tuple[bytes, str], ...] = ()
    failure: str = ""
    notes: tuple[str, ...] = ()
    left_dirs: tuple[bytes, ...] = ()  # directories tkbox made for a failed write and could not remove again

    @property
    def ok(self) -> bool:
        return self.outcome == "written"

    def paths(self, status: str) -> list[bytes]:
        """The paths whose status is ``status``, in the plan's order."""
        return [item.path for item in self.files if item.status == status]

    def message(self) -> str:
        """The report for a person: one line, or a first line and one indented line per path."""
        if self.outcome == "written":
            lines = [f"wrote {len(self.files)} path(s) to the checkout"]
        elif self.outcome == "refused":
            lines = ["the checkout is not what the patch was made against, or not safe to write: nothing written"]
            lines += [f"  {shown(path)}: {problem}" for path, problem in self.problems]
        else:
            lines = [f"writing to the checkout stopped: {self.failure}"]
            for status, heading in (("rolled_back", "written, then rolled back"),
                                    ("rollback_failed", "written and NOT rolled back"),
                                    ("written", "written"), ("not_written", "not written")):
                for item in self.files:
                    if item.status == status:
                        reason = f" ({item.reason})" if item.reason else ""
                        lines.append(f"  {heading}: {shown(item.path)}{reason}")
        lines += [f"  left the directory {shown(path)} that tkbox made (it could not be removed)"
                  for path in self.left_dirs]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)
