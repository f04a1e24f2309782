"""Where the daemon keeps its runtime files (API socket, box channel sockets) and state (events, boxes), and its settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .limits import BOXES_PER_DAEMON
from .signer.paths import SignerPaths, ensure_private_dir
from .wire import daemon_runtime_dir


@dataclass(frozen=True)
class DaemonPaths:
    runtime_dir: Path
    state_dir: Path

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

    def box_runtime(self, box_id: str) -> Path:
        return self.runtime_dir / "boxes" / box_id

    def box_state(self, box_id: str) -> Path:
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
        for directory in (self.runtime_dir, self.runtime_dir / "boxes", self.state_dir, self.state_dir / "boxes"):
            ensure_private_dir(directory)


@dataclass(frozen=True)
class DaemonConfig:
    paths: DaemonPaths
    signer: SignerPaths
    unrecorded: bool = False
    max_boxes: int = BOXES_PER_DAEMON.default
    backend: str = "auto"
    allowed_uids: frozenset[int] = field(default_factory=lambda: frozenset({os.getuid(), 0}))
