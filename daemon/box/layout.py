"""The mount layout inside a box (docs/box-contract.md) as one ordered plan, and the host objects it is built from.

``BoxSources.open`` opens every host path a box uses with ``O_PATH | O_NOFOLLOW`` and checks its type and owner
(a planted symlink is refused, never followed), and that the workspace's layers (base, upper, work) lie below a
directory no other user may enter: whatever a box makes of its files (a set-id copy of an interpreter, say), no
local user reaches them by path. A launcher, once in its own mount namespace, reopens the same
paths and requires the very inodes the daemon checked (``reopened_here``); mounts then name those fds as
``/proc/self/fd/N``, so nothing can be swapped between the check and the mount. ``plan()`` lists the mounts in
order; the ns launcher performs them with mount(2), the bwrap backend renders them as bwrap options.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tkbox_daemon.box.backend import BOX_HOME, CHANNEL_DIR, WORKSPACE_DIR, BoxSpec, BoxStartError

TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # merged-/usr links, copied when present
OVERLAY_OPTION_MAP = {"redirect_dir": "off", "metacopy": "off", "index": "off"}
OVERLAY_OPTIONS = ",".join(f"{key}={value}" for key, value in OVERLAY_OPTION_MAP.items())
_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Bind:
    """Bind the host object behind ``fd`` at ``dest`` (read-only unless said otherwise)."""

    dest: str
    fd: int
    readonly: bool = True


@dataclass(frozen=True)
class Tmpfs:
    """A fresh tmpfs, vanishing with the box. ``owner`` "agent": the guest's uid owns it (as bwrap makes them);
    "job": the job user's (the ns launcher mounts it so; under bwrap the guest hands it over at boot)."""

    dest: str
    mode: int
    owner: str = "agent"


@dataclass(frozen=True)
class Symlink:
    """A symlink at ``dest`` pointing at ``target`` (the merged-/usr links)."""

    dest: str
    target: str


@dataclass(frozen=True)
class Special:
    """A mount each backend makes its own way."""

    dest: str
    kind: str  # "proc", "dev" or "workspace" (the overlay)


Step = Bind | Tmpfs | Symlink | Special


def fd_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


@dataclass(frozen=True)
class Source:
    """One opened host object: its fd and the path it was opened by."""

    fd: int
    path: str


