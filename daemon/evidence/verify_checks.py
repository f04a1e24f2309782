"""The bundle-level checks of verify: bundle layout, manifest, checkpoint, keys and policy snapshot.

Each check reads the ``Evidence`` gathered so far and returns one ``CheckResult``; the
record-level checks (signatures, run chain, inclusion, run closed) are in
``verify_chain``.  ``Evidence`` is filled in order, so a check may rely on what an
earlier one established (``checkpoint`` is set only when the checkpoint check passed).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from .. import strictjson
from . import note
from .bundle import BUNDLE_FORMAT, CHECKPOINT, KEY_RECORDS, MANIFEST, REQUIRED_ENTRIES, split_policy_name
from .records import SIGNER_RUN_ID
from .trust import Trust
from .verify_inclusion import InclusionRun, ProofsFile
from .verify_records import RecordFacts, canonical_json, data_schema_error
from .verify_report import CheckResult, failed, passed, skipped

MAX_MANIFEST_BYTES = 1 << 20
_SEQ_OF = attrgetter("seq")  # a record parsed when its seq is not None
MANIFEST_FIELDS = frozenset({"format", "run_id", "tree_size", "files"})
_RUN_ID = re.compile(r"[A-Za-z0-9._:/-]{1,128}", re.ASCII)
_FILE_HASH = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)


@dataclass
class Evidence:
    """What verify has read and established about one bundle so far."""

    trust: Trust
    entries: dict[str, bytes]
    manifest: dict[str, Any]
    proofs: ProofsFile | None = None
    proofs_error: str = ""
    file_errors: dict[str, str] = field(default_factory=dict)
    key_facts: list[RecordFacts] | None = None  # None when the file could not be split into lines
    run_facts: list[RecordFacts] | None = None
    checkpoint: note.Checkpoint | None = None  # set once the checkpoint check passed
    log_vkey: str = ""
    # Inclusion, fed with each chunk of checked records as the pool finishes it.
    inclusion: InclusionRun | None = None

    def all_parsed(self) -> bool:
        return all(
            facts is not None and None not in map(_SEQ_OF, facts) for facts in (self.key_facts, self.run_facts)
        )


def check_bundle_layout(entries: dict[str, bytes]) -> tuple[CheckResult, dict[str, Any] | None]:
    """Required entries present, no unknown ones, and a manifest of the right format (else UNUSABLE)."""
    for name in REQUIRED_ENTRIES:
        if name not in entries:
            return failed("bundle", f"required entry {name} is missing (not a tkbox bundle?)"), None
    for name in entries:
        if name not in REQUIRED_ENTRIES and split_policy_name(name) is None:
            return failed("bundle", f"unexpected entry {name!r}"), None
    try:
        manifest = strictjson.loads_object(entries[MANIFEST], max_bytes=MAX_MANIFEST_BYTES, max_depth=3)
    except strictjson.StrictJSONError as exc:
        return failed("bundle", f"manifest.json is not strict JSON: {exc}"), None
    if manifest.get("format") != BUNDLE_FORMAT:
        shown = str(manifest.get("format"))[:40]
        return failed("bundle", f"format {shown!r} is not {BUNDLE_FORMAT} (not a tkbox bundle, or a newer one)"), None
    problem = manifest_schema_error(manifest)
    if problem:
        return failed("bundle", f"manifest.json: {problem}"), None
    total = sum(len(data) for data in entries.values())
    detail = f"{len(entries)} entries, {total} bytes, format {BUNDLE_FORMAT}, run {manifest['run_id']}"
    return passed("bundle", detail), manifest


def manifest_schema_error(manifest: dict[str, Any]) -> str | None:
    if set(manifest) != MANIFEST_FIELDS:
        return "fields are not exactly format, run_id, tree_size, files"
    if not isinstance(manifest["run_id"], str) or not _RUN_ID.fullmatch(manifest["run_id"]):
        return "run_id is not a valid run id"
    if type(manifest["tree_size"]) is not int or manifest["tree_size"] < 1:
        return "tree_size is not a positive integer"
    files = manifest["files"]
    if not isinstance(files, dict) or not all(isinstance(v, str) and _FILE_HASH.fullmatch(v) for v in files.values()):
        return "files is not an object of sha256:<hex> hashes"
    return None


def check_manifest(evidence: Evidence) -> CheckResult:
    """The manifest lists exactly the other entries, each with its SHA-256, in canonical form."""
    listed: dict[str, str] = evidence.manifest["files"]
    present = [name for name in evidence.entries if name != MANIFEST]
    for name in present:
        if name not in listed:
            return failed("manifest", f"{name} is in the bundle but not in the manifest")
    for name in listed:
        if name not in evidence.entries or name == MANIFEST:
            return failed("manifest", f"the manifest lists {name!r}, which is not another entry of the bundle")
    for name in present:
        if "sha256:" + hashlib.sha256(evidence.entries[name]).hexdigest() != listed[name]:
            return failed("manifest", f"the SHA-256 of {name} does not match the manifest")
    if canonical_json(evidence.manifest) != evidence.entries[MANIFEST]:
        return failed("manifest", "manifest.json is not in canonical form (RFC 8785)")
    return passed("manifest", f"lists exactly the {len(present)} other entries, each with a matching SHA-256")


def check_checkpoint(evidence: Evidence) -> CheckResult:
    """The note is signed once by the pinned log key named by its origin, at the bundle's tree size."""
    text = evidence.entries[CHECKPOINT]
    origin = text.split(b"\n", 1)[0][:255].decode("utf-8", "replace")
    try:
        key = evidence.trust.log_key_for(origin)
    except note.NoteError as exc:  # the trust file was checked, so this is unexpected
        return failed("checkpoint", f"pinned log key is unusable: {exc}")
    if key is None:
        return failed("checkpoint", f"no pinned log key is named {origin!r} (the note's origin)")
    try:
        checkpoint = note.open_checkpoint(text, key)
    except note.NoteError as exc:
        return failed("checkpoint", str(exc))
    # C2SP lets verifiers ignore unknown signers; a tkbox v1 checkpoint has none (no witnesses
    # yet), so an extra line can only have been added after signing: refuse it.
    if text.partition(b"\n\n")[2].count(b"\n") != 1:
        return failed("checkpoint", "the note has signature lines besides the log key's (a v1 checkpoint has one)")
    manifest_size = evidence.manifest["tree_size"]
    if checkpoint.size != manifest_size:
        return failed("checkpoint", f"tree size {checkpoint.size} is not the manifest's tree_size {manifest_size}")
    if evidence.proofs is not None and evidence.proofs.tree_size != checkpoint.size:
        return failed("checkpoint", f"tree size {checkpoint.size} is not proofs.json's tree_size {evidence.proofs.tree_size}")
    evidence.checkpoint = checkpoint
    evidence.log_vkey = next(v for v in evidence.trust.log_vkeys if note.VerifierKey.parse(v).name == origin)
    return passed("checkpoint", f"{origin} at tree size {checkpoint.size}, signed once by the pinned log key")


