"""verify's record fast paths give exactly the verdicts of the plain checks they stand in for.

- The per-line fast path (``verify_lines``) against ``verify_records.check_line``, on randomly
  damaged lines and on lines a key holder could sign.
- Run chain and run closed: their column-at-a-time checks against the per-record loops.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import random

from evidence_factory import FakeLog, fixed_keys
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tkbox_daemon.evidence import records, verify_chain, verify_lines
from tkbox_daemon.evidence.note import Checkpoint
from tkbox_daemon.evidence.records import ZERO_HASH
from tkbox_daemon.evidence.signature_check import RecordKey
from tkbox_daemon.evidence.verify_checks import Evidence
from tkbox_daemon.evidence.verify_lines import check_chunk
from tkbox_daemon.evidence.verify_records import RecordFacts, check_line
from tkbox_daemon.evidence.verify_report import CheckResult, failed, passed, skipped


def b64(node: bytes) -> str:
    return base64.b64encode(node).decode()


# ---- the per-line fast path --------------------------------------------------------------------------------
LOG = FakeLog(fixed_keys("speed"))
LOG.add_run("run-s", decisions=30)
PINNED = {LOG.keys.trust().record_keys[0].kid: LOG.keys.trust().record_keys[0].public_key}
public_key = RecordKey


OTHER_KEY = fixed_keys("other").record_key


def forged_line(data_text: str = "{}", *, key: object = None, padded: bool = False, **fields: object) -> bytes:
    """A line signed by the pinned key (as a key holder could sign anything) whose event ``data`` is
    ``data_text`` (compact JSON that only the strict parser may refuse) and with other ``fields``
    (None: left out), hashed over its compact bytes; or signed by another ``key``, or with a
    padding bit set in the signature's base64 (``padded``)."""
    event = {**LOG.records[5].event, "data": "\0", **fields}
    event = {name: value for name, value in event.items() if value is not None}
    event_text = json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False).replace('"\\u0000"', data_text)
    event_hash = "sha256:" + hashlib.sha256(event_text.encode()).hexdigest()
    signer = key or LOG.keys.record_key
    kid = records.key_id(signer.public_key())  # type: ignore[attr-defined]
    sig = b64(signer.sign(records.signed_header(event, event_hash, kid)))  # type: ignore[attr-defined]
    if padded:  # the same 64 bytes, in a non-canonical base64
        sig = sig[:85] + chr(ord(sig[85]) + 1) + "=="
    return f'{{"alg":"ed25519","event":{event_text},"hash":"{event_hash}","kid":"{kid}","sig":"{sig}","v":1}}'.encode()


