"""The box backend: starts and stops the isolated environment a job runs in (docs/box-isolation.md).

``backend`` defines the interface re-exported here; ``bwrap`` (default) and ``nslauncher`` (fallback) are the
real backends, ``fake`` runs without isolation for daemon unit tests only, ``probe.default_backend()`` picks
one. ``workspace``, ``etcgen``, ``uids`` and ``cgroups`` prepare what a box is made of; ``layout``, ``launch``,
``handle``, ``seccomp`` and ``syscalls`` are the machinery both real backends share.
"""

from tkbox_daemon.box.backend import (
    BoxBackend,
    BoxError,
    BoxLimits,
    BoxProcess,
    BoxSpec,
    BoxStartError,
)

__all__ = ["BoxBackend", "BoxError", "BoxLimits", "BoxProcess", "BoxSpec", "BoxStartError"]