@dataclass
class BoxSources:
    """Checked, opened host objects for one box, by role: ``usr``, ``etc``, ``base``, ``upper``, ``work``,
    ``guest``, ``top:<name>`` (a non-merged /bin etc.) and ``channel:<name>``. ``close()`` after the fork."""

    spec: BoxSpec
    opened: dict[str, Source] = field(default_factory=dict)
    top_links: dict[str, str] = field(default_factory=dict)

    @classmethod
    def open(cls, spec: BoxSpec) -> BoxSources:
        sources = cls(spec)
        try:
            sources._open_all()
        except BaseException:
            sources.close()
            raise
        return sources

    def _open_all(self) -> None:
        spec = self.spec
        uid, job_uid = spec.box_uid, spec.job_uid
        layers = {"upper": spec.upper_dir, "work": spec.work_dir}
        if not spec.workspace_later:  # else the base is attached once it exists (late_mounts.py)
            layers = {"base": spec.base_dir, **layers}
        for (role, path), fd in zip(layers.items(), open_workspace_layers(layers, job_uid).values(), strict=True):
            self._keep(role, path, fd)
        self._keep("etc", spec.etc_dir,
                   open_layer_dir(spec.etc_dir, "etc_dir", owner=os.geteuid(), not_writable_by_others=True))
        if spec.guest_dir is not None:
            self._keep("guest", spec.guest_dir,
                       open_layer_dir(spec.guest_dir, "guest_dir", not_owned_by=(uid, job_uid)))
        root = str(spec.image_root or "").rstrip("/")
        root_fd = open_layer_dir(root or "/", "image root")
        try:
            self._keep("usr", f"{root}/usr", _open_dir_at(root_fd, "usr", f"{root}/usr"))
            for name in TOP_LEVEL_LINKS:
                self._add_top_level(root_fd, root, name)
        finally:
            os.close(root_fd)
        for name, path in spec.channels.items():
            self._keep(f"channel:{name}", path, _open_socket(path, name, uid))

    def _keep(self, role: str, path: object, fd: int) -> None:
        self.opened[role] = Source(fd, os.fspath(path))  # type: ignore[arg-type]

    def fd(self, role: str) -> int:
        return self.opened[role].fd

    def _add_top_level(self, root_fd: int, root: str, name: str) -> None:
        try:
            info = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(name, dir_fd=root_fd)
            if target.strip("/") == f"usr/{name}":
                self.top_links[name] = f"usr/{name}"
            # any other link would point outside what the box gets: leave it out
        elif stat.S_ISDIR(info.st_mode):
            self._keep(f"top:{name}", f"{root}/{name}", _open_dir_at(root_fd, name, f"{root}/{name}"))

    def fds(self) -> list[int]:
        return [source.fd for source in self.opened.values()]

    def close(self) -> None:
        for fd in self.fds():
            try:
                os.close(fd)
            except OSError:
                pass
        self.opened.clear()

    def reopened_here(self) -> BoxSources:
        """The same objects opened again in the calling process's mount namespace (a bind or overlay mount
        refuses a path of another namespace's mount): each path is opened with O_NOFOLLOW and must lead to
        the very inode the daemon checked, else the box does not start."""
        fresh = BoxSources(self.spec, top_links=dict(self.top_links))
        for role, source in self.opened.items():
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
            if not role.startswith("channel:"):
                flags |= os.O_DIRECTORY
            fd = os.open(source.path, flags)
            checked, now = os.fstat(source.fd), os.fstat(fd)
            if (checked.st_dev, checked.st_ino) != (now.st_dev, now.st_ino):
                os.close(fd)
                raise BoxStartError(f"{source.path} changed while the box was starting")
            fresh.opened[role] = Source(fd, source.path)
        return fresh

    def restage(self, role: str, path: str) -> None:
        """Point ``role`` at what is now at ``path`` in this mount namespace (a launcher's own bind of it): opened
        ``O_PATH | O_NOFOLLOW``, it must be the very inode ``role`` named, whose fd is then closed."""
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY)
        old = self.opened[role]
        checked, now = os.fstat(old.fd), os.fstat(fd)
        if (checked.st_dev, checked.st_ino) != (now.st_dev, now.st_ino):
            os.close(fd)
            raise BoxStartError(f"{path} is not the {role} layer it was bound from")
        os.close(old.fd)
        self.opened[role] = Source(fd, path)

    def stage_new(self, role: str, path: str) -> None:
        """Name the directory at ``path`` in this mount namespace (a launcher's own staging point) as ``role``."""
        self._keep(role, path, os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY))

    def overlay_data(self) -> str:
        """Mount data for the workspace overlay (paths through our fds: no escaping, no races)."""
        return (f"lowerdir={fd_path(self.fd('base'))},upperdir={fd_path(self.fd('upper'))},"
                f"workdir={fd_path(self.fd('work'))},{OVERLAY_OPTIONS}")

    def plan(self) -> list[Step]:
        """The box's mounts, in the order they must be made (parents before children)."""
        steps: list[Step] = [Bind("/usr", self.fd("usr"))]
        steps += [Symlink(f"/{name}", target) for name, target in sorted(self.top_links.items())]
        steps += [Bind("/" + role[4:], source.fd) for role, source in sorted(self.opened.items())
                  if role.startswith("top:")]
        steps += [
            Bind("/etc", self.fd("etc")),
            Tmpfs("/tmp", 0o1777),
            Tmpfs("/var/tmp", 0o1777),
            Tmpfs("/run", 0o755),
            Tmpfs(BOX_HOME, 0o700, owner="job"),
            Special("/proc", "proc"),
            Special("/dev", "dev"),
            Special(WORKSPACE_DIR, "workspace"),
            Bind(f"{CHANNEL_DIR}/base", self.fd("base")),
            Bind(f"{CHANNEL_DIR}/upper", self.fd("upper")),
        ]
        if "guest" in self.opened:
            steps.append(Bind(f"{CHANNEL_DIR}/guest", self.fd("guest")))
        steps += [Bind(BoxSpec.channel_path_in_box(role[8:]), source.fd)
                  for role, source in sorted(self.opened.items()) if role.startswith("channel:")]
        return steps