def check_keys(evidence: Evidence) -> CheckResult:
    """keys.jsonl holds the log's signer.epoch records, and they list exactly the pinned record keys."""
    facts = evidence.key_facts
    if facts is None:
        return failed("keys", evidence.file_errors[KEY_RECORDS])
    for fact in facts:
        if not fact.parsed:
            return failed("keys", f"{KEY_RECORDS} line {fact.line_no}: {fact.error}")
        if fact.run_id != SIGNER_RUN_ID or fact.type != "signer.epoch":
            return failed("keys", f"{KEY_RECORDS} line {fact.line_no} is not a signer.epoch record of {SIGNER_RUN_ID}",
                          seq=fact.seq, run_seq=fact.run_seq)
        problem = data_schema_error("signer.epoch", fact.data or {})
        if problem:
            return failed("keys", f"signer.epoch data: {problem}", seq=fact.seq, run_seq=fact.run_seq)
    for earlier, later in zip(facts, facts[1:], strict=False):
        if later.seq is not None and earlier.seq is not None and later.seq <= earlier.seq:
            return failed("keys", "keys.jsonl records are not in increasing seq order", seq=later.seq, run_seq=later.run_seq)
    if len({fact.log_id for fact in facts}) != 1:
        return failed("keys", "keys.jsonl records come from more than one log")
    return _check_epoch_contents(evidence, facts)