# Lines a key holder could sign, each with what check_line says of it: None (it passes) or part of its error.
FORGED = [
    (forged_line('{"x":' + "[" * 40 + "]" * 40 + "}"), "nesting deeper than 32"),
    (forged_line('{"x":' + "[" * 29 + "]" * 29 + "}"), None),  # depth 32
    (forged_line('{"x":' + "[" * 30 + "]" * 30 + "}"), "nesting deeper than 32"),  # depth 33
    (forged_line('{"x":[' + "[]," * 20 + "[]]}"), None),  # 44 brackets, not deep
    (forged_line('{"x":12345678901234567}'), "more than 16 digits"),
    (forged_line('{"x":[9007199254740993]}'), "beyond"),
    (forged_line('{"x":-9007199254740993}'), "beyond"),
    (forged_line('{"x":"a\\u0001b"}'), None),  # escapes
    (forged_line('{"x":"a\\nb"}'), None),
    (forged_line('{"x":"\\ud800"}'), "lone surrogate"),
    (forged_line('{"x":"é"}'), None),  # not ASCII: hashed over other bytes than stored
    (forged_line('{"x":1,"x":2}'), "not in stored form"),  # a duplicate key
    (forged_line('{"b":1,"a":2}'), "not in stored form"),  # keys out of order
    (forged_line('{"a":{"d":1,"c":2}}'), "not in stored form"),
    (forged_line(), None),
    (forged_line('{"a":{"id":"x"},"z":1}'), None), (forged_line('{"b":1,"id":"' + "0" * 32 + '"}'), None),  # "id" in data
    (forged_line("[]"), "'data' is invalid"), (forged_line('"x"'), "'data' is invalid"),
    (forged_line("{}", data=None), "closed set"), (forged_line(extra="x"), "closed set"),
    (forged_line(ab=1), "closed set"), (forged_line(zzz=1), "closed set"), (forged_line(identity=None), "closed set"),
    (forged_line(request_id="req-1"), None), (forged_line(request_id="bad id"), "'request_id' is invalid"),
    (forged_line(id="A" * 32), "'id' is invalid"), (forged_line(log_id=7), "'log_id' is invalid"),
    (forged_line(log_id="x" * 32), "'log_id' is invalid"),
    (forged_line(identity="uid:x"), "'identity' is invalid"), (forged_line(run_id="run a"), "'run_id' is invalid"),
    (forged_line(prev_hash="sha256:" + "g" * 64), "'prev_hash' is invalid"),
    (forged_line(run_prev_hash="sha256:"), "'run_prev_hash' is invalid"),
    (forged_line(seq=-1), "'seq' is invalid"), (forged_line(run_seq=True), "'run_seq' is invalid"),
    (forged_line(seq=12345678901234), None), (forged_line(run_seq=1234567890123456), None),  # 14 and 16 digits
    (forged_line(ts="2026-01-01"), "'ts' is invalid"), (forged_line(schema="tkbox.event.v2"), "'schema' is invalid"),
    (forged_line(type="Policy.Decision"), "'type' is invalid"), (forged_line(type="no.such.type"), "unknown record type"),
    (forged_line('{"reason":"done"}', type="run.closed"), "run.closed data"),
    (forged_line(padded=True), "not canonical base64"), (forged_line(key=OTHER_KEY), "not pinned"),
]
LINES = [record.line.rstrip(b"\n") for record in LOG.records] + [line for line, _ in FORGED]
EDITS = [b"", b"0", b"9", b" ", b"\\", b"\\u00e9", b"\xc3\xa9", b"\xff", b"[", b"{", b"}", b'"', b",", b":",
         b"1234567890123456", b"-", b"A", b"=", b"\n"]


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), edits=st.integers(1, 4))
def test_the_fast_line_path_gives_the_facts_of_check_line(seed: int, edits: int) -> None:
    rng = random.Random(seed)
    lines = rng.sample(LINES, k=6)
    for _ in range(edits):
        index = rng.randrange(len(lines))
        line = lines[index]
        at = rng.randrange(len(line))
        cut = rng.choice([0, 1, 1, 2, 16])
        lines[index] = line[:at] + rng.choice(EDITS) + line[at + cut:]
    data = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
    keys = {kid: public_key(raw) for kid, raw in PINNED.items()}
    expected = [check_line(line, number, keys) if line else RecordFacts(number, error="the line is empty")
                for number, line in enumerate(data[:-1].split(b"\n"), 7)]
    assert check_chunk(data, 7, PINNED) == expected


def test_the_fast_line_path_takes_good_lines_and_leaves_bad_ones() -> None:
    keys = {kid: public_key(raw) for kid, raw in PINNED.items()}
    good = LINES[:-len(FORGED)]
    facts = check_chunk(b"".join(line + b"\n" for line in good), 1, PINNED)
    assert facts == [check_line(line, number, keys) for number, line in enumerate(good, 1)]
    assert all(fact.error is None for fact in facts)
    assert verify_lines._REST is not None  # the fast path is on
    for line, error in FORGED:  # alone, and after good lines
        fact = check_line(line, 3, keys)
        assert (fact.error is None) if error is None else (error in str(fact.error)), (error, fact.error)
        assert check_chunk(line + b"\n", 3, PINNED) == [fact]
        assert check_chunk(b"".join(item + b"\n" for item in [*good[:2], line]), 1, PINNED)[2] == fact


