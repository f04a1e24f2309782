"""Deleting removed boxes' layers in the background, so ``tkbox rm`` returns before they are gone.

``BoxLayers.remove`` moves a box's directory into ``<layers root>/.trash/`` (a rename); ``sweep`` hands every entry
there to a small pool of threads (``DELETERS`` at once) that delete it. Deleting never follows a symlink
(``shutil.rmtree``), and unlinking a linked base's entries only drops the base's names: the checkout's files stay.
The trash survives a restart: the next daemon sweeps it when it starts (``recovery.py``), so nothing a removal
began is left behind. An entry that cannot be deleted now (a file system error) stays for the next sweep.
"""

from __future__ import annotations

import os
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from .layers import TRASH_DIR

DELETERS = 2  # trees deleted at once: each is I/O bound, and the host has other work


class LayerReaper:
    """Deletes what is in ``<layers_root>/.trash`` (see the module docstring)."""

    def __init__(self, layers_root: Path, *, deleters: int = DELETERS) -> None:
        self.trash = layers_root / TRASH_DIR
        self._pool = ThreadPoolExecutor(max_workers=deleters, thread_name_prefix="tkbox-layers-rm")
        self._lock = threading.Lock()
        self._busy: dict[str, Future[None]] = {}
        self.failures: dict[str, str] = {}  # entry -> why the last attempt failed (kept for the next sweep)

    def sweep(self) -> list[Future[None]]:
        """Start deleting every trash entry not already being deleted; returns the deletions in flight."""
        try:
            names = sorted(os.listdir(self.trash))
        except FileNotFoundError:
            names = []
        with self._lock:
            for name in names:
                if name not in self._busy:
                    self._busy[name] = self._pool.submit(self._delete, name)
            return list(self._busy.values())

    def _delete(self, name: str) -> None:
        path = self.trash / name
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
            self.failures.pop(name, None)
        except OSError as error:
            self.failures[name] = str(error)
        finally:
            with self._lock:
                self._busy.pop(name, None)

    def pending(self) -> list[str]:
        """What is in the trash now (being deleted or waiting)."""
        try:
            return sorted(os.listdir(self.trash))
        except FileNotFoundError:
            return []

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the deletions in flight; True when none is left running."""
        with self._lock:
            running = list(self._busy.values())
        wait(running, timeout)
        with self._lock:
            return not self._busy

    def close(self) -> None:
        """Stop taking work; a deletion under way finishes, the rest waits in the trash for the next daemon."""
        self._pool.shutdown(wait=False, cancel_futures=True)
