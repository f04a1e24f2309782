"""A box's layers on the host: where they live, who may reach them, and the box's own disk.

::

    <layers root>/<box id>/     root, 0711  what bubblewrap, run as the guest's uid, finds by path
        backend/                root, 0711  the backend's state dir: box.log (0600), mnt/ (the launcher's mount point)
        etc/                    root        the generated /etc of a dir: image (read-only in the box)
        layers/                 root, 0700  the box's layers: no other user of the host gets past this directory
            base/               see below   the base (``box/workspace.py``): linked for a real box, else copied
            view/               a mount     a real box's base as the box sees it (``box/idmap.py``): idmapped,
                                            read-only, nosuid, nodev; the overlay's lower layer
            disk.img            root, 0600  the box's file system: box_disk bytes, reserved on the host (box/disk.py)
            disk/               its mount point: nosuid, nodev, noexec, noatime
                upper/ work/    jobs' uid   the overlay's upper and work dirs: all a box writes to its workspace

A job that makes a set-id copy of a program in its workspace makes it on its own disk, below ``layers/``: no
other local user can open it (the directory is root's, 0700), and nobody can run it from the host (the disk is
mounted nosuid and noexec there). The bit never leaves the box either: the patch records only 100644 and 100755
(``tkbox_guest.diff``), the host's patch parser refuses any other mode, and apply writes those two.

A real box (one with a disk) gets a **linked** base: hard links to the checkout's files in directories of its
own, owned by the checkout's owner, seen by the box through ``view/``, where that owner reads as the jobs' uid.
Where the view cannot be made (a kernel or file system without idmapped mounts) or the checkout is on another
file system than the layers, the base is **copied** as before, owned by the jobs' uid, and is itself the lower
layer. The fake test backend's guest works in the base itself, so it always gets a copy: nothing it writes
reaches a checkout's file.

``disk_bytes`` None (the fake test backend) keeps upper and work in a plain ``disk/`` directory: nothing bounds
them. The disk is released (unmounted; its loop device goes with it) once the box has stopped and its patch is
saved, and deleted with the box; a restarted daemon releases the disks its predecessor left (``recovery.py``).
The view is unmounted with the disk.

Removal is in two steps: ``remove`` unmounts the disk and the view and moves the box's directory, whole, into
``<layers root>/.trash/`` (root, 0700; a rename, so it costs the same for any workspace); the layers are deleted
from there in the background (``layer_reaper.py``), and a restarted daemon deletes whatever is left there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path

from .. import limits
from ..box import disk, idmap
from ..box.disk import DiskError, DiskUsage
from ..box.workspace import build_base

TRASH_DIR = ".trash"  # in the layers root: removed boxes' directories waiting to be deleted (never a box id)

PRIVATE_MODE = 0o700
DISK_POLL_S = 5.0  # how often a running box's disk is read besides every command's end (a job may write alone)
LIMIT_SOURCE = "tkbox.limit"  # the run's record of a limit a box reached (the host's own reading)


class BoxLayers:
    """The host directories of one box (see the module docstring), rooted at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._pending: disk.PendingDisk | None = None
        self._premade: idmap.PremadeMapping | None = None

    @property
    def backend(self) -> Path:
        return self.root / "backend"

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def private(self) -> Path:
        return self.root / "layers"

    @property
    def base(self) -> Path:
        return self.private / "base"

    @property
    def view(self) -> Path:
        return self.private / "view"

    @property
    def lower(self) -> Path:
        """The overlay's lower layer as the box mounts it: the view of a linked base, else the base itself."""
        return self.view if idmap.is_view_of(self.view, self.base) else self.base

    @property
    def linked_at_file(self) -> Path:
        return self.private / "linked-at"

    def linked_at(self) -> int | None:
        """When a linked base was linked (ns since the epoch, taken just before): a lower file modified since then
        was edited in the checkout (``patch/host.py``); None for a copied base."""
        try:
            return int(self.linked_at_file.read_text())
        except (OSError, ValueError):
            return None

    @property
    def disk_image(self) -> Path:
        return self.private / "disk.img"

    @property
    def disk_dir(self) -> Path:
        return self.private / "disk"

    @property
    def upper(self) -> Path:
        return self.disk_dir / "upper"

    @property
    def work(self) -> Path:
        return self.disk_dir / "work"

    def make_root(self) -> None:
        """The box's own directory (it must not exist yet), traversable but not listable by others."""
        self.root.mkdir(mode=0o711)
        os.chmod(self.root, 0o711)

    def start(self, disk_bytes: int | None) -> None:
        """The first step: the directories and, with ``disk_bytes``, the box's disk reserved and its format
        started (``mkfs.ext4`` runs in its own process while the daemon goes on: registering the box's run,
        copying the base). ``prepare`` finishes it. Blocks briefly (the reservation): run it in a thread. Raises
        ``DiskError``."""
        self.backend.mkdir(mode=0o711)  # bubblewrap, as the box uid, resolves the launcher's mount point below it
        os.chmod(self.backend, 0o711)
        self.private.mkdir(mode=PRIVATE_MODE)
        os.chmod(self.private, PRIVATE_MODE)
        _check_private(self.private)
        if disk_bytes is not None:
            self._pending = disk.start_disk(self.disk_image, disk_bytes)

    def premake_view(self, workspace: Path, *, job_uid: int) -> None:
        """Make the view's mapping namespace ahead (a fork), beside ``start``, for the owner ``workspace`` has now;
        ``prepare`` uses it only if the base's owner is the same, else makes its own. Blocks briefly: run it in a
        thread. A failure here is no failure: ``prepare`` tries again and says why."""
        try:
            info = os.stat(workspace)
            if info.st_dev == os.stat(self.root).st_dev:
                self.premake_mapping(info.st_uid, info.st_gid, job_uid)
        except OSError:
            pass

    def premake_mapping(self, owner_uid: int, owner_gid: int, job_uid: int) -> None:
        """``premake_view`` for a checkout owner known ahead (a box started ahead guesses its workspace's owner)."""
        if os.geteuid() == 0:  # only root makes a view
            self._drop_premade()
            self._premade = idmap.PremadeMapping(owner_uid, owner_gid, job_uid)

    def prepare(self, workspace: Path, *, job_uid: int, max_files: int, max_bytes: int) -> dict[str, object]:
        """The rest of the layers: the base copy of ``workspace``, then the disk ``start`` began, mounted, with
        empty upper and work dirs on it (without a disk, in a plain directory). Returns the base copy's summary.
        Blocks: run it in a thread. Raises ``DiskError`` and ``workspace.WorkspaceError``."""
        try:
            summary = self.build_base(workspace, job_uid=job_uid, max_files=max_files, max_bytes=max_bytes,
                                      link=self._pending is not None)
        except BaseException:
            if self._pending is not None:
                self._pending.abandon()
                self._pending = None
            raise
        self.prepare_disk(job_uid)
        return summary

    def prepare_disk(self, job_uid: int) -> None:
        """The disk ``start`` began, mounted, with empty upper and work dirs of the jobs' on it (without a disk,
        in a plain directory). Blocks: run it in a thread. Raises ``DiskError``."""
        pending, self._pending = self._pending, None
        try:
            self.disk_dir.mkdir(mode=0o755)
            if pending is not None:
                pending.mount(self.disk_dir)
                pending = None
        finally:
            if pending is not None:
                pending.abandon()
        for path in (self.upper, self.work):
            path.mkdir(mode=0o755)
            os.chown(path, job_uid, job_uid)

    def build_base(self, workspace: Path, *, job_uid: int, max_files: int, max_bytes: int,
                   link: bool) -> dict[str, object]:
        """The base of ``workspace`` (linked and seen through its view when ``link`` and the host can, else copied;
        ``_build_base``) and its summary. Blocks: run it in a thread. Raises ``workspace.WorkspaceError``."""
        try:
            return self._build_base(workspace, job_uid, max_files, max_bytes, link=link)
        finally:
            self._drop_premade()

    def _build_base(self, workspace: Path, job_uid: int, max_files: int, max_bytes: int, *,
                    link: bool) -> dict[str, object]:
        """A linked base and its view when ``link`` and this host can (root, one file system, idmapped mounts),
        else a copied one; the summary says which (``method``) and, after a fallback, why (``fallback``)."""
        fallback = ""
        if link and os.geteuid() == 0 and os.stat(workspace).st_dev == os.stat(self.private).st_dev:
            linked_at = time.time_ns()
            summary = build_base(workspace, self.base, box_uid=job_uid, max_files=max_files, max_bytes=max_bytes,
                                 link=True)
            owner = summary["owner"]
            assert isinstance(owner, list)
            self.linked_at_file.write_text(f"{linked_at}\n")
            self.view.mkdir(mode=0o755)
            try:  # the last step: a view either is mounted or is not
                idmap.mount_view(self.base, self.view, owner_uid=owner[0], owner_gid=owner[1], job_uid=job_uid,
                                 premade=self._premade)
                return summary
            except OSError as error:  # no idmapped mounts here: the base must be the jobs' own, so a copy
                fallback = f"the idmapped view could not be made ({error}); the base was copied"
                shutil.rmtree(self.base)  # unlinks the links only: the checkout's files stay as they are
                self.view.rmdir()
                self.linked_at_file.unlink()
        elif link:
            fallback = "the checkout is on another file system than the box layers (or not root): copied"
        summary = build_base(workspace, self.base, box_uid=job_uid, max_files=max_files, max_bytes=max_bytes)
        if fallback:
            summary["fallback"] = fallback
        return summary

    def _drop_premade(self) -> None:
        premade, self._premade = self._premade, None
        if premade is not None:
            premade.close()

    def has_disk(self) -> bool:
        return disk.is_mounted(self.disk_dir)

    def disk_usage(self) -> DiskUsage | None:
        """The box's disk as the host reads it now; None when it has none mounted."""
        if not self.has_disk():
            return None
        return disk.usage(self.disk_dir)

    def release_disk(self) -> bool:
        """Unmount the box's disk (its image stays until ``remove``), or drop one still being formatted; False
        when none was mounted."""
        if self._pending is not None:
            self._pending.abandon()
            self._pending = None
        self._drop_premade()
        idmap.unmount_view(self.view, self.base)  # the box's mount namespace keeps its own copy while it runs
        try:
            return disk.release(self.disk_dir)
        except FileNotFoundError:
            return False

    def remove(self) -> Path | None:
        """Release the disk and the view, then move the box's directory into the trash (a rename: instant at any
        size), where ``layer_reaper.LayerReaper`` deletes it; returns where it went (None: there was none). Blocks
        briefly (the unmounts): run it in a thread."""
        self.release_disk()
        if disk.is_mounted(self.disk_dir):  # still mounted: deleting would empty the box's disk, not free it
            raise DiskError(f"the box's disk {self.disk_dir} is still mounted; its layers are kept")
        if idmap.is_view_of(self.view, self.base):  # deleting through it would fail; the layers wait for the next removal
            raise DiskError(f"the box's view {self.view} is still mounted; its layers are kept")
        if not os.path.lexists(self.root):
            return None
        trash = trash_dir(self.root.parent)
        target = trash / f"{self.root.name}.{secrets.token_hex(4)}"
        os.rename(self.root, target)
        return target