# ---- the record-level checks' column-at-a-time fast paths ----------------------------------------------------
def reference_run_chain(evidence: Evidence) -> CheckResult:
    """check_run_chain as it was: a loop over the records."""
    if not all(fact.parsed for facts in (evidence.key_facts, evidence.run_facts) for fact in facts or [None]):
        return skipped("run chain", "not every record parsed (see signatures)")
    facts = evidence.run_facts or []
    run_id = evidence.manifest["run_id"]
    log_id = facts[0].log_id
    previous = None
    for index, fact in enumerate(facts):
        problem = verify_chain._run_link_problem(fact, index, previous, run_id, log_id)
        if problem:
            return failed("run chain", problem, seq=fact.seq, run_seq=fact.run_seq)
        previous = fact
    for fact in evidence.key_facts or []:
        if fact.log_id != log_id:
            return failed("run chain", "keys.jsonl is from another log than the run", seq=fact.seq, run_seq=fact.run_seq)
    problem_fact, problem = verify_chain._global_link_problem([*(evidence.key_facts or []), *facts])
    if problem_fact is not None:
        return failed("run chain", problem, seq=problem_fact.seq, run_seq=problem_fact.run_seq)
    first, last = facts[0], facts[-1]
    return passed("run chain", f"{len(facts)} records of run {run_id}: run_seq 0..{len(facts) - 1}, "
                  f"seq {first.seq}..{last.seq}, linked, one log")


def reference_run_closed(evidence: Evidence) -> CheckResult:
    """check_run_closed as it was: a loop over the records."""
    checkpoint = evidence.checkpoint
    assert checkpoint is not None
    if not all(fact.parsed for facts in (evidence.key_facts, evidence.run_facts) for fact in facts or [None]):
        return skipped("run closed", "not every record parsed (see signatures)")
    facts = evidence.run_facts or []
    closes = [index for index, fact in enumerate(facts) if fact.type == "run.closed"]
    last = facts[-1]
    if not closes:
        return failed("run closed", "the run has no run.closed record: it is still open, or was cut",
                      seq=last.seq, run_seq=last.run_seq)
    if closes[0] != len(facts) - 1:
        after = facts[closes[0] + 1]
        return failed("run closed", f"a record follows run.closed (run_seq {closes[0]})", seq=after.seq,
                      run_seq=after.run_seq)
    for fact in [*(evidence.key_facts or []), *facts]:
        if (fact.seq or 0) >= checkpoint.size:
            return failed("run closed", f"the checkpoint (tree size {checkpoint.size}) does not cover this record",
                          seq=fact.seq, run_seq=fact.run_seq)
    reason = str((last.data or {}).get("reason", ""))[:80]
    return passed("run closed", f"run.closed at run_seq {last.run_seq} (seq {last.seq}, reason {reason!r}) ends "
                  f"the run; the checkpoint covers it")


FIELDS = ["seq", "run_seq", "run_id", "log_id", "prev_hash", "run_prev_hash", "hash", "type"]


def chain(rng: random.Random, count: int, keys: int, unlinked: float = 0.1) -> tuple[list[RecordFacts], list[RecordFacts], int]:
    """Key records and a run's records as a good bundle has them (run seqs with random gaps; a share
    ``unlinked`` of prev_hash not linking to the record before), and the tree size."""
    def digest() -> str:
        return "sha256:" + rng.randbytes(32).hex()
    log_id, seq, previous = rng.randbytes(16).hex(), 0, ZERO_HASH
    key_facts, run_facts = [], []
    for index in range(keys + count):
        is_key = index < keys
        own = run_facts if not is_key else key_facts
        run_previous = own[-1].hash if own else ZERO_HASH
        kind = "signer.epoch" if is_key else (
            "run.registered" if not run_facts else "run.closed" if index == keys + count - 1 else "policy.decision")
        fact = RecordFacts(len(own) + 1, seq, len(own), "tkbox/signer" if is_key else "run-x", log_id,
                           previous if seq == 0 or rng.random() >= unlinked else digest(), run_previous, digest(), kind,
                           {"reason": "done"} if kind == "run.closed" else None)
        own.append(fact)
        previous = fact.hash
        gap = rng.choice([1, 1, 1, 2, 5])
        seq += gap
        if gap > 1:
            previous = digest()
    return key_facts, run_facts, seq + rng.randint(-2, 2)


