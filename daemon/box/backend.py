"""The box backend interface: what a box is (``BoxSpec``), how it is started (``BoxBackend``) and the handle to a
running one (``BoxProcess``).

A backend turns a ``BoxSpec`` and the argv of the box's PID 1 (the guest agent) into a running, isolated box
laid out as docs/box-contract.md says. Backends: ``bwrap`` (default), ``ns`` (pure-Python fallback) and ``fake``
(tests only, no isolation). docs/box-isolation.md describes the guarantees and how each is enforced.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from tkbox_daemon.box.uids import FIRST_BOX_UID

# Two users in every box, each mapped to its own host uid, so that nothing a job runs can reach the guest agent:
# the guest (PID 1) is in-box root, mapped to host ``box_uid``, holding only the capabilities below in the box's
# user namespace; every job runs as in-box uid 1000 ("box"), mapped to host ``job_uid``, with no capability at all.
# A job therefore cannot ptrace, pidfd_getfd, read /proc/1/mem of, or signal the guest (different uid, no
# CAP_SYS_PTRACE or CAP_KILL), nor connect to its channel sockets (owned by the guest's uid, mode 0600).
BOX_AGENT_UID = 0
BOX_JOB_UID = 1000
# The guest's capabilities, in its user namespace only: start execs as the job user (setuid, setgid), signal
# their groups (kill), hand the job its home and terminals (chown), read the workspace for the host (dac read).
# setpcap lets the guest empty the bounding set at boot; it then drops setpcap itself (guest/capabilities.py).
AGENT_CAPABILITIES = ("CAP_CHOWN", "CAP_DAC_READ_SEARCH", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP")
CAPABILITY_NUMBERS = {"CAP_CHOWN": 0, "CAP_DAC_READ_SEARCH": 2, "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7,
                      "CAP_SETPCAP": 8}
BOX_HOME = "/home/box"
CHANNEL_DIR = "/run/tkbox"  # channel sockets, the guest code and views of the workspace layers
WORKSPACE_DIR = "/workspace"
DEFAULT_LOG_LIMIT_BYTES = 1 << 20
# Box processes are the OOM killer's first choice (inside their memory cgroup and on the host), never the
# launcher that supervises them.
BOX_OOM_SCORE_ADJ = 1000
DEFAULT_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": BOX_HOME,
    "USER": "box",
    "LOGNAME": "box",
    "LANG": "C.UTF-8",
}

_BOX_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_CHANNEL_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_HOSTNAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class BoxError(Exception):
    """A box could not be started or controlled."""


class BoxStartError(BoxError):
    """Starting a box failed; the message says why (and the tail of box.log when the launcher wrote one)."""


@dataclass(frozen=True)
class BoxLimits:
    """cgroup limits for one box; None leaves that resource unlimited."""

    memory_bytes: int | None = None
    pids_max: int | None = None
    cpu_shares: int | None = None  # relative weight (cgroup v1 cpu.shares, default 1024)
    cpu_quota_us: int | None = None  # CPU time per period (cpu.cfs_quota_us); 2 * period = two CPUs
    cpu_period_us: int = 100_000

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "pids_max", "cpu_shares", "cpu_quota_us"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive integer or None, not {value!r}")
        if not 1000 <= self.cpu_period_us <= 1_000_000:
            raise ValueError("cpu_period_us must be between 1000 and 1000000")
        if self.cpu_shares is not None and self.cpu_shares < 2:
            raise ValueError("cpu_shares must be at least 2")
        if self.cpu_quota_us is not None and self.cpu_quota_us < 1000:
            raise ValueError("cpu_quota_us must be at least 1000")


def check_box_uids(box_uid: object, job_uid: object) -> None:
    """A box's two host uids: each an int >= ``FIRST_BOX_UID`` (never root), and different (a job never shares the
    guest's host uid). Raises ValueError naming the one that is not."""
    for name, uid in (("box_uid", box_uid), ("job_uid", job_uid)):
        if isinstance(uid, bool) or not isinstance(uid, int) or uid < FIRST_BOX_UID:
            raise ValueError(f"{name} must be a host uid >= {FIRST_BOX_UID} (never root), not {uid!r}")
    if job_uid == box_uid:
        raise ValueError("job_uid must differ from box_uid: a job must never share the guest's host uid")


