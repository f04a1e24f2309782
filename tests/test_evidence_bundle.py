"""Writing bundles: entries and order, canonical JSON, proofs, determinism, atomic writes, argument checks."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from evidence_factory import policy_snapshot, standard_log

from tkbox_daemon import strictjson
from tkbox_daemon.evidence import bundle, merkle
from tkbox_daemon.evidence.verify import verify_bundle
from tkbox_daemon.evidence.zipread import read_zip

LOG, RUN_ID = standard_log()


def write(path: Path, **overrides: object) -> None:
    arguments: dict[str, object] = {
        "run_id": RUN_ID, "run_records": LOG.run_records(RUN_ID), "key_records": LOG.key_records(),
        "checkpoint_note": LOG.checkpoint(), "tree_leaves": LOG.leaves(),
        "policies": dict(LOG.policies),
    }
    arguments.update(overrides)
    bundle.write_bundle(path, **arguments)  # type: ignore[arg-type]


def test_write_bundle_entries_order_and_contents(tmp_path: Path) -> None:
    path = tmp_path / "run.tkb"
    write(path)
    entries = read_zip(path)
    digest = next(iter(LOG.policies))
    assert list(entries) == [bundle.MANIFEST, bundle.CHECKPOINT, bundle.PROOFS, bundle.KEY_RECORDS,
                             bundle.RUN_RECORDS, f"policies/{digest}.json"]
    assert entries[bundle.RUN_RECORDS] == b"".join(record.line for record in LOG.run_records(RUN_ID))
    assert entries[bundle.KEY_RECORDS] == LOG.key_records()[0].line
    manifest = strictjson.loads_object(entries[bundle.MANIFEST], max_bytes=1 << 20)
    assert manifest["format"] == "tkbox.bundle.v1" and manifest["run_id"] == RUN_ID
    assert manifest["tree_size"] == len(LOG.records)
    assert manifest["files"] == {name: "sha256:" + hashlib.sha256(data).hexdigest()
                                 for name, data in entries.items() if name != bundle.MANIFEST}
    for name in (bundle.MANIFEST, bundle.PROOFS):
        assert strictjson.canonical(strictjson.loads(entries[name], max_bytes=1 << 24)) == entries[name]
    assert verify_bundle(path, LOG.keys.trust()).integrity == "VERIFIED"


def test_every_proof_verifies_against_the_tree(tmp_path: Path) -> None:
    path = tmp_path / "run.tkb"
    write(path)
    proofs = strictjson.loads_object(read_zip(path)[bundle.PROOFS], max_bytes=1 << 24)
    root = merkle.root(LOG.leaves())
    wanted = {record.seq for record in [*LOG.key_records(), *LOG.run_records(RUN_ID)]}
    assert {int(seq) for seq in proofs["proofs"]} == wanted
    for seq_text, nodes in proofs["proofs"].items():
        seq = int(seq_text)
        path_nodes = [base64.b64decode(node) for node in nodes]
        assert merkle.verify_inclusion(LOG.records[seq].leaf(), seq, proofs["tree_size"], path_nodes, root)


def test_the_same_inputs_give_the_same_bytes(tmp_path: Path) -> None:
    write(tmp_path / "a.tkb")
    write(tmp_path / "b.tkb")
    assert (tmp_path / "a.tkb").read_bytes() == (tmp_path / "b.tkb").read_bytes()


def test_the_write_is_atomic_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "out" / "run.tkb"
    target.parent.mkdir()
    target.write_bytes(b"old")
    write(target)
    assert target.read_bytes().startswith(b"PK\x03\x04")
    assert [path.name for path in target.parent.iterdir()] == ["run.tkb"]


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "out").mkdir()

    def broken_replace(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(bundle.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write(tmp_path / "out" / "run.tkb")
    assert list((tmp_path / "out").iterdir()) == []


def test_policies_may_be_keyed_with_a_sha256_prefix_or_given_as_bytes(tmp_path: Path) -> None:
    (digest, snapshot), = LOG.policies.items()
    write(tmp_path / "a.tkb", policies={f"sha256:{digest}": snapshot})
    write(tmp_path / "b.tkb", policies=[snapshot])
    assert (tmp_path / "a.tkb").read_bytes() == (tmp_path / "b.tkb").read_bytes()


def test_a_policy_under_the_wrong_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not the SHA-256"):
        write(tmp_path / "run.tkb", policies={"0" * 64: policy_snapshot()})


def test_records_of_another_run_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="belong to run"):
        write(tmp_path / "run.tkb", run_records=LOG.run_records("run-other"))


def test_an_empty_run_or_short_leaves_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        write(tmp_path / "run.tkb", run_records=[])
    with pytest.raises(ValueError, match="beyond the tree"):
        write(tmp_path / "run.tkb", tree_leaves=LOG.leaves()[:5])


def test_proofs_document_matches_the_merkle_module() -> None:
    leaves = [merkle.leaf_hash(bytes([index])) for index in range(37)]
    document = bundle.proofs_document(leaves, [0, 5, 36, 5])
    levels = merkle.tree_levels(leaves)
    assert document["tree_size"] == 37
    assert document["proofs"] == {str(seq): [base64.b64encode(node).decode() for node in
                                             merkle.inclusion_proof(levels, seq)] for seq in (0, 5, 36)}


def test_policy_names() -> None:
    name = bundle.policy_entry_name(b"{}")
    assert name == f"policies/{hashlib.sha256(b'{}').hexdigest()}.json"
    assert bundle.split_policy_name(name) == name[9:-5]
    assert bundle.split_policy_name("policies/abc.json") is None
