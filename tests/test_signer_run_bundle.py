"""The signer's exporter (``run_bundle``) reads its log from disk once and writes the run's v2 bundle: the same bytes
as the reference writer fed the records themselves, a bundle that verifies, and clear refusals."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from bundle_v2_factory import fake_log_v2
from evidence_factory import FakeLog, fixed_keys, standard_log

from tkbox_daemon.evidence.verify import verify_bundle
from tkbox_daemon.signer import store as store_module
from tkbox_daemon.signer.run_bundle import ExportError, signer_of, write_closed_run, write_run


def _store(tmp_path: Path, log: FakeLog, size: int | None = None) -> Path:
    store = tmp_path / "store"
    (store / store_module.POLICY_DIR).mkdir(parents=True)
    (store / store_module.LOG_NAME).write_bytes(b"".join(record.line for record in log.records[: size or None]))
    for digest, snapshot in log.policies.items():
        (store / store_module.POLICY_DIR / f"{digest}.json").write_bytes(snapshot)
    return store


def test_the_export_is_the_reference_bundle_and_verifies(tmp_path) -> None:
    log, run_id = standard_log(decisions=40)
    store = _store(tmp_path, log)
    handle = io.BytesIO()
    summary = write_run(store, run_id, len(log.records), handle, log.checkpoint())
    assert handle.getvalue() == fake_log_v2(log, run_id)
    assert summary.records == len(log.run_records(run_id)) and summary.size == len(handle.getvalue())
    path = tmp_path / "run.tkb"
    path.write_bytes(handle.getvalue())
    assert verify_bundle(path, log.keys.trust()).verified


def test_a_checkpoint_signed_at_the_runs_end_gives_the_same_bundle_every_time(tmp_path) -> None:
    log, run_id = standard_log()
    closed = log.run_records(run_id)[-1].seq
    store = _store(tmp_path, log)
    first, second = io.BytesIO(), io.BytesIO()
    write_closed_run(store, run_id, closed, log.keys.origin, log.keys.log_key, first)
    write_closed_run(store, run_id, closed, log.keys.origin, log.keys.log_key, second)
    assert first.getvalue() == second.getvalue() == fake_log_v2(log, run_id, closed + 1)


@pytest.mark.parametrize(("case", "wanted"), [
    ("open", "is still open"), ("unknown", "no run 'run-nope'"), ("short", "shorter than its checkpoint"),
    ("other root", "does not match the log"),
])
def test_exports_that_cannot_be_made_say_why(tmp_path, case: str, wanted: str) -> None:
    log = FakeLog(fixed_keys("main"))
    log.add_run("run-a", decisions=3, close=case != "open")
    store = _store(tmp_path, log, len(log.records) - 1 if case == "short" else None)
    run_id = "run-nope" if case == "unknown" else "run-a"
    note = log.checkpoint(len(log.records) - 1) if case == "other root" else log.checkpoint()
    with pytest.raises(ExportError, match=wanted):
        write_run(store, run_id, len(log.records), io.BytesIO(), note)


def test_a_signing_function_signs_the_root_it_is_given(tmp_path) -> None:
    log, run_id = standard_log()
    sign = signer_of(log.keys.origin, log.keys.log_key)
    handle = io.BytesIO()
    write_run(_store(tmp_path, log), run_id, len(log.records), handle, sign)
    assert handle.getvalue() == fake_log_v2(log, run_id)
