"""Runs for the tampered-bundle corpus, recorded by the real signer: ``tkbox signer up`` in its own directories, the
calls a box makes over its socket, ``tkbox signer export`` and ``tkbox signer trust``, then ``tkbox signer down``.

The signer's keys are written before it starts, from fixed seeds (``evidence_factory.fixed_keys``), so the trust
file is the same on every run; ids and timestamps are the signer's own, so the records differ each time (the
corpus is generated once and committed). ``SignerLog`` reads the signer's log back for the faults that
``make_corpus`` builds from it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence_factory import LogKeys, fixed_keys

from tkbox_daemon.evidence import bundle, merkle, note
from tkbox_daemon.evidence.records import SIGNER_RUN_ID, Record, parse_record
from tkbox_daemon.signer.client import SignerClient, new_request_id
from tkbox_daemon.signer.keys import KEY_BYTES
from tkbox_daemon.signer.paths import SignerPaths
from tkbox_daemon.signer.store import CHECKPOINT_DIR, LOG_NAME, POLICY_DIR

TKBOX = str(Path(sys.executable).parent / "tkbox")
ALLOWED_COMMANDS = ("git status", "pytest -q", "ls -la", "git diff --stat", "python -m build", "make test",
                    "git log --oneline -5", "ruff check .")


def _seed(label: str) -> bytes:
    return hashlib.sha256(f"tkbox-test-key:{label}".encode()).digest()  # as evidence_factory.seeded_key


def _write_key(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def seed_keys(keys_dir: Path, label: str, *, record_label: str | None = None) -> LogKeys:
    """Write the signer's key files for ``fixed_keys(label, record_label=…)`` into its (empty) keys directory
    before it first starts."""
    keys = fixed_keys(label, record_label=record_label)
    _write_key(keys_dir / "record.key", _seed(f"record:{record_label or label}"))
    _write_key(keys_dir / "log.key", _seed(f"log:{label}"))
    _write_key(keys_dir / "run_token.key", _seed(f"run-token:{label}"))
    _write_key(keys_dir / "salt.key", _seed(f"salt:{label}"))
    _write_key(keys_dir / "log_id", bytes.fromhex(keys.log_id).ljust(KEY_BYTES, b"\0"))
    return keys


class RealSigner:
    """A real signer process in fresh directories, started with ``tkbox signer up``; a context manager."""

    def __init__(self, label: str, *, record_label: str | None = None) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="tkb-corpus-"))
        os.chmod(self.scratch, 0o700)
        self.paths = SignerPaths(self.scratch / "data", self.scratch / "run")
        self.paths.ensure()
        self.keys = seed_keys(self.paths.keys_dir, label, record_label=record_label)
        self.env = {**os.environ, "TKBOX_SIGNER_DATA_DIR": str(self.paths.data_dir),
                    "TKBOX_SIGNER_RUNTIME_DIR": str(self.paths.runtime_dir)}
        self.client: SignerClient | None = None

    def tkbox(self, *args: str) -> str:
        done = subprocess.run([TKBOX, *args], capture_output=True, text=True, env=self.env, timeout=120)
        if done.returncode != 0:
            raise SystemExit(f"tkbox {' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def __enter__(self) -> RealSigner:
        self.tkbox("signer", "up")
        self.client = SignerClient(self.paths.socket)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        self.tkbox("signer", "down")
        shutil.rmtree(self.scratch)

    def call(self, method: str, **fields: Any) -> dict[str, Any]:
        assert self.client is not None
        if method not in ("checkpoint", "trust", "status"):
            fields.setdefault("request_id", new_request_id())
        return self.client.call(method, **fields)

    def register(self, run_id: str) -> dict[str, str]:
        reply = self.call("register_run", run_id=run_id, agent={"name": "corpus-agent", "version": "1"})
        return {"run_id": reply["run_id"], "run_token": reply["run_token"]}

    def decide(self, run: dict[str, str], command: str) -> str:
        reply = self.call("decide", **run, tool="Bash", args={"command": command})
        assert reply["decision"] == "allow", reply  # every exec of the corpus runs is allowed
        return reply["decision_id"]

    def exec_(self, run: dict[str, str], command: str) -> None:
        """One exec as a box makes it: decided, then completed with the guest's exit status."""
        decision_id = self.decide(run, command)
        self.call("complete", **run, decision_id=decision_id, status="ok", exit_code=0, reported_by="guest",
                  output={"stdout": f"output of {command}\n"})

    def standard_runs(self, decisions: int = 8) -> None:
        """``run-a``: ``decisions`` execs and an observation, interleaved with ``run-other``, both closed."""
        run_a, other = self.register("run-a"), self.register("run-other")
        for number in range(decisions):
            self.exec_(run_a, ALLOWED_COMMANDS[number % len(ALLOWED_COMMANDS)])
            if number % 3 == 0:
                self.exec_(other, "echo other")
        self.call("observe", **run_a, source="web", trust="untrusted", value={"page": "https://example.com"})
        self.call("close_run", **run_a, reason="done")
        self.call("close_run", **other, reason="done")

    def log(self) -> SignerLog:
        """Every record in the signer's log so far, and the policy snapshots it keeps."""
        store = self.paths.store_dir
        records = [parse_record(line) for line in (store / LOG_NAME).read_bytes().splitlines(keepends=True)]
        policies = {path.stem: path.read_bytes() for path in (store / POLICY_DIR).glob("*.json")}
        checkpoints = {int(path.stem): path.read_bytes() for path in (store / CHECKPOINT_DIR).glob("*.note")}
        return SignerLog(self.keys, records, policies, checkpoints)


