"""Where the daemon keeps its runtime files (API socket, box channel sockets) and state (events, boxes), and its settings."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .box.uids import HOST_UID_REGISTRY
from .limits import APPROVAL_WAIT, BOXES_PER_DAEMON, BOXES_STARTED_AHEAD
from .signer.paths import PathError, SignerPaths, ensure_private_dir
from .wire import daemon_runtime_dir


@dataclass(frozen=True)
class DaemonPaths:
    runtime_dir: Path
    state_dir: Path
    box_state_root: Path = Path(os.environ.get("TKBOX_BOX_STATE_ROOT", "/var/lib/tkbox/boxes"))
    box_runtime_root: Path = Path(os.environ.get("TKBOX_BOX_RUNTIME_ROOT", "/run/tkbox/boxes"))
    uid_registry: Path = HOST_UID_REGISTRY  # every daemon's box uid claims (box/uids.py); tests give their own

    @property
    def api_socket(self) -> Path:
        return self.runtime_dir / "api.sock"

    @property
    def pid_file(self) -> Path:
        return self.runtime_dir / "daemon.pid"

    @property
    def lock_file(self) -> Path:
        return self.runtime_dir / "daemon.lock"

    @property
    def log_file(self) -> Path:
        return self.runtime_dir / "daemon.log"

    @property
    def _daemon_key(self) -> str:
        return hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:12]

    @property
    def layers_root(self) -> Path:
        """Box layers (base, upper, work, /etc, the guest code): on a path every box uid can traverse (0711)."""
        return self.box_state_root / self._daemon_key

    @property
    def channels_root(self) -> Path:
        """Box channel sockets, likewise traversable; each box's own directory is its uid's, 0700."""
        return self.box_runtime_root / self._daemon_key

    def box_runtime(self, box_id: str) -> Path:
        return self.channels_root / box_id

    def box_layers(self, box_id: str) -> Path:
        return self.layers_root / box_id

    def box_state(self, box_id: str) -> Path:
        """The box's private record: events, saved patch and summary (0700, the daemon's own)."""
        return self.state_dir / "boxes" / box_id

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> DaemonPaths:
        env = os.environ if environ is None else environ
        home = Path(env.get("HOME") or os.path.expanduser("~"))
        runtime = Path(daemon_runtime_dir(dict(env)))
        if env.get("TKBOX_DAEMON_STATE_DIR"):
            state = Path(env["TKBOX_DAEMON_STATE_DIR"])
        elif env.get("XDG_STATE_HOME"):
            state = Path(env["XDG_STATE_HOME"]) / "tkbox" / "daemon"
        else:
            state = home / ".local" / "state" / "tkbox" / "daemon"
        return cls(runtime.absolute(), state.absolute())

    def ensure(self) -> None:
        for directory in (self.runtime_dir, self.state_dir, self.state_dir / "boxes"):
            ensure_private_dir(directory)
        for root in (self.layers_root, self.channels_root):
            ensure_traversable_dir(root)


def ensure_traversable_dir(directory: Path) -> None:
    """Create ``directory`` and its missing parents as the daemon's own, mode 0711: a box uid may pass through
    (bubblewrap resolves its bind sources by path) but not list or write.  An existing level must be owned by the
    daemon's user or root and writable by no one else."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o711)
        except FileExistsError:
            pass
        os.chmod(path, 0o711)
    for path in (directory, *directory.parents):
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or info.st_uid not in (0, os.getuid()) or info.st_mode & 0o022:
            raise PathError(f"{path} must be a directory owned by root or the daemon's user and writable by no one "
                            "else (box layers live below it); fix its owner and mode or set TKBOX_BOX_STATE_ROOT")
        if not info.st_mode & 0o001:
            raise PathError(f"{path} must be traversable by box uids (o+x): run chmod o+x {path}, or set "
                            "TKBOX_BOX_STATE_ROOT / TKBOX_BOX_RUNTIME_ROOT to another place")


@dataclass(frozen=True)
class DaemonConfig:
    paths: DaemonPaths
    signer: SignerPaths
    unrecorded: bool = False
    max_boxes: int = BOXES_PER_DAEMON.default
    pool_size: int = BOXES_STARTED_AHEAD.default  # boxes started ahead (boxes/pool.py; tkbox daemon --start-ahead)
    backend: str = "auto"
    approval_wait: float = APPROVAL_WAIT.default  # seconds an action waits for a person (tkbox daemon --approval-wait)
    egress_block: tuple[str, ...] = ()  # networks no box reaches, beyond the special ranges (--egress-block)
    allowed_uids: frozenset[int] = field(default_factory=lambda: frozenset({os.getuid(), 0}))
