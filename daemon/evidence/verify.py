"""Offline verification of a ``.tkb`` bundle against a trust file: ``tkbox verify run.tkb --trust run.trust.json``.

``verify_bundle(path, trust)`` is a pure function of the bundle file and the trust
(no signer, no network) and never raises: whatever the file, it returns a
``VerifyReport`` whose exit code is 0 (VERIFIED), 1 (FAILED) or 2 (unusable trust
file or bundle).  Checks run in the order of ``verify_report.CHECK_NAMES``; the
per-record work (parsing, hashing, Ed25519) runs in a process pool for large bundles
(``verify_pool``) while this process parses the proofs, checks the manifest and the
checkpoint, proves each chunk's inclusion as it comes back, and takes chunks itself when
it has nothing else to do.  That is for ``tkbox.bundle.v1`` bundles, read whole; a
``tkbox.bundle.v2`` bundle (what exporters write) is verified in one pass with bounded
memory by ``verify_stream``, with the same checks and report.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Sequence
from operator import itemgetter

from .bundle import KEY_RECORDS, PROOFS, RUN_RECORDS
from .bundle_stream import BUNDLE_FORMAT_V2
from .trust import Trust, TrustError, load_trust
from .verify_approvals import check_approvals
from .verify_chain import (
    check_inclusion,
    check_run_chain,
    check_run_closed,
    check_signatures,
    positions_of,
    start_inclusion,
)
from .verify_checks import (
    Evidence,
    assurance_of,
    check_bundle_layout,
    check_checkpoint,
    check_keys,
    check_manifest,
    check_policy,
)
from .verify_counts import count_run
from .verify_inclusion import ProofsError, parse_proofs
from .verify_pool import PARALLEL_MIN_RECORDS, RecordCheck
from .verify_records import RecordFacts
from .verify_report import EXIT_UNUSABLE, CheckResult, VerifyReport, conclude, passed, unusable
from .verify_stream import verify_v2
from .verify_stream_layout import peek_format
from .zipread import DEFAULT_LIMITS, ZipLimits, ZipRefused, read_zip

_LINE_NO = itemgetter(0)  # RecordFacts.line_no


def verify_bundle(
    path: str | os.PathLike[str],
    trust: Trust | str | os.PathLike[str],
    *,
    limits: ZipLimits = DEFAULT_LIMITS,
    parallel_min: int = PARALLEL_MIN_RECORDS,
    workers: int | None = None,
) -> VerifyReport:
    """Verify the bundle at ``path`` against ``trust`` (a parsed ``Trust`` or a trust file path).

    ``parallel_min`` is the record count from which signatures are checked in a pool of
    ``workers`` processes (default: the usable CPUs).  Never raises for any input.
    """
    checks: list[CheckResult] = []
    # The cycle collector would rescan the growing record facts many times over (a fifth of
    # this process's time on big bundles); nothing verify builds is cyclic, so pause it.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _verify(path, trust, checks, limits, parallel_min, workers)
    except Exception as exc:  # never crash, whatever the file: an unexpected error makes the bundle unusable
        return unusable(checks, "bundle", f"unexpected error: {type(exc).__name__}: {str(exc)[:200]}")
    finally:
        if collecting:
            gc.enable()


def _verify(path: str | os.PathLike[str], trust_source: Trust | str | os.PathLike[str], checks: list[CheckResult],
            limits: ZipLimits, parallel_min: int, workers: int | None) -> VerifyReport:
    if isinstance(trust_source, Trust):
        trust = trust_source
    else:
        try:
            trust = load_trust(trust_source)
        except TrustError as exc:
            return unusable(checks, "trust", str(exc))
    checks.append(passed("trust", trust.summary()))
    found = peek_format(path)
    if found == BUNDLE_FORMAT_V2 or (found is None and _size_of(path) > limits.max_total_bytes):
        # streamed, in bounded memory (a damaged file too big for v1 gets the streaming reader's reason)
        return verify_v2(path, trust, checks, parallel_min=parallel_min, workers=workers)

    try:
        entries = read_zip(path, limits)
    except ZipRefused as exc:
        return unusable(checks, "bundle", str(exc))
    layout, manifest = check_bundle_layout(entries)
    if manifest is None:
        return unusable(checks, "bundle", layout.detail)
    checks.append(layout)

    evidence = Evidence(trust, entries, manifest)
    pinned = {key.kid: key.public_key for key in trust.record_keys if key.alg in trust.algs}
    # Frames the record files and starts checking their lines (in a pool, for big files).
    record_check = RecordCheck({name: entries[name] for name in (KEY_RECORDS, RUN_RECORDS)}, pinned,
                               parallel_min=parallel_min, workers=workers)
    evidence.file_errors.update(record_check.file_errors)
    framed = {name for name in (KEY_RECORDS, RUN_RECORDS) if name not in record_check.file_errors}
    try:
        # While the pool (if any) checks records: proofs, manifest and checkpoint, then
        # inclusion of each chunk of records as it comes back.
        try:
            evidence.proofs = parse_proofs(entries[PROOFS])
        except ProofsError as exc:
            evidence.proofs_error = str(exc)
        checks.append(check_manifest(evidence))
        checks.append(check_checkpoint(evidence))
        evidence.inclusion = start_inclusion(evidence)
        merged: list[list[RecordFacts]] = [[], []]
        for index, facts in record_check.chunks():
            merged[index].extend(facts)
            if evidence.inclusion is not None:
                evidence.inclusion.add(positions_of(facts))
        key_facts, run_facts = (sorted(facts, key=_LINE_NO) for facts in merged)
        evidence.key_facts = key_facts if KEY_RECORDS in framed else None
        evidence.run_facts = run_facts if RUN_RECORDS in framed else None
        for check in (check_keys, check_signatures, check_run_chain, check_inclusion, check_run_closed, check_policy,
                      check_approvals):
            checks.append(check(evidence))
        return conclude(checks, assurance_of(evidence), count_run(evidence.run_facts))
    finally:
        record_check.close()  # the workers have been exiting meanwhile


def _size_of(path: str | os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


def _parser() -> _Parser:
    parser = _Parser(prog="tkbox verify", description="Verify a .tkb bundle offline against a trust file.")
    parser.add_argument("bundle", help="the .tkb bundle to verify")
    parser.add_argument("--trust", required=True, help="the trust file pinning the signer's keys (run.trust.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser


def verify_main(argv: Sequence[str] | None = None) -> int:
    """``tkbox verify BUNDLE --trust TRUST [--json]``: print the report; return 0 verified, 1 failed, 2 unusable."""
    parser = _parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except _UsageError as exc:
        sys.stderr.write(f"{parser.format_usage()}tkbox verify: error: {exc}\n")
        return EXIT_UNUSABLE
    report = verify_bundle(args.bundle, args.trust)
    if args.json:
        text = json.dumps(report.to_json(), ensure_ascii=False, indent=2) + "\n"
    else:
        text = report.render_text()
    _write_stdout(text)
    return report.exit_code


def _write_stdout(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except UnicodeEncodeError:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    except BrokenPipeError:
        pass


__all__ = ["VerifyReport", "verify_bundle", "verify_main"]


if __name__ == "__main__":
    sys.exit(verify_main())