def other_value(rng: random.Random, facts: list[RecordFacts], field: str) -> object:
    """Another value for a record's field: another record's, one off it, or a special one."""
    donor = getattr(rng.choice(facts), field)
    if field in ("seq", "run_seq"):
        near = [donor - 1, donor + 1] if donor is not None else []
        return rng.choice([donor, *near, 0, 1, None if field == "seq" else 2])
    special = {"run_id": ["tkbox/signer", "run-y"], "log_id": ["0" * 32],
               "type": ["run.registered", "run.closed", "signer.epoch"]}.get(field)
    return rng.choice([donor, *(special or [ZERO_HASH, "sha256:" + rng.randbytes(32).hex()])])


@settings(max_examples=1500, deadline=None)
@given(seed=st.integers(0, 2**32), count=st.integers(1, 30), keys=st.integers(1, 3), changes=st.integers(0, 2))
@example(seed=2685184081, count=2, keys=1, changes=2)  # a key record's seq made negative: seq 0 second in order
def test_chain_checks_agree_with_the_record_loops(seed: int, count: int, keys: int, changes: int) -> None:
    rng = random.Random(seed)
    key_facts, run_facts, size = chain(rng, count, keys)
    every = [key_facts, run_facts]
    for _ in range(changes):  # a record's field changed, or two records or two records' fields swapped
        facts = rng.choice(every)
        index, field, other = rng.randrange(len(facts)), rng.choice(FIELDS), rng.randrange(len(facts))
        if rng.random() < 0.1:
            facts[index], facts[other] = facts[other], facts[index]
        elif rng.random() < 0.1:
            mine, theirs = getattr(facts[index], field), getattr(facts[other], field)
            facts[index], facts[other] = facts[index]._replace(**{field: theirs}), facts[other]._replace(**{field: mine})
        else:
            facts[index] = facts[index]._replace(**{field: other_value(rng, [*key_facts, *run_facts], field)})
    evidence = Evidence(None, {}, {"run_id": "run-x"}, key_facts=key_facts, run_facts=run_facts,  # type: ignore[arg-type]
                        checkpoint=Checkpoint("tkbox.local/x", size, b"\0" * 32))
    assert verify_chain.check_run_chain(evidence) == reference_run_chain(evidence)
    assert verify_chain.check_run_closed(evidence) == reference_run_closed(evidence)
    assert evidence.all_parsed() == all(fact.parsed for fact in [*key_facts, *run_facts])
    for facts in every:
        assert verify_chain.positions_of(facts) == [(fact.seq, fact.hash) for fact in facts
                                                    if fact.seq is not None and fact.hash is not None]


def test_chain_checks_agree_with_the_record_loops_on_every_single_change() -> None:
    rng = random.Random(3)
    key_facts, run_facts, size = chain(rng, 6, 2, unlinked=0)
    everyone = [*key_facts, *run_facts]

    def same(keys: list[RecordFacts], run: list[RecordFacts]) -> None:
        evidence = Evidence(None, {}, {"run_id": "run-x"}, key_facts=keys, run_facts=run,  # type: ignore[arg-type]
                            checkpoint=Checkpoint("tkbox.local/x", size, b"\0" * 32))
        assert verify_chain.check_run_chain(evidence) == reference_run_chain(evidence)
        assert verify_chain.check_run_closed(evidence) == reference_run_closed(evidence)

    for facts in (key_facts, run_facts):
        for index, field in itertools.product(range(len(facts)), FIELDS):
            values = {getattr(fact, field) for fact in everyone} | {ZERO_HASH, "run-y", "tkbox/signer", "run.registered",
                                                                     "run.closed", 0, 1, size, size - 1}
            for value in values:
                if (field in ("seq", "run_seq")) != (type(value) is int):
                    continue
                changed = list(facts)
                changed[index] = changed[index]._replace(**{field: value})
                same(changed if facts is key_facts else key_facts, changed if facts is run_facts else run_facts)
            for other in range(len(facts)):  # the field swapped with another record's
                changed = list(facts)
                changed[index] = facts[index]._replace(**{field: getattr(facts[other], field)})
                changed[other] = facts[other]._replace(**{field: getattr(facts[index], field)})
                same(changed if facts is key_facts else key_facts, changed if facts is run_facts else run_facts)
