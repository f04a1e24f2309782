"""``tkbox signer export`` and ``tkbox signer trust``: a closed run as a bundle, and the file that pins the keys.

Export reads the store directly (the signer may be running or not): only records
covered by the newest checkpoint are read, so a concurrent writer cannot tear them.
The daemon exports through the signer's socket instead (``exports.py``); both build
the bundle with ``run_bundle.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..evidence import trust as trust_file
from ..fsutil import atomic_writer
from . import store as store_module
from .keys import load_or_create
from .paths import SignerPaths
from .run_bundle import ExportError, write_run

__all__ = ["ExportError", "export_run", "write_trust"]


def _newest_checkpoint(store_dir: Path) -> tuple[int, bytes]:
    directory = store_dir / store_module.CHECKPOINT_DIR
    sizes = sorted((int(p.stem) for p in directory.glob("*.note") if p.stem.isdigit()), reverse=True)
    if not sizes:
        raise ExportError("the signer has no checkpoint yet; close the run (close_run makes one)")
    return sizes[0], (directory / f"{sizes[0]}.note").read_bytes()


def export_run(paths: SignerPaths, run_id: str, output: Path) -> dict[str, Any]:
    store_dir = paths.store_dir
    tree_size, note_bytes = _newest_checkpoint(store_dir)
    with atomic_writer(Path(output)) as handle:  # written as the log is read: memory does not grow with it
        summary = write_run(store_dir, run_id, tree_size, handle, note_bytes)
    return {"run_id": run_id, "records": summary.records, "tree_size": tree_size, "bundle": str(output)}


def write_trust(paths: SignerPaths, output: Path) -> dict[str, Any]:
    paths.ensure()
    keys = load_or_create(paths.keys_dir)
    document = trust_file.build_trust(record_key=keys.record_key.public_key(), log_vkey=keys.log_vkey)
    trust_file.write_trust(output, document)
    return document
