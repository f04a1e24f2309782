"""Writing ``.tkb`` bundles (``tkbox.bundle.v1``): a run's records, the epoch records, a checkpoint and proofs.

The zip is canonical (see ``zipread``): entries in a fixed order, fixed timestamps and
attributes, raw deflate, no extra fields, so the same inputs always give the same bytes.
JSON entries are RFC 8785 canonical.  ``write_bundle`` writes atomically (temporary
file, fsync, rename); ``bundle_entries`` and ``zip_bytes`` are the pure parts, used by
tests to build (and tamper with) bundles in memory.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import strictjson
from ..fsutil import write_atomically
from . import merkle
from .records import Record
from .zipwrite import DEFLATED, STORED, ZipStreamWriter

BUNDLE_FORMAT = "tkbox.bundle.v1"
MANIFEST = "manifest.json"
RUN_RECORDS = "records/run.jsonl"
KEY_RECORDS = "records/keys.jsonl"
CHECKPOINT = "checkpoint.note"
PROOFS = "proofs.json"
POLICY_DIR = "policies/"
REQUIRED_ENTRIES = (MANIFEST, CHECKPOINT, PROOFS, KEY_RECORDS, RUN_RECORDS)
POLICY_NAME = re.compile(r"policies/([0-9a-f]{64})\.json", re.ASCII)


def policy_entry_name(content: bytes) -> str:
    """``policies/<sha256 hex of content>.json``."""
    return f"{POLICY_DIR}{hashlib.sha256(content).hexdigest()}.json"


def proofs_document(tree_leaves: Sequence[bytes], seqs: Iterable[int]) -> dict[str, Any]:
    """``{"tree_size":N,"proofs":{"<seq>":[b64 node,…]}}``: the tree's levels are built once, each proof is O(log N)."""
    levels = merkle.tree_levels(tree_leaves)
    encoded: dict[bytes, str] = {}

    def b64(node: bytes) -> str:
        text = encoded.get(node)
        if text is None:
            text = encoded[node] = base64.b64encode(node).decode()
        return text

    proofs = {str(seq): [b64(node) for node in merkle.inclusion_proof(levels, seq)] for seq in sorted(set(seqs))}
    return {"tree_size": len(tree_leaves), "proofs": proofs}


def manifest_document(run_id: str, tree_size: int, files: Mapping[str, bytes]) -> dict[str, Any]:
    """The manifest listing every other entry with its SHA-256."""
    return {
        "format": BUNDLE_FORMAT,
        "run_id": run_id,
        "tree_size": tree_size,
        "files": {name: "sha256:" + hashlib.sha256(data).hexdigest() for name, data in files.items()},
    }


def bundle_entries(
    *,
    run_id: str,
    run_records: Sequence[Record],
    key_records: Sequence[Record],
    checkpoint_note: bytes,
    tree_leaves: Sequence[bytes],
    policies: Mapping[str, bytes] | Iterable[bytes],
) -> dict[str, bytes]:
    """The bundle's entries in their canonical order, manifest first."""
    if not run_records:
        raise ValueError("a bundle needs at least one run record")
    if any(record.run_id != run_id for record in run_records):
        raise ValueError(f"every run record must belong to run {run_id!r}")
    if any(record.seq >= len(tree_leaves) for record in [*run_records, *key_records]):
        raise ValueError("a record lies beyond the tree the leaves describe")
    files: dict[str, bytes] = {
        CHECKPOINT: checkpoint_note,
        PROOFS: strictjson.canonical(
            proofs_document(tree_leaves, [record.seq for record in [*key_records, *run_records]])
        ),
        KEY_RECORDS: b"".join(record.line for record in key_records),
        RUN_RECORDS: b"".join(record.line for record in run_records),
    }
    for name, content in sorted(_policy_entries(policies).items()):
        files[name] = content
    manifest = strictjson.canonical(manifest_document(run_id, len(tree_leaves), files))
    return {MANIFEST: manifest, **files}


def _policy_entries(policies: Mapping[str, bytes] | Iterable[bytes]) -> dict[str, bytes]:
    entries: dict[str, bytes] = {}
    if isinstance(policies, Mapping):
        for label, content in policies.items():
            name = policy_entry_name(content)
            if label.removeprefix("sha256:") != name[len(POLICY_DIR):-len(".json")]:
                raise ValueError(f"policy snapshot {label!r} is not the SHA-256 of its bytes")
            entries[name] = content
    else:
        entries = {policy_entry_name(content): content for content in policies}
    return entries


def write_bundle(
    path: str | os.PathLike[str],
    *,
    run_id: str,
    run_records: Sequence[Record],
    key_records: Sequence[Record],
    checkpoint_note: bytes,
    tree_leaves: Sequence[bytes],
    policies: Mapping[str, bytes] | Iterable[bytes],
) -> None:
    """Write the run's bundle to ``path`` atomically.

    ``tree_leaves`` are the leaf hashes of the whole log up to the checkpoint's tree size;
    ``policies`` maps each snapshot's hex SHA-256 (``sha256:`` prefix allowed) to its bytes,
    or is just the snapshots' bytes.
    """
    entries = bundle_entries(
        run_id=run_id, run_records=run_records, key_records=key_records, checkpoint_note=checkpoint_note,
        tree_leaves=tree_leaves, policies=policies,
    )
    write_atomically(Path(path), zip_bytes(entries))


def zip_bytes(entries: Mapping[str, bytes]) -> bytes:
    """A canonical zip of ``entries`` in the given order (raw deflate at level 9 unless stored is smaller)."""
    handle = io.BytesIO()
    writer = ZipStreamWriter(handle, level=9)
    for name, content in entries.items():
        deflated = zlib.compressobj(9, zlib.DEFLATED, -15)
        smaller = len(deflated.compress(content) + deflated.flush()) < len(content)
        writer.add(name, content, DEFLATED if smaller else STORED)
    writer.finish()
    return handle.getvalue()


def split_policy_name(name: str) -> str | None:
    """The hex digest in ``policies/<hex>.json``, or None for any other name."""
    match = POLICY_NAME.fullmatch(name)
    return match.group(1) if match else None
