"""Export a box's run from the console: the bundle and its trust file written all or nothing (no widgets).

As ``tkbox export`` does: the bundle's bytes stream from the daemon into a temporary file beside the target
(``fsutil.atomic_writer``), checked by the client against the size and SHA-256 the daemon announced; the trust
document the daemon gives goes into its own file; the bundle is put in place only once both are complete, and a
failure leaves neither. A file that exists already is refused unless the operator chose to replace it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tkbox_daemon.fsutil import atomic_writer, write_atomically
from tkbox_daemon.wire import BoxInfo, RunExport

from ..client import DaemonError
from .verify_run import default_trust_path

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def default_bundle_name(box: BoxInfo) -> str:
    """``<box>-<run>.tkb`` (``<box>.tkb`` for a box without a run), with anything but letters, digits, ``.``, ``_``
    and ``-`` in the names made ``-``."""
    parts = [_UNSAFE.sub("-", part).strip(".-") or "box" for part in (box.name, box.run_id or "") if part]
    return "-".join(parts) + ".tkb"


def target_problem(bundle: Path, trust: Path, replace: bool) -> str:
    """What stops writing the two files (``""`` when nothing does): a missing directory, a directory in the way,
    the same path twice, a file that exists when ``replace`` is off."""
    if bundle.name in ("", ".", ".."):
        return "name a bundle file, e.g. ./run.tkb"
    if bundle.resolve() == trust.resolve():
        return f"the bundle and the trust file are both {bundle}"
    for path in (bundle, trust):
        if not path.parent.is_dir():
            return f"{path.parent} is not a directory: create it, or write elsewhere"
        if path.is_dir():
            return f"{path} is a directory: name a file in it, e.g. {path / 'run.tkb'}"
        if os.path.lexists(path) and not replace:
            return f"{path} exists already: choose another path, or tick 'replace'"
    return ""


def trust_file_bytes(document: dict[str, Any]) -> bytes:
    """The trust document as a file: sorted, compact JSON and a newline (``tkbox verify`` checks its schema)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


async def export_to_files(client: Any, box_ref: str, bundle: Path, *, trust: Path | None = None,
                          replace: bool = False, progress: Callable[[int, int], None] | None = None) -> RunExport:
    """Export ``box_ref``'s run into ``bundle`` and its trust file (default beside it); ``DaemonError`` when the
    daemon refuses or breaks off, ``OSError`` when a file cannot be written (neither file is left then)."""
    trust = trust or default_trust_path(bundle)
    problem = target_problem(bundle, trust, replace)
    if problem:
        raise DaemonError("bad_output", problem)
    trust_written = False
    try:
        with atomic_writer(bundle) as handle:
            exported: RunExport = await client.export_bundle(box_ref, handle.write, progress)
            write_atomically(trust, trust_file_bytes(await client.trust()))
            trust_written = True
    except BaseException:
        if trust_written:
            trust.unlink(missing_ok=True)  # the one just written: both files or neither
        raise
    return exported
