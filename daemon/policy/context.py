"""PolicyContext: the facts about the running signer that a pack's patterns protect.

Packs name them as placeholders (``{signer_data_dir}``, ``{signer_runtime_dir}``, ``{signer_pid}``,
``{extra_protected_paths}``); the pack compiler substitutes them, ``re.escape``d, at load time.
The signer builds its own with ``signer_context(paths, its pid)``.  Without a context, ``default_context()``
takes the directories the signer would use (``SignerPaths.from_env``) and no pid; ``tkbox policy check`` adds the
pid of the signer running there, if any, so that its preview is the signer's own policy (same hash).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..signer.paths import SignerPaths
from .errors import PolicyError


@dataclass(frozen=True)
class PolicyContext:
    """Where the signer keeps its files and which process it is."""

    signer_data_dir: str
    signer_runtime_dir: str
    signer_pid: int | None
    extra_protected_paths: tuple[str, ...] = ()


def signer_context(paths: SignerPaths, pid: int | None) -> PolicyContext:
    """The context of the signer with these directories and pid (None: unknown; rules naming it are left out)."""
    return PolicyContext(signer_data_dir=os.path.abspath(paths.data_dir),
                         signer_runtime_dir=os.path.abspath(paths.runtime_dir), signer_pid=pid)


def default_context() -> PolicyContext:
    """This user's signer directories (``SignerPaths.from_env``, as the signer finds them), with no pid."""
    return signer_context(SignerPaths.from_env(), None)


def _checked_dir(name: str, value: object) -> str:
    """An absolute path other than / (a pattern built from "/" or "" would match every command)."""
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value:
        raise PolicyError(f"must be an absolute path, got {value!r}", key=f"PolicyContext.{name}",
                          action="pass the signer's real directory")
    stripped = value.rstrip("/")
    if not stripped:
        raise PolicyError("must not be /", key=f"PolicyContext.{name}",
                          action="pass the signer's own directory, not the file system root")
    return stripped


def checked_context(context: PolicyContext) -> PolicyContext:
    """Validate a context and return it with trailing slashes removed; PolicyError names the bad field."""
    if not isinstance(context, PolicyContext):
        raise PolicyError(f"expected a PolicyContext, got {type(context).__name__}", key="context",
                          action="build one with PolicyContext(signer_data_dir=..., ...)")
    pid = context.signer_pid
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
        raise PolicyError(f"must be a positive int or None, got {pid!r}", key="PolicyContext.signer_pid",
                          action="pass the signer's process id, or None if it is not known")
    extra = context.extra_protected_paths
    if not isinstance(extra, tuple):
        raise PolicyError("must be a tuple of absolute paths", key="PolicyContext.extra_protected_paths",
                          action="pass a tuple such as ('/srv/keys',)")
    return PolicyContext(
        signer_data_dir=_checked_dir("signer_data_dir", context.signer_data_dir),
        signer_runtime_dir=_checked_dir("signer_runtime_dir", context.signer_runtime_dir),
        signer_pid=pid,
        extra_protected_paths=tuple(_checked_dir("extra_protected_paths", p) for p in extra),
    )