@dataclass(frozen=True)
class BoxSpec:
    """Everything a backend needs to start one box. Host paths are absolute and owned by the daemon.

    ``box_uid`` is the guest's host uid (in-box root), ``job_uid`` the jobs' (in-box 1000); they differ.
    ``base_dir`` (the overlay's lower dir, built by ``workspace.build_base`` and owned by ``job_uid``),
    ``upper_dir`` and ``work_dir`` (empty, owned by ``job_uid``, same filesystem) make ``/workspace``;
    ``etc_dir`` (from ``etcgen.generate_etc``) becomes ``/etc``; each channel ``name -> host socket path``
    appears as ``/run/tkbox/<name>.sock``; ``guest_dir`` as ``/run/tkbox/guest``; ``image_root`` None means
    the host's ``/usr``. ``state_dir`` holds ``box.log`` and the backend's mount points. ``disks_root``: the
    directory below which the daemon mounts its boxes' disks; a bwrap launcher, whose private mount namespace lives
    as long as its box, drops its copies of the other boxes' disks found there, so a removed box's disk (and its
    loop device) is freed at once rather than when every box started meanwhile has ended. ``userns_fd``: for a
    backend that ``takes_user_namespace``, an fd of the box's user namespace the daemon made beforehand
    (``userns.box_user_namespace``, while the layers were built; the daemon closes it once ``start`` returns);
    None: the launcher makes it.
    """

    box_id: str
    state_dir: Path
    base_dir: Path
    upper_dir: Path
    work_dir: Path
    etc_dir: Path
    box_uid: int
    job_uid: int
    channels: Mapping[str, Path] = field(default_factory=dict)
    guest_dir: Path | None = None
    image_root: Path | None = None
    limits: BoxLimits = field(default_factory=BoxLimits)
    env: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV))
    cwd: str = CHANNEL_DIR
    hostname: str = "box"
    log_limit_bytes: int = DEFAULT_LOG_LIMIT_BYTES
    use_cgroups: bool = True  # False: no limits, pause by signals (saves the ~10 ms cgroup v1 attach)
    disks_root: Path | None = None
    userns_fd: int | None = None
    workspace_later: bool = False  # started ahead: base_dir need not exist yet; ``BoxBackend.attach_workspace``
    nice: int = 0  # the box's CPU niceness at its start (a box started ahead waits at a lower priority)

    def __post_init__(self) -> None:
        if not _BOX_ID.match(self.box_id):
            raise ValueError(f"invalid box id {self.box_id!r}")
        check_box_uids(self.box_uid, self.job_uid)
        for name in ("state_dir", "base_dir", "upper_dir", "work_dir", "etc_dir", "guest_dir", "image_root",
                     "disks_root"):
            value = getattr(self, name)
            if value is None:
                continue
            path = Path(value)
            if not path.is_absolute() or any(part in ("..", ".") for part in path.parts) or ":" in str(path):
                raise ValueError(f"{name} must be an absolute, normalised path without ':', not {value!r}")
            object.__setattr__(self, name, path)
        channels = {}
        for name, path in dict(self.channels).items():
            if not _CHANNEL_NAME.match(name):
                raise ValueError(f"invalid channel name {name!r}")
            if not Path(path).is_absolute():
                raise ValueError(f"channel {name} needs an absolute host path")
            channels[name] = Path(path)
        object.__setattr__(self, "channels", channels)
        env = dict(self.env)
        for key, value in env.items():
            if not _ENV_NAME.match(key) or "\0" in value:
                raise ValueError(f"invalid environment entry {key!r}")
        object.__setattr__(self, "env", env)
        if not _HOSTNAME.match(self.hostname):
            raise ValueError(f"invalid hostname {self.hostname!r}")
        if not self.cwd.startswith("/") or "\0" in self.cwd:
            raise ValueError("cwd must be an absolute path inside the box")
        if not 4096 <= self.log_limit_bytes <= 1 << 30:
            raise ValueError("log_limit_bytes must be between 4 KiB and 1 GiB")
        if isinstance(self.nice, bool) or not isinstance(self.nice, int) or not 0 <= self.nice <= 19:
            raise ValueError(f"nice must be 0 to 19, not {self.nice!r}")
        if self.userns_fd is not None and (isinstance(self.userns_fd, bool) or not isinstance(self.userns_fd, int)
                                           or self.userns_fd < 0):
            raise ValueError(f"userns_fd must be an open fd or None, not {self.userns_fd!r}")

    @property
    def log_path(self) -> Path:
        """Where the launcher's and the box's stdout/stderr go (bounded by ``log_limit_bytes``)."""
        return self.state_dir / "box.log"

    @staticmethod
    def channel_path_in_box(name: str) -> str:
        return f"{CHANNEL_DIR}/{name}.sock"