@dataclass
class SignerLog:
    """A real signer's log as the faults use it (the ``evidence_factory.FakeLog`` interface)."""

    keys: LogKeys
    records: list[Record]
    policies: dict[str, bytes] = field(default_factory=dict)
    stored_checkpoints: dict[int, bytes] = field(default_factory=dict)  # the signer's own, by tree size
    siblings: dict[str, SignerLog] = field(default_factory=dict)  # other signers' logs, for faults that splice

    def prefix(self, size: int) -> SignerLog:
        """The log as it was at tree size ``size`` (what an export under that checkpoint covers)."""
        return SignerLog(self.keys, self.records[:size], self.policies, self.stored_checkpoints, self.siblings)

    def run_records(self, run_id: str) -> list[Record]:
        return [record for record in self.records if record.run_id == run_id]

    def key_records(self) -> list[Record]:
        return [r for r in self.records if r.run_id == SIGNER_RUN_ID and r.type == "signer.epoch"]

    def leaves(self, size: int | None = None) -> list[bytes]:
        return [record.leaf() for record in self.records[: size or len(self.records)]]

    def checkpoint(self, size: int | None = None, *, key: Any = None) -> bytes:
        """A checkpoint over the first ``size`` records: the signer's own stored one when it kept one of that
        size and no other key is asked for, else one signed here with ``key`` (or the log key)."""
        leaves = self.leaves(size)
        if key is None and len(leaves) in self.stored_checkpoints:
            return self.stored_checkpoints[len(leaves)]
        body = note.Checkpoint(self.keys.origin, len(leaves), merkle.root(leaves))
        return note.sign_checkpoint(body, self.keys.origin, key or self.keys.log_key)

    def stored_checkpoint_sizes(self) -> list[int]:
        return sorted(self.stored_checkpoints)

    def bundle_entries(self, run_id: str, *, checkpoint_note: bytes | None = None) -> dict[str, bytes]:
        run_records = self.run_records(run_id)
        digest = run_records[0].event["data"]["policy_hash"].removeprefix("sha256:")
        return bundle.bundle_entries(
            run_id=run_id, run_records=run_records, key_records=self.key_records(),
            checkpoint_note=checkpoint_note or self.checkpoint(), tree_leaves=self.leaves(),
            policies={digest: self.policies[digest]},
        )

    def bundle_bytes(self, run_id: str, *, checkpoint_note: bytes | None = None) -> bytes:
        return bundle.zip_bytes(self.bundle_entries(run_id, checkpoint_note=checkpoint_note))
