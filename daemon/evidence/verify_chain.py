"""The record-level checks of verify: signatures, run chain, inclusion and run closed.

They read the per-record facts produced by ``verify_records`` (in a pool for large
bundles) and the trusted checkpoint; each returns one ``CheckResult`` naming the first
failing record by ``seq`` and ``run_seq``.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter, gt, lt, ne, sub
from typing import Any

from .bundle import KEY_RECORDS, RUN_RECORDS
from .records import SIGNER_RUN_ID, ZERO_HASH
from .verify_checks import Evidence
from .verify_inclusion import InclusionRun
from .verify_records import RecordFacts
from .verify_report import CheckResult, failed, passed, skipped


def check_signatures(evidence: Evidence) -> CheckResult:
    """Every record of both files: strict schema, stored form, event hash, canonical signature by a pinned key."""
    counts = []
    for name, facts in ((KEY_RECORDS, evidence.key_facts), (RUN_RECORDS, evidence.run_facts)):
        if facts is None:
            return failed("signatures", evidence.file_errors[name])
        for fact in facts:
            if fact.error is not None:
                return failed("signatures", f"{name} line {fact.line_no}: {fact.error}", seq=fact.seq, run_seq=fact.run_seq)
        counts.append(len(facts))
    keys, run = counts
    return passed("signatures", f"{keys + run} records ({keys} key, {run} run): strict schema, event hash and "
                  "a signature by a pinned key each")


def check_run_chain(evidence: Evidence) -> CheckResult:
    """One run, complete and in order: run_seq = index, run_prev_hash links, one log, global links where adjacent."""
    if not evidence.all_parsed():
        return skipped("run chain", "not every record parsed (see signatures)")
    facts: list[RecordFacts] = evidence.run_facts or []
    run_id = evidence.manifest["run_id"]
    if run_id == SIGNER_RUN_ID:
        return failed("run chain", f"{SIGNER_RUN_ID} is the signer's own run, not a run to export")
    log_id = facts[0].log_id
    if not _run_links_hold(facts, run_id, log_id):  # else the loop below finds nothing: skip it
        previous: RecordFacts | None = None
        for index, fact in enumerate(facts):
            problem = _run_link_problem(fact, index, previous, run_id, log_id)
            if problem:
                return failed("run chain", problem, seq=fact.seq, run_seq=fact.run_seq)
            previous = fact
    for fact in evidence.key_facts or []:
        if fact.log_id != log_id:
            return failed("run chain", "keys.jsonl is from another log than the run", seq=fact.seq, run_seq=fact.run_seq)
    every = [*(evidence.key_facts or []), *facts]
    if not _global_links_hold(every):
        problem_fact, problem = _global_link_problem(every)
        if problem_fact is not None:
            return failed("run chain", problem, seq=problem_fact.seq, run_seq=problem_fact.run_seq)
    first, last = facts[0], facts[-1]
    return passed("run chain", f"{len(facts)} records of run {run_id}: run_seq 0..{len(facts) - 1}, "
                  f"seq {first.seq}..{last.seq}, linked, one log")


def _run_link_problem(fact: RecordFacts, index: int, previous: RecordFacts | None, run_id: str,
                      log_id: str | None) -> str | None:
    if fact.run_id != run_id:
        return f"run_id {fact.run_id!r} is not the bundle's run {run_id!r}"
    if fact.run_seq != index:
        return f"run_seq is {fact.run_seq}, not {index}: a record is missing, duplicated or out of order"
    if fact.run_prev_hash != (previous.hash if previous else ZERO_HASH):
        return "run_prev_hash does not link to the run's previous record"
    if fact.log_id != log_id:
        return f"the record is from another log ({fact.log_id})"
    if previous is not None and (fact.seq or 0) <= (previous.seq or 0):
        return f"seq {fact.seq} does not increase (previous {previous.seq})"
    if (index == 0) != (fact.type == "run.registered"):
        return "the first record must be run.registered, and only the first"
    return None


def _column(facts: list[RecordFacts], field: str) -> list[Any]:
    return list(map(attrgetter(field), facts))


def _run_links_hold(facts: list[RecordFacts], run_id: str, log_id: str | None) -> bool:
    """True when ``_run_link_problem`` finds nothing for any record: the same conditions, checked a
    column at a time (every record parsed, so every seq is an integer)."""
    count, seqs, types = len(facts), _column(facts, "seq"), _column(facts, "type")
    run_prev_hashes, hashes = _column(facts, "run_prev_hash"), _column(facts, "hash")
    return (
        _column(facts, "run_id").count(run_id) == count
        and _column(facts, "run_seq") == list(range(count))
        and run_prev_hashes[:1] == [ZERO_HASH] and run_prev_hashes[1:] == hashes[:-1]
        and _column(facts, "log_id").count(log_id) == count
        and all(map(lt, seqs, seqs[1:]))
        and types[:1] == ["run.registered"] and types.count("run.registered") == 1
    )


def _global_links_hold(facts: list[RecordFacts]) -> bool:
    """True when ``_global_link_problem`` finds nothing, for records already in increasing seq order
    (the usual case: False otherwise, and the caller looks closer)."""
    seqs, prev_hashes, hashes = _column(facts, "seq"), _column(facts, "prev_hash"), _column(facts, "hash")
    steps = list(map(sub, seqs[1:], seqs))
    if not all(map(gt, steps, repeat(0))):  # not increasing
        return False
    if seqs and (seqs[0] < 0 or (seqs[0] == 0 and prev_hashes[0] != ZERO_HASH)):  # seq 0 not first: look closer
        return False
    breaks = list(compress(range(1, len(seqs)), map(ne, steps, repeat(1))))  # where seqs are not consecutive
    # Within each run of consecutive seqs, each prev_hash is the hash before it.
    return all(prev_hashes[start + 1:end] == hashes[start:end - 1]
               for start, end in zip([0, *breaks], [*breaks, len(seqs)], strict=True))


def _global_link_problem(facts: list[RecordFacts]) -> tuple[RecordFacts | None, str]:
    """Distinct seqs, and prev_hash links wherever the bundle holds two records of consecutive seq."""
    by_seq: dict[int, RecordFacts] = {}
    for fact in facts:
        assert fact.seq is not None
        if fact.seq in by_seq:
            return fact, f"two records claim seq {fact.seq}"
        by_seq[fact.seq] = fact
    for seq in sorted(by_seq):
        fact = by_seq[seq]
        before = by_seq.get(seq - 1)
        if seq == 0 and fact.prev_hash != ZERO_HASH:
            return fact, "the log's first record must have the zero prev_hash"
        if before is not None and fact.prev_hash != before.hash:
            return fact, f"prev_hash does not link to the record at seq {seq - 1}"
    return None, ""


def check_inclusion(evidence: Evidence) -> CheckResult:
    """Every record of both files is in the checkpointed tree (each proof fully checked)."""
    checkpoint = evidence.checkpoint
    if checkpoint is None:
        return skipped("inclusion", "no trusted checkpoint (see checkpoint)")
    if not evidence.all_parsed():
        return skipped("inclusion", "not every record parsed (see signatures)")
    if evidence.proofs is None:
        return failed("inclusion", evidence.proofs_error)
    facts = [*(evidence.key_facts or []), *(evidence.run_facts or [])]
    inclusion = evidence.inclusion
    if inclusion is None:  # not fed while the records were checked
        inclusion = start_inclusion(evidence)
        assert inclusion is not None
        inclusion.add(positions_of(facts))
    problem = inclusion.problem()
    if problem is not None:
        seq, reason = problem
        blamed = next((fact for fact in facts if fact.seq == seq), None) if seq is not None else None
        return failed("inclusion", reason, seq=seq, run_seq=blamed.run_seq if blamed else None)
    keys = len(evidence.key_facts or [])
    return passed("inclusion", f"all {len(facts)} records ({keys} key, {len(facts) - keys} run) are in the "
                  f"checkpointed tree of size {checkpoint.size}")


def start_inclusion(evidence: Evidence) -> InclusionRun | None:
    """An inclusion run against the trusted checkpoint, if there is one and the proofs parsed."""
    if evidence.checkpoint is None or evidence.proofs is None:
        return None
    return InclusionRun(evidence.proofs, evidence.checkpoint.size, evidence.checkpoint.root)


def positions_of(facts: list[RecordFacts]) -> list[tuple[int, str]]:
    """``(seq, hash)`` of the records that parsed."""
    seqs, hashes = _column(facts, "seq"), _column(facts, "hash")
    if None not in seqs and None not in hashes:  # all parsed: zipped at C speed
        return list(zip(seqs, hashes, strict=True))
    return [(fact.seq, fact.hash) for fact in facts if fact.seq is not None and fact.hash is not None]


def check_run_closed(evidence: Evidence) -> CheckResult:
    """The run ends with its only run.closed, and the checkpoint covers every record."""
    checkpoint = evidence.checkpoint
    if not evidence.all_parsed():
        return skipped("run closed", "not every record parsed (see signatures)")
    if checkpoint is None:
        return skipped("run closed", "no trusted checkpoint (see checkpoint)")
    facts = evidence.run_facts or []
    types = _column(facts, "type")
    closes = [len(facts) - 1] if types[-1:] == ["run.closed"] and types.count("run.closed") == 1 else \
        [index for index, kind in enumerate(types) if kind == "run.closed"]
    last = facts[-1]
    if not closes:
        return failed("run closed", "the run has no run.closed record: it is still open, or was cut",
                      seq=last.seq, run_seq=last.run_seq)
    if closes[0] != len(facts) - 1:
        after = facts[closes[0] + 1]
        return failed("run closed", f"a record follows run.closed (run_seq {closes[0]})", seq=after.seq,
                      run_seq=after.run_seq)
    every = [*(evidence.key_facts or []), *facts]
    if max(_column(every, "seq"), default=0) >= checkpoint.size:  # every record parsed: every seq an integer
        for fact in every:
            if (fact.seq or 0) >= checkpoint.size:
                return failed("run closed", f"the checkpoint (tree size {checkpoint.size}) does not cover this record",
                              seq=fact.seq, run_seq=fact.run_seq)
    reason = str((last.data or {}).get("reason", ""))[:80]
    return passed("run closed", f"run.closed at run_seq {last.run_seq} (seq {last.seq}, reason {reason!r}) ends "
                  f"the run; the checkpoint covers it")
