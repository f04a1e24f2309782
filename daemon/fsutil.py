"""Small file-system helpers shared by the signer, the evidence writers and the daemon."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` all or nothing: a temporary file in the same directory (0600), fsync, rename,
    then fsync the directory so the rename itself survives a crash."""
    target = Path(target)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    try:
        directory = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory; the rename is atomic
            os.fsync(directory)
    finally:
        os.close(directory)
