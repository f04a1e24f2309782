"""Small file-system helpers shared by the signer, the evidence writers and the daemon."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_writer(target: Path) -> Iterator[BinaryIO]:
    """A binary file whose bytes replace ``target`` all or nothing once the block ends: a temporary file in the
    same directory (0600), fsync, rename, then fsync of the directory so the rename itself survives a crash. An
    exception in the block leaves ``target`` as it was and the temporary file removed."""
    target = Path(target)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    try:
        directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory; the rename is atomic
            os.fsync(directory)
    finally:
        os.close(directory)


def write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` all or nothing (``atomic_writer``)."""
    with atomic_writer(target) as handle:
        handle.write(data)
