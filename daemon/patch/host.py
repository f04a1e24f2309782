"""The host computes the workspace patch itself, from the box's overlay layers, with the guest's own diff code.

The box's layers are host directories: ``upper`` (the overlay's upper dir, which the box's processes write
through the overlay) and ``lower`` (the base copy). ``compute_patch`` runs ``tkbox_guest.diff`` over them — the
same walk and the same git notation as the guest, so both give the same bytes — with what the host needs on top:

- no merged view: opaque directories are found by ``trusted.overlay.opaque`` alone, the only xattr the kernel
  reads on the box's mount (no ``userxattr``); reading it needs CAP_SYS_ADMIN, checked first, since without it
  every opaque directory would be missed and the patch would silently keep files the job deleted. A
  ``user.overlay.opaque`` the box set on its own directory is ignored, as the kernel ignores it.
- nothing followed: every name is opened relative to a directory descriptor with ``O_NOFOLLOW``
  (``tkbox_guest.layers``); symlinks are ``readlink``-ed, fifos, sockets and devices are "no file" and never
  opened; a file or directory swapped while the patch is made is a ``PatchError``, not a wrong patch;
- bounds: the patch's bytes (``limits.PATCH_SIZE``), the entries listed, the directory depth, the bytes of file
  content read (a sparse file's size counts in full, before any read), and an optional deadline, checked while
  walking and reading so a thread whose caller gave up stops too. Past one: ``PatchLimitExceeded``.

- a linked base (``box/workspace.py``: the lower files are the checkout's own, hard-linked) shows the user's later
  in-place edits: with ``linked_at`` (when the base was linked, ns), a changed file whose lower side is still
  linked (more than one link) and was modified at or after that time is a ``PatchError`` naming it, never a
  patch that would hand the user's own later edit back to them as the box's change. A file the box did not
  change is not in the patch whatever the user did to it.

The size, the sha256 and the file list are computed from the bytes written here. It blocks: run it in a thread
(``asyncio.to_thread``), best once the box's processes are gone, so nothing changes under the walk.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tkbox_guest import diff
from tkbox_guest.layers import Budget, DiffError, DiffLimitExceeded, shown

from .. import limits
from ..fsutil import atomic_writer
from .summary import FileChange, PatchSummary

# Not yet in limits.py (see the report): a box may list the base's files deleted and as many new ones.
MAX_ENTRIES = 2 * limits.WORKSPACE_FILES.default
MAX_DEPTH = 128  # directories below the workspace root; the walk holds two descriptors per level
MAX_CONTENT_BYTES = limits.BOX_DISK.default + limits.WORKSPACE_BYTES.default  # what both layers may hold
WRITE_BATCH = 256 * limits.KIB
CAP_SYS_ADMIN = 21
_STATUS_LIMIT = 64 * limits.KIB


class PatchError(Exception):
    """The host could not compute the patch. The message escapes every name from the box; nothing was kept."""


class PatchLimitExceeded(PatchError):
    """A bound was passed; ``limit`` is ``patch_size``, ``entries``, ``depth``, ``content_bytes`` or
    ``deadline``."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


def can_read_trusted_xattrs() -> bool:
    """Whether this process holds CAP_SYS_ADMIN, without which ``trusted.*`` xattrs read as absent."""
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        status = os.read(fd, _STATUS_LIMIT)
    finally:
        os.close(fd)
    for line in status.splitlines():
        if line.startswith(b"CapEff:"):
            try:
                return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
            except (IndexError, ValueError):
                return False
    return False


@contextlib.contextmanager
def _writer(out: BinaryIO | Path) -> Iterator[Callable[[bytes], object]]:
    """A write function into ``out``; a path gets the bytes all or nothing (``fsutil.atomic_writer``)."""
    if not isinstance(out, str | os.PathLike):
        yield out.write
        return
    with atomic_writer(Path(out)) as handle:
        yield handle.write


def _file_change(change: diff.Change, entry: dict) -> FileChange:
    return FileChange(path=entry["path"], change=entry["change"], binary=entry["binary"],
                      old_mode=entry["old_mode"], new_mode=entry["new_mode"],
                      old_size=None if change.old is None else change.old.size,
                      new_size=None if change.new is None else change.new.size)


LINK_CLOCK_SLACK_NS = 20_000_000  # file times come from a coarse clock, up to a tick (10 ms at HZ=100) behind: an
# edit just after linking can carry a time just before it, so anything this close before counts as after


def _check_not_edited_in_checkout(lower: Path, change: diff.Change, linked_at: int) -> None:
    old = change.old
    if old is None or old.is_link:
        return
    try:
        info = os.lstat(lower / os.fsdecode(old.path))
    except OSError:
        return  # gone from the base: the walk has already read it or reports it
    if info.st_nlink > 1 and info.st_mtime_ns >= linked_at - LINK_CLOCK_SLACK_NS:
        raise PatchError(f"{shown(old.path)} was changed in the checkout after the box started, and the box "
                         "changed it too: the box's base is the checkout's own file (linked, not copied), so its "
                         "change cannot be told apart from yours. Read the box's version with tkbox exec (cat), "
                         "or keep yours and start a new box")


def compute_patch(upper: Path, lower: Path, out: BinaryIO | Path, *, max_bytes: int = limits.PATCH_SIZE.default,
                  max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH,
                  max_content_bytes: int = MAX_CONTENT_BYTES, deadline: float | None = None,
                  clock: Callable[[], float] = time.monotonic, linked_at: int | None = None) -> PatchSummary:
    """Write the patch that turns ``lower`` into what the box made of it (``upper`` over ``lower``) to ``out``.

    ``out``: a binary stream (written as the patch is made; on an error it holds a partial patch the caller must
    drop), or a path (replaced all or nothing). ``deadline`` is a ``clock()`` value. Raises ``PatchError``
    (``PatchLimitExceeded`` for a bound); ``OSError`` only for writing ``out``.
    """
    if not can_read_trusted_xattrs():
        raise PatchError("the host patch needs CAP_SYS_ADMIN to see opaque directories (trusted.overlay.opaque)")
    budget = Budget(max_entries=max_entries, max_depth=max_depth, max_content_bytes=max_content_bytes,
                    deadline=deadline, clock=clock)
    sections = diff.iter_sections(upper, lower, None, opaque_xattrs=diff.KERNEL_OPAQUE_XATTRS, budget=budget)
    files: list[FileChange] = []
    digest, size, pending = hashlib.sha256(), 0, bytearray()
    try:
        with contextlib.closing(sections), _writer(out) as write:
            for change, pieces, entry in sections:
                if linked_at is not None:
                    _check_not_edited_in_checkout(lower, change, linked_at)
                for piece in pieces:
                    size += len(piece)
                    if size > max_bytes:
                        raise PatchLimitExceeded("patch_size", limits.PATCH_SIZE.refusal(
                            f"the patch is over {max_bytes} bytes"))
                    pending += piece
                    if len(pending) >= WRITE_BATCH:
                        digest.update(pending)
                        write(bytes(pending))
                        pending.clear()
                files.append(_file_change(change, entry))
            digest.update(pending)
            write(bytes(pending))
    except DiffLimitExceeded as exc:
        raise PatchLimitExceeded(exc.limit, str(exc)) from None
    except DiffError as exc:
        raise PatchError(str(exc)) from None
    return PatchSummary(files=tuple(files), size=size, sha256="sha256:" + digest.hexdigest())
