"""The record-level checks of verify, fed the run's records in order, a chunk at a time, in bounded memory.

Each check keeps only what deciding needs (the previous record, counters, the first failure it found, the tree's
frontier; for the approvals check, the ids of the ask decisions and answers, at most ``MAX_APPROVAL_IDS``), and
reports the same result as its in-memory counterpart in ``verify_chain``/``verify_approvals`` would on the whole
list, except inclusion: the records and the bundle's tree nodes (``tree_gaps``) are folded into one tree whose
root must be the checkpoint's, so a failure there names no single record unless one lies outside the tree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .bundle import KEY_RECORDS
from .records import SIGNER_RUN_ID, ZERO_HASH
from .tree_gaps import Frontier, canonical_blocks, leaf_of
from .verify_chain import _run_link_problem
from .verify_counts import RunCounts
from .verify_records import RecordFacts
from .verify_report import CheckResult, failed, passed, skipped

MAX_APPROVAL_IDS = 200_000
"""Ask decisions, approval records and executed_against_policy gaps one run may hold: the approvals check keeps
each one's id (about 200 bytes each); an ask waits for a person, so no real run comes near it."""

_NOT_PARSED = "not every record parsed (see signatures)"


class StreamChecks:
    """State of the checks over the run's records; ``add`` each chunk's facts in line order, then ``results``."""

    def __init__(self, run_id: str, key_facts: list[RecordFacts] | None, run_entry_of: Callable[[int], str],
                 tree: tuple[int, bytes] | None, take_node: Callable[[], bytes | None]) -> None:
        self.run_id = run_id
        self.key_facts = key_facts
        self._entry_of = run_entry_of
        self.tree = tree  # (size, root) of the trusted checkpoint
        self._take_node = take_node
        keys = key_facts or []
        self._keys_parsed = key_facts is not None and all(fact.seq is not None for fact in keys)
        self._keys = sorted((fact for fact in keys if fact.seq is not None), key=lambda fact: fact.seq)
        self._key_at = 0
        self._key_seqs = {fact.seq for fact in keys}
        self.count = 0
        self.all_parsed = True
        self.any_error = False
        self.file_error: str | None = None
        self.first_error: RecordFacts | None = None
        self.first: RecordFacts | None = None
        self.first_fact: RecordFacts | None = None  # the first line's, parsed or not
        self.key_file_error = ""
        self.last: RecordFacts | None = None
        self.log_id: str | None = None
        self._previous: RecordFacts | None = None
        self.link_problem: tuple[RecordFacts, str] | None = None
        self.dup: RecordFacts | None = None
        self.global_problem: tuple[RecordFacts, str] | None = None
        self._merged_prev: RecordFacts | None = None
        self.closes = 0
        self.first_close = -1
        self.after_close: RecordFacts | None = None
        self.beyond: RecordFacts | None = None
        self.inclusion_problem: tuple[int | None, str] | None = None
        self._frontier = Frontier()
        self._position = 0
        self._counts = _Counts()
        self._approvals = _Approvals()

    def add(self, facts: list[RecordFacts]) -> None:
        for fact in facts:
            self._add(fact)

    def _add(self, fact: RecordFacts) -> None:
        index = self.count
        self.count += 1
        if self.first_fact is None:
            self.first_fact = fact
        if fact.error is not None:
            self.any_error = True
            if self.first_error is None:
                self.first_error = fact
        if fact.seq is None:
            self.all_parsed = False
            return
        if not self.all_parsed:
            return  # the checks below are skipped; signatures needs only the first error
        if self.first is None:
            self.first, self.log_id = fact, fact.log_id
        if self.link_problem is None:
            problem = _run_link_problem(fact, index, self._previous, self.run_id, self.log_id)
            if problem:
                self.link_problem = (fact, problem)
        self._previous = self.last = fact
        if self.dup is None and fact.seq in self._key_seqs:
            self.dup = fact
        keys = self._keys
        while self._key_at < len(keys) and keys[self._key_at].seq < fact.seq:  # type: ignore[operator]
            self._merged(keys[self._key_at])
            self._key_at += 1
        self._merged(fact)
        if fact.type == "run.closed":
            self.closes += 1
            if self.first_close < 0:
                self.first_close = index
        if self.first_close >= 0 and self.after_close is None and index == self.first_close + 1:
            self.after_close = fact
        if self.beyond is None and self.tree is not None and fact.seq >= self.tree[0]:
            self.beyond = fact
        self._counts.add(fact)
        if not self.any_error:
            self._approvals.add(fact)

    def _merged(self, fact: RecordFacts) -> None:
        """The bundle's records in seq order (the run's merged with the keys): global links and the tree."""
        seq = fact.seq
        assert seq is not None
        previous = self._merged_prev
        if self.global_problem is None:
            if seq == 0 and fact.prev_hash != ZERO_HASH:
                self.global_problem = (fact, "the log's first record must have the zero prev_hash")
            elif previous is not None and previous.seq == seq - 1 and fact.prev_hash != previous.hash:
                self.global_problem = (fact, f"prev_hash does not link to the record at seq {seq - 1}")
        self._merged_prev = fact
        if self.tree is None or self.inclusion_problem is not None:
            return
        size = self.tree[0]
        if previous is not None and seq <= previous.seq:  # type: ignore[operator]
            self.inclusion_problem = (seq, "two records claim this seq, or the records are not in seq order")
            return
        if seq >= size:
            self.inclusion_problem = (seq, f"seq {seq} is outside the checkpoint's tree of size {size}")
            return
        if not self._fold_gap(seq):
            return
        self._frontier.add(leaf_of(bytes.fromhex(fact.hash[7:])))  # type: ignore[index]
        self._position = seq + 1

    def _fold_gap(self, end: int) -> bool:
        frontier, take = self._frontier, self._take_node
        for _, height in canonical_blocks(self._position, end):
            node = take()
            if node is None:
                self.inclusion_problem = (None, "the tree nodes end before the records and the tree size need them")
                return False
            frontier.add(node, height)
        return True

    def finish(self) -> None:
        """After the last chunk: the keys after the run's last record, and the tree up to its size."""
        if not self.all_parsed or not self._keys_parsed or self.file_error is not None:
            return
        while self._key_at < len(self._keys):
            self._merged(self._keys[self._key_at])
            self._key_at += 1
        if self.tree is not None and self.inclusion_problem is None and self._fold_gap(self.tree[0]):
            if self._take_node() is not None:
                self.inclusion_problem = (None, "the tree nodes go on after the tree size is reached")
            elif self._frontier.root() != self.tree[1]:
                self.inclusion_problem = (None, "the records and the tree nodes do not hash to the checkpoint's "
                                                "root: a record, a node or the order was changed")

    # ---- results, worded as verify_chain's and verify_approvals' ------------------------------------------
    def parsed(self) -> bool:
        return self._keys_parsed and self.all_parsed and self.file_error is None

    def signatures(self) -> CheckResult:
        if self.key_facts is None:
            return failed("signatures", self.key_file_error or f"{KEY_RECORDS} could not be read")
        for fact in self.key_facts:
            if fact.error is not None:
                return failed("signatures", f"{KEY_RECORDS} line {fact.line_no}: {fact.error}", seq=fact.seq,
                              run_seq=fact.run_seq)
        if self.file_error is not None:
            return failed("signatures", self.file_error)
        if self.first_error is not None:
            fact = self.first_error
            return failed("signatures", f"{self._entry_of(fact.line_no)}: {fact.error}", seq=fact.seq,
                          run_seq=fact.run_seq)
        keys = len(self.key_facts)
        return passed("signatures", f"{keys + self.count} records ({keys} key, {self.count} run): strict schema, "
                      "event hash and a signature by a pinned key each")

    def run_chain(self) -> CheckResult:
        if not self.parsed():
            return skipped("run chain", _NOT_PARSED)
        if self.run_id == SIGNER_RUN_ID:
            return failed("run chain", f"{SIGNER_RUN_ID} is the signer's own run, not a run to export")
        if self.link_problem is not None:
            fact, problem = self.link_problem
            return failed("run chain", problem, seq=fact.seq, run_seq=fact.run_seq)
        for fact in self.key_facts or []:
            if fact.log_id != self.log_id:
                return failed("run chain", "keys.jsonl is from another log than the run", seq=fact.seq,
                              run_seq=fact.run_seq)
        key_dup = _first_duplicate(self.key_facts or [])
        dup = key_dup or self.dup
        if dup is not None:
            return failed("run chain", f"two records claim seq {dup.seq}", seq=dup.seq, run_seq=dup.run_seq)
        if self.global_problem is not None:
            fact, problem = self.global_problem
            return failed("run chain", problem, seq=fact.seq, run_seq=fact.run_seq)
        first, last = self.first, self.last
        assert first is not None and last is not None
        return passed("run chain", f"{self.count} records of run {self.run_id}: run_seq 0..{self.count - 1}, "
                      f"seq {first.seq}..{last.seq}, linked, one log")

    def inclusion(self, checkpoint_ok: bool) -> CheckResult:
        if not checkpoint_ok or self.tree is None:
            return skipped("inclusion", "no trusted checkpoint (see checkpoint)")
        if not self.parsed():
            return skipped("inclusion", _NOT_PARSED)
        if self.inclusion_problem is not None:
            seq, reason = self.inclusion_problem
            blamed = next((fact for fact in self.key_facts or [] if fact.seq == seq), None)
            run_seq = blamed.run_seq if blamed else (self.beyond.run_seq if self.beyond and self.beyond.seq == seq
                                                     else None)
            return failed("inclusion", reason, seq=seq, run_seq=run_seq)
        keys = len(self.key_facts or [])
        return passed("inclusion", f"all {keys + self.count} records ({keys} key, {self.count} run) are in the "
                      f"checkpointed tree of size {self.tree[0]}")

    def run_closed(self, checkpoint_ok: bool) -> CheckResult:
        if not self.parsed():
            return skipped("run closed", _NOT_PARSED)
        if not checkpoint_ok or self.tree is None:
            return skipped("run closed", "no trusted checkpoint (see checkpoint)")
        last = self.last
        assert last is not None
        if not self.closes:
            return failed("run closed", "the run has no run.closed record: it is still open, or was cut",
                          seq=last.seq, run_seq=last.run_seq)
        if self.first_close != self.count - 1:
            after = self.after_close
            assert after is not None
            return failed("run closed", f"a record follows run.closed (run_seq {self.first_close})", seq=after.seq,
                          run_seq=after.run_seq)
        size = self.tree[0]
        beyond = next((fact for fact in self.key_facts or [] if (fact.seq or 0) >= size), None) or self.beyond
        if beyond is not None:
            return failed("run closed", f"the checkpoint (tree size {size}) does not cover this record",
                          seq=beyond.seq, run_seq=beyond.run_seq)
        reason = str((last.data or {}).get("reason", ""))[:80]
        return passed("run closed", f"run.closed at run_seq {last.run_seq} (seq {last.seq}, reason {reason!r}) ends "
                      f"the run; the checkpoint covers it")

    def approvals(self) -> CheckResult:
        if not self.parsed():
            return skipped("approvals", _NOT_PARSED)
        if self.any_error:
            return skipped("approvals", "not every run record verified (see signatures)")
        return self._approvals.result()

    def counts(self) -> RunCounts | None:
        return self._counts.result() if self.file_error is None else None


