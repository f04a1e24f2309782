"""The checkout writer: a planned set of changes reaches the user's checkout only as planned, or not at all.

``write_checkout(root, changes)`` (changes: ``checkout_plan``'s ``WriteFile``, ``WriteSymlink``, ``Delete``):

1. Check. Every path is walked from the root's descriptor one directory at a time with ``O_NOFOLLOW`` (never a
   path string through a symlinked parent) and compared with its expected pre-image: content sha256 and mode
   for a file, target for a symlink, nothing for ``ABSENT`` (a directory there may stand in for nothing only if
   the plan deletes everything in it). Every mismatch is collected; any one refuses the whole plan and nothing
   is written. The pre-images' bytes are kept (bounded by ``ReadBudget``) for a rollback.
2. Write: deletes first (then directories they left empty, as git does), then files and symlinks. Each path is
   walked again (missing directories made, 0755), its pre-image read again right before it is replaced, and a
   file goes to a new temporary file in the same directory (``O_EXCL``), written and chmodded to exactly its
   mode (never setuid, setgid or sticky); once every new file is written, one ``syncfs`` makes them all
   durable (one flush instead of an fsync per file), and only then is each renamed over its name. Each changed
   directory is fsynced once, at the end.
3. If anything fails or differs midway, writing stops and every written path is rolled back from its pre-image,
   in reverse order, but only where the path still holds exactly what was written; the report says which paths
   were written, which were not, which were rolled back and which could not be, and why.

It blocks: run it in a thread. ``fs`` (``checkout_fs.CheckoutFs``) is the seam tests use to inject failures.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from tkbox_guest.layers import shown

from .checkout_fs import ABSENT_FOUND, Blocked, CheckoutFs, Found, ReadBudget, look, open_directory, open_root
from .checkout_plan import Absent, Delete, FileImage, PlannedChange, WriteFile, check_plan
from .checkout_report import CheckoutReport, FileOutcome

TEMP_PREFIX = b".tkbox-apply-"
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
_NOT_EMPTY = (errno.ENOTEMPTY, errno.EEXIST)

Parts = tuple[bytes, ...]


class _Stop(Exception):
    """Writing stops; ``reason`` says why (for ``entry`` when one path caused it)."""

    def __init__(self, reason: str, entry: _Entry | None = None) -> None:
        super().__init__(reason)
        self.reason, self.entry = reason, entry


@dataclass
class _Entry:
    """One planned change and what happened to it."""

    change: PlannedChange
    parts: Parts
    before: Found = ABSENT_FOUND
    status: str = "not_written"
    reason: str = ""
    staged: bytes | None = None  # a WriteFile's temporary file, written and synced, not yet renamed over the name

    @property
    def shown(self) -> str:
        return shown(self.change.path)


def write_checkout(root: str | os.PathLike[str] | bytes, changes: Iterable[PlannedChange], *,
                   budget: ReadBudget | None = None, fs: CheckoutFs | None = None) -> CheckoutReport:
    """Carry out ``changes`` in the checkout at ``root`` (see the module's docstring) and report per path.

    Raises ``PlanError`` for a bad plan and ``CheckoutError`` when the root cannot be opened (nothing read or
    written in either case); every other outcome is in the report.
    """
    plan = check_plan(changes)
    fs = fs or CheckoutFs()
    root_fd = open_root(fs, root)
    try:
        return _Writer(fs, root_fd, plan, budget or ReadBudget()).run()
    finally:
        os.close(root_fd)


class _Writer:
    """One run of the writer over one plan: the check, the writes, and the rollback if they fail."""

    def __init__(self, fs: CheckoutFs, root_fd: int, plan: dict[Parts, PlannedChange], budget: ReadBudget) -> None:
        self.fs, self.root_fd, self.budget = fs, root_fd, budget
        self.recheck_budget = ReadBudget(budget.max_file_bytes, sys.maxsize)  # re-reads are compared, not kept
        self.entries = [_Entry(change, parts) for parts, change in plan.items()]
        self.deleted = {parts for parts, change in plan.items() if isinstance(change, Delete)}
        self.written: list[_Entry] = []
        self.created_dirs: list[Parts] = []
        self.removed_dirs: dict[Parts, int] = {}
        self.restored_dirs: list[Parts] = []
        self.touched_dirs: set[Parts] = set()
        self.notes: list[str] = []
        self.left_dirs: list[bytes] = []

    def run(self) -> CheckoutReport:
        problems = self.check()
        if problems:
            return CheckoutReport("refused", self.outcomes("the check refused other paths"),
                                  problems=tuple(problems))
        try:
            self.write_all()
        except _Stop as stop:
            if stop.entry is not None:
                stop.entry.reason = stop.reason
            failure = f"{stop.entry.shown}: {stop.reason}" if stop.entry is not None else stop.reason
            self.roll_back()
            return CheckoutReport("failed", self.outcomes(f"not attempted: writing stopped at {failure}"),
                                  failure=failure, notes=tuple(self.notes), left_dirs=tuple(self.left_dirs))
        return CheckoutReport("written", self.outcomes(""), notes=tuple(self.notes))

    def outcomes(self, unwritten_reason: str) -> tuple[FileOutcome, ...]:
        return tuple(FileOutcome(entry.change.path, entry.status,
                                 entry.reason or (unwritten_reason if entry.status == "not_written" else ""))
                     for entry in self.entries)

    # 1. the check

    def check(self) -> list[tuple[bytes, str]]:
        problems: list[tuple[bytes, str]] = []
        for entry in sorted(self.entries, key=lambda item: item.parts):
            found = self.current(entry.parts, self.budget)
            problem = found if isinstance(found, str) else self.difference(entry, found)
            if problem is None and isinstance(found, Found):
                entry.before = found
            else:
                entry.reason = str(problem)
                problems.append((entry.change.path, entry.reason))
        return problems

    def current(self, parts: Parts, budget: ReadBudget) -> Found | str:
        """What is at ``parts`` now, or why it cannot be looked at safely."""
        parent = open_directory(self.fs, self.root_fd, parts[:-1])
        if isinstance(parent, Blocked):
            if parent.why == "missing" or (parent.why in ("symlink", "not a directory")
                                           and parts[:parent.depth] in self.deleted):
                return ABSENT_FOUND  # below nothing, or below a file or symlink the plan deletes first
            return parent.describe(parts)
        try:
            return look(self.fs, parent, parts[-1], budget)
        finally:
            os.close(parent)

    def difference(self, entry: _Entry, found: Found) -> str | None:
        """How ``found`` differs from the entry's expected pre-image, or None."""
        expected = entry.change.expected
        if found.kind == "error":
            return found.detail
        if found.kind == "directory":
            if isinstance(expected, Absent) and not isinstance(entry.change, Delete):
                return self.directory_problem(entry.parts)
            return f"expected {expected.describe()}, found a directory"
        if found.image == expected:
            return None
        if isinstance(expected, FileImage) and isinstance(found.image, FileImage):
            if found.image.sha256 != expected.sha256:
                return (f"its content differs from the patch's base (sha256 {found.image.sha256[:12]}, expected "
                        f"{expected.sha256[:12]})")
            return f"its mode is {found.image.mode:o}, expected {expected.mode:o}"
        if isinstance(expected, Absent):
            return f"the patch adds it, but the checkout has {found.describe()}"
        return f"expected {expected.describe()}, found {found.describe()}"

    def directory_problem(self, parts: Parts) -> str | None:
        """None when everything in the directory ``parts`` is a file or symlink the plan deletes."""
        inside = {deleted for deleted in self.deleted if deleted[:len(parts)] == parts and len(deleted) > len(parts)}
        between = {deleted[:end] for deleted in inside for end in range(len(parts) + 1, len(deleted))}
        pending = [parts]
        while pending:
            directory = pending.pop()
            fd = open_directory(self.fs, self.root_fd, directory)
            if isinstance(fd, Blocked):
                return fd.describe(directory + (b"",))
            try:
                for name in self.fs.scandir(fd):
                    child = directory + (name,)
                    if child in between:
                        pending.append(child)
                    elif child not in inside:
                        return (f"the patch adds it, but the checkout has a directory there holding "
                                f"{shown(b'/'.join(child))}, which the patch does not delete")
            except OSError as exc:
                return f"cannot list the directory {shown(b'/'.join(directory))}: {os.strerror(exc.errno or 0)}"
            finally:
                os.close(fd)
        return None

    # 2. the writes

    def write_all(self) -> None:
        deletes = sorted((entry for entry in self.entries if isinstance(entry.change, Delete)),
                         key=lambda entry: entry.parts)
        writes = sorted((entry for entry in self.entries if not isinstance(entry.change, Delete)),
                        key=lambda entry: entry.parts)
        for entry in deletes:
            self.apply(entry)
        self.remove_emptied_dirs(deletes, writes)
        try:
            self.stage([entry for entry in writes if isinstance(entry.change, WriteFile)])
            for entry in writes:
                self.apply(entry)
        except BaseException:
            self.discard_staged(writes)
            raise
        for directory in sorted((self.touched_dirs | {parts[:-1] for parts in self.created_dirs})
                                - self.removed_dirs.keys()):
            self.sync_dir(directory)

    def stage(self, entries: list[_Entry]) -> None:
        """Write every new file's content to a temporary file beside its name, then make them all durable with
        one sync of the file system (instead of an fsync each): only then is any of them renamed over a name."""
        for entry in entries:
            change = entry.change
            assert isinstance(change, WriteFile)
            try:
                parent = open_directory(self.fs, self.root_fd, entry.parts[:-1], created=self.created_dirs)
            except OSError as exc:
                raise _Stop(f"cannot make its directory: {os.strerror(exc.errno or 0)}", entry) from None
            if isinstance(parent, Blocked):
                raise _Stop(f"{parent.describe(entry.parts)} now", entry)
            try:
                entry.staged = self.write_temp(parent, change.content, change.mode)
            except OSError as exc:
                raise _Stop(f"writing it failed: {os.strerror(exc.errno or 0)}", entry) from None
            finally:
                os.close(parent)
        if entries:
            try:
                self.fs.syncfs(self.root_fd)
            except OSError as exc:
                raise _Stop(f"syncing the new files failed: {os.strerror(exc.errno or 0)}") from None

    def discard_staged(self, entries: list[_Entry]) -> None:
        """Remove the temporary files not renamed yet (directly, like ``discard``, not through the injectable
        ``fs``: cleaning up after a failure must not be what fails)."""
        for entry in entries:
            if entry.staged is None:
                continue
            parent = open_directory(CheckoutFs(), self.root_fd, entry.parts[:-1])
            if isinstance(parent, Blocked):
                self.notes.append(f"could not remove the temporary file {shown(entry.staged)} of {entry.shown}: "
                                  f"{parent.describe(entry.parts)}")
                continue
            try:
                self.discard(parent, entry.staged)
            finally:
                os.close(parent)
            entry.staged = None

    def apply(self, entry: _Entry) -> None:
        change, name = entry.change, entry.parts[-1]
        try:
            parent = open_directory(self.fs, self.root_fd, entry.parts[:-1],
                                    created=None if isinstance(change, Delete) else self.created_dirs)
        except OSError as exc:
            raise _Stop(f"cannot make its directory: {os.strerror(exc.errno or 0)}", entry) from None
        if isinstance(parent, Blocked):
            raise _Stop(f"{parent.describe(entry.parts)} now", entry)
        try:
            now = look(self.fs, parent, name, self.recheck_budget)
            if now.kind == "error":
                raise _Stop(f"cannot check it again before writing: {now.detail}", entry)
            if not self.still_expected(entry, now):
                raise _Stop(f"it changed after the check: it is now {now.describe()}", entry)
            if isinstance(change, Delete):
                self.fs.unlink(name, dir_fd=parent)
            elif isinstance(change, WriteFile) and entry.staged is not None:
                self.fs.rename(entry.staged, name, dir_fd=parent)
                entry.staged = None
            elif isinstance(change, WriteFile):
                self.replace_with_file(parent, name, change.content, change.mode)
            else:
                self.replace_with_symlink(parent, name, change.target)
        except OSError as exc:
            raise _Stop(f"writing it failed: {os.strerror(exc.errno or 0)}", entry) from None
        finally:
            os.close(parent)
        entry.status = "written"
        self.written.append(entry)
        self.touched_dirs.add(entry.parts[:-1])

    def still_expected(self, entry: _Entry, now: Found) -> bool:
        if entry.before.kind == "directory" or isinstance(entry.change.expected, Absent):
            return now.kind == "absent"  # a directory that stood in for nothing is gone with the deletes
        return now.image is not None and now.image == entry.change.expected

    def remove_emptied_dirs(self, deletes: list[_Entry], writes: list[_Entry]) -> None:
        """Remove the directories the deletes left empty (deepest first), except those the writes need."""
        needed = {entry.parts[:end] for entry in writes for end in range(1, len(entry.parts))}
        above = {entry.parts[:end] for entry in deletes if entry.status == "written"
                 for end in range(1, len(entry.parts))}
        for directory in sorted(above - needed, key=lambda parts: (-len(parts), parts)):
            parent = open_directory(self.fs, self.root_fd, directory[:-1])
            if isinstance(parent, Blocked):
                if parent.why == "missing":
                    continue
                raise _Stop(f"removing the emptied directory {shown(b'/'.join(directory))}: "
                            f"{parent.describe(directory)}")
            try:
                mode = stat.S_IMODE(self.fs.lstat(directory[-1], dir_fd=parent).st_mode)
                self.fs.rmdir(directory[-1], dir_fd=parent)
            except OSError as exc:
                if exc.errno in (*_NOT_EMPTY, errno.ENOENT, errno.ENOTDIR):
                    continue
                raise _Stop(f"removing the emptied directory {shown(b'/'.join(directory))} failed: "
                            f"{os.strerror(exc.errno or 0)}") from None
            finally:
                os.close(parent)
            self.removed_dirs[directory] = mode
            self.touched_dirs.add(directory[:-1])

    def sync_dir(self, directory: Parts) -> None:
        fd = open_directory(self.fs, self.root_fd, directory)
        if isinstance(fd, Blocked):
            raise _Stop(f"syncing the directory {shown(b'/'.join(directory))}: {fd.describe(directory + (b'',))}")
        try:
            self.fs.fsync(fd)
        except OSError as exc:
            raise _Stop(f"syncing the directory {shown(b'/'.join(directory))} failed: "
                        f"{os.strerror(exc.errno or 0)}") from None
        finally:
            os.close(fd)

    def write_temp(self, parent: int, content: bytes, mode: int, *, sync: bool = False) -> bytes:
        """A new temporary file in ``parent`` holding ``content`` with exactly ``mode`` (fsynced if ``sync``)."""
        temp, fd = self.temp_file(parent)
        try:
            try:
                view = memoryview(content)
                while view:
                    view = view[self.fs.write(fd, view):]
                self.fs.fchmod(fd, mode & 0o777)
                if sync:
                    self.fs.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            self.discard(parent, temp)
            raise
        return temp

    def replace_with_file(self, parent: int, name: bytes, content: bytes, mode: int) -> None:
        """Write a temporary file next to ``name``, chmod it to ``mode``, fsync it, rename it over ``name``."""
        temp = self.write_temp(parent, content, mode, sync=True)
        try:
            self.fs.rename(temp, name, dir_fd=parent)
        except BaseException:
            self.discard(parent, temp)
            raise

    def replace_with_symlink(self, parent: int, name: bytes, target: bytes) -> None:
        for _ in range(8):
            temp = TEMP_PREFIX + secrets.token_hex(8).encode()
            try:
                self.fs.symlink(target, temp, dir_fd=parent)
                break
            except FileExistsError:
                continue
        else:
            raise OSError(errno.EEXIST, "no free temporary name")
        try:
            self.fs.rename(temp, name, dir_fd=parent)
        except BaseException:
            self.discard(parent, temp)
            raise

    def temp_file(self, parent: int) -> tuple[bytes, int]:
        for _ in range(8):
            temp = TEMP_PREFIX + secrets.token_hex(8).encode()
            try:
                return temp, self.fs.open(temp, WRITE_FLAGS, 0o600, dir_fd=parent)
            except FileExistsError:
                continue
        raise OSError(errno.EEXIST, "no free temporary name")

    def discard(self, parent: int, temp: bytes) -> None:
        """Remove a temporary file or symlink of ours (directly, not through the injectable ``fs``)."""
        try:
            os.unlink(temp, dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.notes.append(f"could not remove the temporary file {shown(temp)}: {os.strerror(exc.errno or 0)}")

    # 3. the rollback

    def roll_back(self) -> None:
        """Undo the written paths newest first: writes, then the directories they made, then deletes."""
        undone_writes = [entry for entry in reversed(self.written) if not isinstance(entry.change, Delete)]
        for entry in undone_writes:
            self.undo(entry)
        for directory in sorted(self.created_dirs, key=lambda parts: (-len(parts), parts)):
            self.remove_created_dir(directory)
        for entry in reversed(self.written):
            if isinstance(entry.change, Delete):
                self.undo(entry)

    def undo(self, entry: _Entry) -> None:
        change, before, name = entry.change, entry.before, entry.parts[-1]
        try:
            parent = open_directory(self.fs, self.root_fd, entry.parts[:-1],
                                    created=self.restored_dirs if isinstance(change, Delete) else None,
                                    dir_modes=self.removed_dirs)
        except OSError as exc:
            self.rollback_failed(entry, f"cannot make its directory again: {os.strerror(exc.errno or 0)}")
            return
        if isinstance(parent, Blocked):
            self.rollback_failed(entry, parent.describe(entry.parts))
            return
        try:
            now = look(self.fs, parent, name, self.recheck_budget)
            if now.kind == "error":
                self.rollback_failed(entry, f"cannot check it before restoring it: {now.detail}; left as it is")
                return
            if now.image is None or now.image != change.result():
                self.rollback_failed(entry, f"it changed after tkbox wrote it (it is now {now.describe()}); "
                                            "left as it is")
                return
            if before.kind in ("absent", "directory"):
                self.fs.unlink(name, dir_fd=parent)  # a directory there comes back with the files it held
            elif isinstance(before.image, FileImage):
                self.replace_with_file(parent, name, before.image.content or b"", before.permissions)
            elif before.image is not None:
                self.replace_with_symlink(parent, name, before.image.target)
        except OSError as exc:
            self.rollback_failed(entry, f"restoring it failed: {os.strerror(exc.errno or 0)}")
            return
        finally:
            os.close(parent)
        entry.status, entry.reason = "rolled_back", "restored as it was before"

    def rollback_failed(self, entry: _Entry, reason: str) -> None:
        entry.status, entry.reason = "rollback_failed", reason

    def remove_created_dir(self, directory: Parts) -> None:
        parent = open_directory(self.fs, self.root_fd, directory[:-1])
        if isinstance(parent, Blocked):
            if parent.why != "missing":
                self.left_dirs.append(b"/".join(directory))
            return
        try:
            self.fs.rmdir(directory[-1], dir_fd=parent)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                self.left_dirs.append(b"/".join(directory))
        finally:
            os.close(parent)
