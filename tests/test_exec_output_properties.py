"""The exec output a box's page keeps, stated as properties: a ring keeps exactly the last N bytes written whatever
the chunking; a box's history never keeps more than its budget, whatever its execs write and in whatever order,
and every output it did not drop is exactly the tail of what was written, before and after it ends, and after the
history is read back from disk as a restarted daemon reads it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tkbox_daemon.boxes.exec_history import ExecHistory
from tkbox_daemon.boxes.output_ring import OutputBudget, OutputRing
from tkbox_daemon.wire import EXEC_STATES, ExecInfo, ExecOutput, OutputTail

ALLOW = {"decision": "allow", "verdict": "allow", "rule_ids": ["dev.read"], "reason": "read-only"}
DENY = {"decision": "deny", "verdict": "deny", "rule_ids": ["TK-D007"], "reason": "no", "hint": "ask"}


@given(capacity=st.integers(1, 64), chunks=st.lists(st.binary(max_size=150), max_size=40))
def test_a_ring_keeps_exactly_the_last_capacity_bytes_whatever_the_chunking(capacity, chunks):
    ring = OutputRing(capacity)
    written = b""
    for chunk in chunks:
        grew = ring.write(chunk)
        before = len(written)
        written += chunk
        assert grew == min(len(written), capacity) - min(before, capacity)
        assert ring.tail() == written[-capacity:] if written else ring.tail() == b""
        assert ring.kept == min(len(written), capacity) and ring.total == len(written)


@given(capacity=st.integers(1, 64), before=st.lists(st.binary(max_size=100), max_size=10),
       after=st.lists(st.binary(max_size=100), max_size=10))
def test_a_dropped_ring_keeps_nothing_more_but_still_counts(capacity, before, after):
    ring = OutputRing(capacity)
    for chunk in before:
        ring.write(chunk)
    assert ring.drop() == min(sum(map(len, before)), capacity)
    for chunk in after:
        assert ring.write(chunk) == 0
    assert ring.tail() == b"" and ring.total == sum(map(len, before + after))


@given(limit=st.integers(10, 200), steps=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10)), max_size=60))
def test_a_budget_drops_the_oldest_others_first_only_as_needed_and_never_goes_over(limit, steps):
    budget = OutputBudget(limit)
    kept = dict.fromkeys(range(6), 0)
    for exec_id in kept:
        budget.add(exec_id)
    for exec_id, more in steps:
        used_before = budget.used
        if kept[exec_id] + more > limit:  # cannot fit even alone: refused, nothing dropped
            with pytest.raises(ValueError):
                budget.make_room(exec_id, more)
            assert budget.used == used_before
            continue
        victims = budget.make_room(exec_id, more)
        assert exec_id not in victims
        holders = [other for other in kept if other != exec_id and kept[other]]
        assert victims == holders[:len(victims)]  # the oldest holders, in order
        if victims:  # each victim was needed: without the last one the write would not have fitted
            assert used_before - sum(kept[v] for v in victims[:-1]) + more > limit
        for victim in victims:
            kept[victim] = 0
        budget.grow(exec_id, more)
        kept[exec_id] += more
        assert budget.used == sum(kept.values()) <= limit


# One exec's life in a history: ("begin", allowed) | ("write", exec index, stream, size) | ("end", exec index)
_steps = st.lists(st.one_of(
    st.tuples(st.just("begin"), st.booleans()),
    st.tuples(st.just("write"), st.integers(0, 7), st.sampled_from([1, 2]), st.integers(0, 90)),
    st.tuples(st.just("end"), st.integers(0, 7)),
), max_size=50)


@given(tail=st.integers(1, 40), spare=st.integers(0, 120), max_records=st.integers(1, 6), steps=_steps)
@example(tail=1, spare=0, max_records=1,  # a running exec whose output was dropped writes again (found by deep)
         steps=[("begin", True), *[("begin", False)] * 4, ("begin", True), ("write", 0, 1, 1), ("write", 0, 2, 1),
                ("write", 5, 1, 1), ("write", 0, 1, 0)])
def test_a_box_history_stays_within_its_budget_and_keeps_exact_tails(tail, spare, max_records, steps):
    budget = 2 * tail + spare
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "execs"
        history = ExecHistory(directory, tail_bytes=tail, budget_bytes=budget, max_records=max_records)
        entries = []  # (entry, {stream: bytes written})
        counter = 0
        for step in steps:
            if step[0] == "begin":
                entries.append((history.begin(f"cmd {len(entries)}", ALLOW if step[1] else DENY), {1: b"", 2: b""}))
            elif entries and step[0] == "write":
                entry, written = entries[step[1] % len(entries)]
                counter += 1
                chunk = bytes([counter % 256]) * step[3]
                entry.write(step[2], chunk)
                if entry.rings is not None:
                    written[step[2]] += chunk
            elif entries and step[0] == "end":
                entry, _ = entries[step[1] % len(entries)]
                entry.end({"exit_code": 0, "signal": None, "timed_out": False, "reported_by": "guest"}, "reported")
            _check(history, entries, tail, budget)
        _check(history, entries, tail, budget)
        # a restarted daemon reads the same history back: ended execs whole, running ones as lost
        reread = ExecHistory(directory, tail_bytes=tail, budget_bytes=budget, max_records=max_records)
        assert reread.kept_bytes <= budget
        before = {info.id: info for info in history.execs()}
        for info in reread.execs():
            old = before[info.id]
            if old.state == "running":
                assert info.state == "lost" and info.stdout.kept == info.stderr.kept == 0
                continue
            assert info == old
            again, first = reread.output(info.id), history.output(info.id)
            assert (again.stdout, again.stderr) == (first.stdout, first.stderr)


def _check(history: ExecHistory, entries: list, tail: int, budget: int) -> None:
    listed = {info.id: info for info in history.execs()}
    assert history.kept_bytes == sum(info.stdout.kept + info.stderr.kept for info in listed.values()) <= budget
    assert len(listed) <= max(history.max_records, sum(info.state == "running" for info in listed.values()))
    on_disk = sum(path.stat().st_size for path in history.directory.glob("*.std*"))
    assert on_disk <= budget
    for entry, written in entries:
        info = listed.get(entry.info.id)
        if info is None:  # forgotten: only ended execs are, and only past max_records
            assert entry.rings is None
            continue
        output = history.output(info.id)
        for stream, name, kept in ((1, "stdout", output.stdout), (2, "stderr", output.stderr)):
            assert getattr(info, name).total == len(written[stream])
            if info.output_dropped:
                assert kept == b""
            else:
                assert kept == written[stream][-tail:] if written[stream] else kept == b""


# -- the wire records: what the API sends and what a restarted daemon reads back ---------------------------------

_text = st.text(max_size=30)
_tails = st.builds(OutputTail, st.integers(0, 2**40), st.integers(0, 2**40))
_infos = st.builds(
    ExecInfo, id=st.integers(1, 10**9), command=_text, state=st.sampled_from(EXEC_STATES), verdict=_text,
    started_at=_text, rule_ids=st.lists(_text, max_size=4).map(tuple), reason=_text, hint=_text,
    command_cut=st.booleans(), tty=st.booleans(), duration_ms=st.none() | st.integers(0, 10**9),
    exit_code=st.none() | st.integers(-255, 255), signal=st.none() | st.integers(1, 64), timed_out=st.booleans(),
    reported_by=st.sampled_from(["", "guest", "host"]), error=_text, stdout=_tails, stderr=_tails,
    output_dropped=st.booleans())
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
                     max_leaves=20)


@given(info=_infos, stdout=st.binary(max_size=200), stderr=st.binary(max_size=200))
def test_an_exec_and_its_output_read_back_exactly_from_their_json(info, stdout, stderr):
    assert ExecInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    output = ExecOutput(info, stdout, stderr)
    assert ExecOutput.from_json(json.loads(json.dumps(output.to_json()))) == output


@given(value=_json | st.dictionaries(st.sampled_from(["id", "command", "state", "verdict", "started_at", "rule_ids",
                                                       "stdout", "exit_code", "output_dropped"]), _json))
def test_any_other_json_is_an_exec_or_a_value_error_never_anything_else(value):
    try:
        info = ExecInfo.from_json(value)
    except ValueError:
        return
    assert isinstance(info.id, int) and info.state in EXEC_STATES and isinstance(info.rule_ids, tuple)
