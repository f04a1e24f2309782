"""Where the signer keeps its data (keys, store) and its runtime files (socket, pid, log), and their modes.

Data: ``$TKBOX_SIGNER_DATA_DIR``, else ``$XDG_DATA_HOME/tkbox/signer``, else ``~/.local/share/tkbox/signer``.
Runtime: ``$TKBOX_SIGNER_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/tkbox-signer``, else ``/tmp/tkbox-signer-<uid>``.
Both are created 0700 and must be owned by the signer's user; a directory that is
group/world-accessible or owned by someone else is refused, not repaired silently.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


class PathError(RuntimeError):
    """A signer directory is unsafe or cannot be created; the message says what to fix."""


@dataclass(frozen=True)
class SignerPaths:
    data_dir: Path
    runtime_dir: Path

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "store"

    @property
    def socket(self) -> Path:
        return self.runtime_dir / "signer.sock"

    @property
    def pid_file(self) -> Path:
        return self.runtime_dir / "signer.pid"

    @property
    def lock_file(self) -> Path:
        return self.runtime_dir / "signer.lock"

    @property
    def log_file(self) -> Path:
        return self.runtime_dir / "signer.log"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> SignerPaths:
        env = os.environ if environ is None else environ
        uid = os.getuid()
        if env.get("TKBOX_SIGNER_DATA_DIR"):
            data = Path(env["TKBOX_SIGNER_DATA_DIR"])
        elif env.get("XDG_DATA_HOME"):
            data = Path(env["XDG_DATA_HOME"]) / "tkbox" / "signer"
        else:
            data = Path(env.get("HOME") or os.path.expanduser("~")) / ".local" / "share" / "tkbox" / "signer"
        if env.get("TKBOX_SIGNER_RUNTIME_DIR"):
            runtime = Path(env["TKBOX_SIGNER_RUNTIME_DIR"])
        elif env.get("XDG_RUNTIME_DIR"):
            runtime = Path(env["XDG_RUNTIME_DIR"]) / "tkbox-signer"
        else:
            runtime = Path(f"/tmp/tkbox-signer-{uid}")
        return cls(data.absolute(), runtime.absolute())

    def ensure(self) -> None:
        """Create the directories 0700 and check that they are private to this user."""
        for directory in (self.data_dir, self.keys_dir, self.store_dir, self.runtime_dir):
            ensure_private_dir(directory)


def ensure_private_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(directory)
    except OSError as exc:
        raise PathError(f"cannot create {directory}: {exc.strerror}; choose another directory or fix its parent") from None
    if not stat.S_ISDIR(info.st_mode):
        raise PathError(f"{directory} is not a directory (a symlink or file is in the way); remove it")
    if info.st_uid != os.getuid():
        raise PathError(f"{directory} is owned by uid {info.st_uid}, not {os.getuid()}; the signer's directories must be its own")
    if info.st_mode & 0o077:
        raise PathError(
            f"{directory} has mode {stat.S_IMODE(info.st_mode):o}; the signer needs 0700: run chmod 700 {directory}"
        )