def exit_code_from_wait_status(status: int) -> int:
    """A waitpid status as one int, the shell's way: the exit code, or 128 + N when killed by signal N."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


class BoxProcess(ABC):
    """A running (or finished) box. ``pid`` is the host pid of the box's PID 1."""

    box_id: str
    pid: int
    returncode: int | None = None

    @abstractmethod
    async def wait(self) -> int:
        """Wait until the whole box has ended; its PID 1's exit code, or 128 + N if signal N ended it."""

    @abstractmethod
    def kill(self) -> None:
        """SIGKILL every process of the box (returns at once; ``await wait()`` to reap). Idempotent."""

    @abstractmethod
    async def pause(self) -> None:
        """Stop every process of the box from running (cgroup freezer, else SIGSTOP to each)."""

    @abstractmethod
    async def resume(self) -> None:
        """Undo ``pause``."""

    @abstractmethod
    def stats(self) -> dict[str, object]:
        """Resource use now: memory, pids, cpu, frozen/paused, oom kills (keys absent when unknown)."""

    def oom_kills(self) -> int | None:
        """The box's out-of-memory kills (what ``stats`` says under ``oom_kills``, read alone: each command's end
        asks), None when the host cannot say."""
        return None


class BoxBackend(ABC):
    """Starts boxes. Capability flags tell the daemon what the backend guarantees."""

    name: ClassVar[str]
    isolated: ClassVar[bool]  # namespaces, minimal root, seccomp, unprivileged host uid (False only in tests)
    applies_limits: ClassVar[bool]  # cgroup limits when the controllers exist
    can_pause: ClassVar[bool] = True
    takes_user_namespace: ClassVar[bool] = False  # starts the box in ``BoxSpec.userns_fd`` when one is given
    starts_ahead: ClassVar[bool] = False  # starts a box before its workspace exists (``BoxSpec.workspace_later``)

    @abstractmethod
    async def start(self, spec: BoxSpec, argv: list[str]) -> BoxProcess:
        """Start a box whose PID 1 runs ``argv`` (argv[0] an absolute path inside the box).

        Returns once PID 1 exists; a failure before that raises ``BoxStartError``.
        """

    def apply_limits(self, process: BoxProcess, limits: BoxLimits) -> None:
        """Write ``limits`` over those a running box was started with (a box started ahead, taken for a box with
        other limits, before anything runs in it). Raises ``BoxError`` or ``OSError``."""
        raise BoxError(f"the {self.name} backend cannot change a running box's limits")

    async def attach_workspace(self, process: BoxProcess, spec: BoxSpec, lower: Path) -> None:
        """Give a box started with ``spec.workspace_later`` its workspace: the overlay of ``lower`` (the base, now
        built), ``spec.upper_dir`` and ``spec.work_dir`` at ``/workspace``, and ``lower`` read-only at
        ``/run/tkbox/base``. Raises ``BoxStartError``."""
        raise BoxStartError(f"the {self.name} backend cannot start a box ahead of its workspace")


def check_argv(argv: list[str]) -> list[str]:
    """Validate the PID-1 argv every backend receives."""
    if not argv or not isinstance(argv, list) or not all(isinstance(arg, str) for arg in argv):
        raise ValueError("argv must be a non-empty list of strings")
    if not argv[0].startswith("/"):
        raise ValueError("argv[0] must be an absolute path inside the box")
    if any("\0" in arg for arg in argv):
        raise ValueError("argv may not contain NUL")
    return list(argv)
