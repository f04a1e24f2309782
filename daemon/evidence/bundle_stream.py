"""``tkbox.bundle.v2``: a run's bundle of any size, written while the log is read once, in bounded memory.

Layout (``docs/format.md``): the run's records split across ``records/run-NNNNNN.jsonl`` entries of at most
``RUN_ENTRY_BYTES``, the epoch records in ``records/keys.jsonl``, the canonical blocks of the log between the
bundle's records (``tree_gaps``) as 32-byte roots in ``tree/nodes-NNNNNN.bin`` entries of ``NODE_ENTRY_BYTES``
(the last one shorter), ``checkpoint.note``, the policy snapshot, and ``manifest.json`` last.  No per-record
proofs: the records and the block roots, folded in position order, give the checkpoint's root.

``RunBundleWriter`` is fed every record of the log's prefix in ``seq`` order and writes the run's lines as they
come; the block roots go to a scratch file meanwhile and are copied in once the log has been read.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from .. import strictjson
from .bundle import CHECKPOINT, KEY_RECORDS, MANIFEST, policy_entry_name
from .tree_gaps import Frontier, StretchFolder, leaf_of
from .zipwrite import DEFLATED, STORED, ZipStreamWriter

BUNDLE_FORMAT_V2 = "tkbox.bundle.v2"
RUN_ENTRY_BYTES = 4 << 20
"""A run entry's most bytes (about 6,000 records): one entry is held in memory while it is checked, so this bounds
verify's memory."""
NODE_ENTRY_BYTES = 4 << 20
"""A node entry's bytes (131,072 roots), all but the last exactly this."""
NODE_SIZE = 32
RUN_ENTRY = re.compile(r"records/run-([0-9]{6})\.jsonl", re.ASCII)
NODE_ENTRY = re.compile(r"tree/nodes-([0-9]{6})\.bin", re.ASCII)
MAX_ENTRY_INDEX = 999_999
_COPY_CHUNK = 1 << 20


def run_entry_name(index: int) -> str:
    return f"records/run-{index:06d}.jsonl"


def node_entry_name(index: int) -> str:
    return f"tree/nodes-{index:06d}.bin"


class RunBundleWriter:
    """Writes one run's v2 bundle to ``handle`` (a seekable, empty file).

    Call ``add`` with every record of the log from seq 0 on, saying whether it is one of the run's records, one of
    the epoch (key) records, or another record (then only its hash is used), then ``finish`` with the checkpoint
    over exactly those records (``tree_size`` and ``root()`` say what it must sign).
    """

    def __init__(self, handle: BinaryIO, run_id: str, *, scratch_dir: Path | None = None) -> None:
        self.run_id = run_id
        self._zip = ZipStreamWriter(handle)
        self._frontier = Frontier()
        self._stretch = StretchFolder()
        self._nodes = tempfile.TemporaryFile(dir=scratch_dir)  # noqa: SIM115 (closed in finish)
        self._node_bytes = 0
        self._key_lines: list[bytes] = []
        self._run_entries = 0
        self._entry_bytes = 0
        self.run_records = 0

    @property
    def tree_size(self) -> int:
        return self._stretch.end

    def add(self, line: bytes, event_hash: bytes, role: str | None) -> None:
        """The next record of the log: its stored line, the 32 bytes of its ``hash``, and ``"run"``, ``"key"`` or
        None (a record the bundle does not carry)."""
        leaf = leaf_of(event_hash)
        if role is None:
            self._stretch.append(leaf)
            return
        self._close_stretch()
        self._frontier.add(leaf)
        self._stretch.skip()
        if role == "key":
            self._key_lines.append(line)
            return
        if self._entry_bytes and self._entry_bytes + len(line) > RUN_ENTRY_BYTES:
            self._zip.end()
            self._entry_bytes = 0
        if not self._entry_bytes:
            self._zip.begin(run_entry_name(self._run_entries))
            self._run_entries += 1
        self._zip.write(line)
        self._entry_bytes += len(line)
        self.run_records += 1

    def _close_stretch(self) -> None:
        for height, node in self._stretch.take():
            self._frontier.add(node, height)
            self._nodes.write(node)
            self._node_bytes += NODE_SIZE

    def root(self) -> bytes:
        """The tree's root over every record added (the checkpoint must sign this at ``tree_size``)."""
        self._close_stretch()
        return self._frontier.root()

    def finish(self, checkpoint_note: bytes, policies: Mapping[str, bytes]) -> int:
        """Write the rest (keys, tree nodes, checkpoint, policies by hex digest, manifest); returns the zip's size."""
        if not self.run_records:
            raise ValueError("a bundle needs at least one run record")
        self._close_stretch()
        self._zip.end()
        self._zip.add(KEY_RECORDS, b"".join(self._key_lines))
        self._copy_nodes()
        self._zip.add(CHECKPOINT, checkpoint_note)
        for label, content in sorted(policies.items()):
            name = policy_entry_name(content)
            if label.removeprefix("sha256:") != name[len("policies/"):-len(".json")]:
                raise ValueError(f"policy snapshot {label!r} is not the SHA-256 of its bytes")
        for name, content in sorted((policy_entry_name(content), content) for content in policies.values()):
            self._zip.add(name, content)
        files = {entry.name: entry.sha256 for entry in self._zip.entries}
        manifest = {"files": files, "format": BUNDLE_FORMAT_V2, "run_id": self.run_id, "tree_size": self.tree_size}
        self._zip.add(MANIFEST, strictjson.canonical(manifest))
        return self._zip.finish()

    def _copy_nodes(self) -> None:
        self._nodes.seek(0)
        index = 0
        remaining = self._node_bytes
        while remaining:
            size = min(NODE_ENTRY_BYTES, remaining)
            self._zip.begin(node_entry_name(index), STORED)
            left = size
            while left:
                chunk = self._nodes.read(min(_COPY_CHUNK, left))
                if not chunk:
                    raise OSError("the scratch file of tree nodes is shorter than written")
                self._zip.write(chunk)
                left -= len(chunk)
            self._zip.end()
            remaining -= size
            index += 1
        self._nodes.close()

    def close(self) -> None:
        """Drop the scratch file (``finish`` does; call it when giving up)."""
        self._nodes.close()


__all__ = ["BUNDLE_FORMAT_V2", "DEFLATED", "NODE_ENTRY_BYTES", "RUN_ENTRY_BYTES", "RunBundleWriter",
           "node_entry_name", "run_entry_name"]