def _first_duplicate(facts: list[RecordFacts]) -> RecordFacts | None:
    seen: set[int | None] = set()
    for fact in facts:
        if fact.seq in seen:
            return fact
        seen.add(fact.seq)
    return None


class _Counts:
    """``verify_counts.count_run``, one record at a time."""

    def __init__(self) -> None:
        self.decisions: dict[str, int] = {}
        self.approvals: dict[str, int] = {}
        self.execs = self.writes = 0

    def add(self, fact: RecordFacts) -> None:
        data = fact.data
        if data is None:
            return
        if fact.type == "policy.decision":
            verdict = str(data.get("verdict", ""))
            self.decisions[verdict] = self.decisions.get(verdict, 0) + 1
            tool = str(data.get("tool", "")).lower()
            self.execs += tool == "bash"
            self.writes += tool == "write"
        elif fact.type == "input.observed" and "answer" in data:
            answer = str(data["answer"])
            self.approvals[answer] = self.approvals.get(answer, 0) + 1

    def result(self) -> RunCounts:
        return RunCounts(self.decisions, self.approvals, self.execs, self.writes)


class _Approvals:
    """``verify_approvals.check_approvals``, one record at a time (the ids it must remember, bounded)."""

    def __init__(self) -> None:
        self.asks: set[str] = set()
        self.answers: dict[str, tuple[str, int, int]] = {}  # decision id -> (answer, seq, run_seq)
        self.approval_ids: set[str] = set()
        self.results: dict[str, tuple[int, int]] = {}  # ask decision id -> (seq, run_seq) of its tool.result
        self.flagged: set[str] = set()
        self.problem: tuple[int, int, str] | None = None  # (run_seq, seq, reason): the first, earliest
        self.held = 0

    def add(self, fact: RecordFacts) -> None:
        data: Any = fact.data
        if data is None or self.held > MAX_APPROVAL_IDS:  # over the limit: the check fails, nothing more is kept
            return
        kind = fact.type
        if kind == "policy.decision":
            if data["verdict"] == "ask":
                self._hold()
                self.asks.add(data["decision_id"])
        elif kind == "tool.result" and data["decision_id"] in self.asks:
            self.results.setdefault(data["decision_id"], (fact.seq, fact.run_seq))  # type: ignore[arg-type]
        elif kind == "capture.gap":
            self._hold()
            self.flagged.add(data["decision_id"])
        elif kind == "input.observed":
            self._hold()
            decision_id, approval_id = data["decision_id"], data["approval_id"]
            reason = None
            if decision_id not in self.asks:
                reason = f"approval {approval_id} answers {decision_id}, which is not an earlier ask decision of this run"
            elif decision_id in self.answers:
                first, _, run_seq = self.answers[decision_id]
                reason = f"approval {approval_id} answers decision {decision_id} again (answered {first} at run_seq {run_seq})"
            elif approval_id in self.approval_ids:
                reason = f"approval {approval_id} is answered twice"
            if reason and (self.problem is None or fact.run_seq < self.problem[0]):  # type: ignore[operator]
                self.problem = (fact.run_seq, fact.seq, reason)  # type: ignore[assignment]
            self.answers.setdefault(decision_id, (data["answer"], fact.seq, fact.run_seq))  # type: ignore[arg-type]
            self.approval_ids.add(approval_id)

    def _hold(self) -> None:
        self.held += 1
        if self.held > MAX_APPROVAL_IDS:
            self.asks, self.answers, self.approval_ids, self.results, self.flagged = set(), {}, set(), {}, set()

    def result(self) -> CheckResult:
        if self.held > MAX_APPROVAL_IDS:
            return failed("approvals", f"the run holds more than {MAX_APPROVAL_IDS} ask decisions, approval records "
                                       "and executed_against_policy gaps, over verify's limit (docs/verify.md)")
        approved_runs = 0
        problem = self.problem
        for decision_id, (seq, run_seq) in self.results.items():
            answer, _, answered_at = self.answers.get(decision_id, (None, None, None))
            reason = None
            if answered_at is not None and answered_at > run_seq:
                reason = (f"the tool.result for ask decision {decision_id} comes before its approval answer "
                          f"{answer!r} (run_seq {answered_at})")
            elif answer == "approve":
                approved_runs += 1
            elif decision_id not in self.flagged:
                said = f"its answer was {answer!r}" if answer else "no approval answered it"
                reason = (f"the tool.result for ask decision {decision_id} has no approve record before it ({said}) "
                          "and no capture.gap executed_against_policy")
            if reason and (problem is None or run_seq < problem[0]):
                problem = (run_seq, seq, reason)
        if problem is not None:
            run_seq, seq, reason = problem
            return failed("approvals", reason, seq=seq, run_seq=run_seq)
        asks, against = len(self.asks), len(self.results) - approved_runs
        return passed("approvals", f"{asks} ask decision{'s' * (asks != 1)}, {len(self.answers)} answered: "
                      f"{approved_runs} ran after an approve record, {against} ran against policy and say so "
                      "(executed_against_policy)")