def _check_epoch_contents(evidence: Evidence, facts: list[RecordFacts]) -> CheckResult:
    trust = evidence.trust
    pinned = {(key.kid, key.alg, key.public_b64()) for key in trust.record_keys}
    listed: set[tuple[str, str, str]] = set()
    for fact in facts:
        data = fact.data or {}
        where = {"seq": fact.seq, "run_seq": fact.run_seq}
        origin = f"tkbox.local/{fact.log_id}"
        if data["origin"] != origin:
            return failed("keys", f"epoch origin {data['origin'][:80]!r} is not {origin!r}", **where)
        if data["log_vkey"] not in trust.log_vkeys:
            return failed("keys", "the epoch's log_vkey is not a pinned log key", **where)
        if evidence.checkpoint is not None and (data["origin"] != evidence.checkpoint.origin
                                                or data["log_vkey"] != evidence.log_vkey):
            return failed("keys", "the epoch's log key and origin are not the checkpoint's", **where)
        for key in data["keys"]:
            if key["alg"] not in trust.algs:
                return failed("keys", f"the epoch lists a key with alg {key['alg'][:20]!r}, not in the trust algs", **where)
            listed.add((key["kid"], key["alg"], key["public_key"]))
    if listed != pinned:
        extra, missing = len(listed - pinned), len(pinned - listed)
        return failed("keys", f"the epoch record keys are not exactly the pinned ones ({extra} unpinned, {missing} missing)")
    count = len(facts)
    detail = (f"{count} signer.epoch record{'s' * (count != 1)} {'list' if count != 1 else 'lists'} exactly the {len(pinned)} pinned record "
              f"key{'s' * (len(pinned) != 1)} ({', '.join(sorted({alg for _, alg, _ in listed}))}) and the log key")
    return passed("keys", detail)


def check_policy(evidence: Evidence) -> CheckResult:
    """The snapshot entries are named by their SHA-256 and are exactly the one run.registered names."""
    facts = evidence.run_facts
    if not facts or not facts[0].parsed or facts[0].type != "run.registered" or facts[0].data is None:
        return skipped("policy snapshot", "no run.registered record names a policy")
    data = facts[0].data
    if data_schema_error("run.registered", data):
        return skipped("policy snapshot", "run.registered data is malformed")
    wanted = data["policy_hash"].removeprefix("sha256:")
    names = {}
    for name, content in evidence.entries.items():
        digest = split_policy_name(name)
        if digest is None:
            continue
        if hashlib.sha256(content).hexdigest() != digest:
            return failed("policy snapshot", f"{name} is not named by the SHA-256 of its bytes")
        names[digest] = name
    if wanted not in names:
        return failed("policy snapshot", f"policies/{wanted}.json, named by run.registered, is missing",
                      seq=facts[0].seq, run_seq=0)
    if len(names) != 1:
        other = next(name for digest, name in names.items() if digest != wanted)
        return failed("policy snapshot", f"{other} is not the snapshot run.registered names")
    return passed("policy snapshot", f"policies/{wanted}.json is the snapshot of policy {data['policy_name'][:80]!r} "
                  "named by run.registered")


def assurance_of(evidence: Evidence) -> str | None:
    """``dev`` for a same-user signer, ``local`` for a separate-user one (None if not established)."""
    facts = evidence.run_facts
    if not facts or evidence.checkpoint is None or facts[0].data is None:
        return None
    isolation = facts[0].data.get("signer_isolation")
    level = {"same-user": "dev", "separate-user": "local"}.get(str(isolation))
    if level is None:
        return None
    return f"{level}; records ed25519; checkpoint ed25519 ({evidence.checkpoint.origin}); signer {isolation}"