def open_layer_dir(path: object, what: str, *, owner: int | None = None, not_owned_by: tuple[int, ...] = (),
              not_writable_by_others: bool = False) -> int:
    try:
        fd = os.open(os.fspath(path), _O_PATH_DIR)  # type: ignore[arg-type]
    except OSError as error:
        raise BoxStartError(f"{what} {path}: not a directory we can use ({error.strerror})") from None
    info = os.fstat(fd)
    problem = None
    if owner is not None and info.st_uid != owner:
        problem = f"owned by uid {info.st_uid}, expected {owner}"
    elif info.st_uid in not_owned_by:
        problem = "owned by a box uid: the box could change it"
    elif not_writable_by_others and info.st_mode & 0o022:
        problem = "writable by group or others"
    if problem:
        os.close(fd)
        raise BoxStartError(f"{what} {path}: {problem}")
    return fd


def open_workspace_layers(layers: dict[str, Path], job_uid: int) -> dict[str, int]:
    """``O_PATH`` fds of a workspace's layer dirs (role -> path: ``base``, ``upper``, ``work``), each the jobs'
    own, no symlink followed, below a directory closed to other users, and upper and work on one file system; on a
    refusal none stays open. Raises ``BoxStartError``."""
    opened: dict[str, int] = {}
    try:
        for role, path in layers.items():
            opened[role] = open_layer_dir(path, f"{role}_dir", owner=job_uid)
        for role, path in layers.items():
            check_closed_to_others(path, f"{role}_dir")
        if os.fstat(opened["upper"]).st_dev != os.fstat(opened["work"]).st_dev:
            raise BoxStartError("upper_dir and work_dir must be on the same filesystem")
    except BaseException:
        for fd in opened.values():
            os.close(fd)
        raise
    return opened


def check_closed_to_others(path: object, what: str) -> None:
    """Refuse ``path`` unless a directory above it belongs to us (the daemon's user) and is closed to everyone
    else (no group or other permission bits, 0700): then no other local user can reach it by path, whatever
    modes the box gives the files below it."""
    euid = os.geteuid()
    for parent in Path(os.fspath(path)).parents:  # type: ignore[arg-type]
        try:
            info = os.lstat(parent)
        except OSError as error:
            raise BoxStartError(f"{what} {path}: {parent} cannot be checked ({error.strerror})") from None
        if stat.S_ISDIR(info.st_mode) and info.st_uid == euid and not info.st_mode & 0o077:
            return
    raise BoxStartError(f"{what} {path}: no directory above it is closed to other users (owned by uid {euid}, "
                        "mode 0700), so any local user could reach the box's files; keep a box's layers below "
                        "such a directory")


def _open_dir_at(dir_fd: int, name: str, shown: str) -> int:
    try:
        return os.open(name, _O_PATH_DIR, dir_fd=dir_fd)
    except OSError as error:
        raise BoxStartError(f"{shown}: not a directory we can use ({error.strerror})") from None


def _open_socket(path: object, name: str, box_uid: int) -> int:
    """Open a channel socket without following links and hand it to the guest's uid (owner, mode 0600): a job,
    running under another uid, cannot connect to it."""
    try:
        fd = os.open(os.fspath(path), os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)  # type: ignore[arg-type]
    except OSError as error:
        raise BoxStartError(f"channel {name} socket {path}: {error.strerror}") from None
    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
        os.close(fd)
        raise BoxStartError(f"channel {name}: {path} is not a Unix socket")
    os.chown(fd_path(fd), box_uid, box_uid)
    os.chmod(fd_path(fd), 0o600)
    return fd