def trash_dir(layers_root: Path) -> Path:
    """``<layers root>/.trash``, made root's and 0700 if missing (nothing of a removed box is reachable there)."""
    trash = layers_root / TRASH_DIR
    with contextlib.suppress(FileExistsError):
        trash.mkdir(mode=PRIVATE_MODE)
    _check_private(trash)
    return trash


def _check_private(directory: Path) -> None:
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o777 != PRIVATE_MODE:
        raise DiskError(f"{directory} must be a directory of uid {os.geteuid()} with mode 0700 (the box's layers "
                        "are kept from every other user there)")


def disk_full_record(usage: DiskUsage) -> dict[str, object]:
    """What the daemon records of a full disk: the event ``box.disk_full`` and, in the box's run, a trusted
    must-keep ``tkbox.limit`` observation (the host's reading, never the box's word)."""
    return {"limit": limits.BOX_DISK.name, **usage.to_json(),
            "reason": f"limit {limits.BOX_DISK.name} reached: the box's disk has {usage.free} of {usage.size} bytes "
                      f"left, so its writes fail with ENOSPC; {limits.BOX_DISK.how_to_raise}"}


class FullDiskWatch:
    """Tells ``on_full`` once when the box's disk turns full, and again only after it had room again."""

    def __init__(self, layers: BoxLayers, on_full: Callable[[DiskUsage], None]) -> None:
        self.layers = layers
        self.on_full = on_full
        self.full = False

    def check(self) -> DiskUsage | None:
        """Read the disk (a statvfs: cheap enough for every command's end); returns the reading."""
        try:
            reading = self.layers.disk_usage()
        except OSError:
            return None
        if reading is None:
            return None
        if reading.full and not self.full:
            self.full = True
            self.on_full(reading)
        elif self.full and reading.roomy:
            self.full = False
        return reading
