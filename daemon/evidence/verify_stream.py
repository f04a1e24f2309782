"""Verify a ``tkbox.bundle.v2`` bundle in one pass over its entries, in bounded memory, whatever the run's size.

The small entries (keys, checkpoint, policies, manifest) are read first; then each run entry in turn (at most
``RUN_ENTRY_BYTES``) is cut into chunks of whole lines that pool workers and this process check
(``verify_lines.check_chunk``); the facts come back in line order into ``StreamChecks``, which folds them, with the
tree nodes read alongside, into the record-level checks.  No list of the run's records is ever built: memory is
about two entries, the chunks in flight and what the checks keep.  The report has the same checks, in the same
order, as for a v1 bundle (``verify.py``).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from .bundle import CHECKPOINT, KEY_RECORDS, MANIFEST
from .bundle_stream import NODE_SIZE, RUN_ENTRY_BYTES
from .records import RecordError
from .trust import Trust
from .verify_checks import Evidence, assurance_of, check_checkpoint, check_keys, check_policy
from .verify_lines import check_chunk
from .verify_pool import check_part, facts_of, usable_cpus
from .verify_records import RecordFacts, check_framing
from .verify_report import CheckResult, VerifyReport, conclude, unusable
from .verify_stream_layout import LayoutError, ZipIndex, check_layout, entry_digest, manifest_result
from .verify_stream_run import StreamChecks
from .zipread import ZipRefused

CHUNK_BYTES = 256 << 10  # about 380 records: ~15 ms of a worker's time, cheap to send
MAX_RUN_RECORDS = 100_000_000
"""Records in one run: a bound on the line count, above what the 4 GiB file limit lets in (about 17 million)."""
_RECORD_BYTES_ESTIMATE = 650


def verify_v2(path: Any, trust: Trust, checks: list[CheckResult], *, parallel_min: int, workers: int | None) -> VerifyReport:
    try:
        index = ZipIndex(path)
    except ZipRefused as exc:
        return unusable(checks, "bundle", str(exc))
    try:
        return _verify(index, trust, checks, parallel_min, workers)
    except (ZipRefused, LayoutError) as exc:  # found while reading an entry
        return unusable(checks, "bundle", str(exc))
    finally:
        index.close()


def _verify(index: ZipIndex, trust: Trust, checks: list[CheckResult], parallel_min: int,
            workers: int | None) -> VerifyReport:
    layout_check, layout, manifest = check_layout(index)
    if layout is None or manifest is None:
        return unusable(checks, "bundle", layout_check.detail)
    checks.append(layout_check)
    digests: dict[str, str] = {}
    small: dict[str, bytes] = {}
    for name in (KEY_RECORDS, CHECKPOINT, *layout.policy_entries, MANIFEST):
        small[name] = index.read(name)
        digests[name] = entry_digest(small[name])
    evidence = Evidence(trust, small, manifest)
    checkpoint_check = check_checkpoint(evidence)
    pinned = {key.kid: key.public_key for key in trust.record_keys if key.alg in trust.algs}
    try:
        check_framing(small[KEY_RECORDS], KEY_RECORDS)
        evidence.key_facts = check_chunk(small[KEY_RECORDS], 1, pinned)
    except RecordError as exc:
        evidence.file_errors[KEY_RECORDS] = str(exc)
    checkpoint = evidence.checkpoint
    nodes = _NodeReader(index, layout.node_entries, digests)
    starts: list[tuple[int, str]] = []  # (first line number, entry) of each run entry
    stream = StreamChecks(manifest["run_id"], evidence.key_facts, lambda line_no: _where(starts, line_no),
                          (checkpoint.size, checkpoint.root) if checkpoint else None, nodes.take)
    stream.key_file_error = evidence.file_errors.get(KEY_RECORDS, "")
    estimate = sum(index.size(name) for name in layout.run_entries) // _RECORD_BYTES_ESTIMATE
    workers = workers or usable_cpus()
    with _OrderedChecks(pinned, workers if estimate >= parallel_min else 1, stream.add) as ordered:
        line_no = 1
        previous: tuple[str, int] | None = None
        for name in layout.run_entries:
            data = b""  # the previous entry is dropped before the next is read: one in memory at a time
            data = index.read(name, copy=False)
            digests[name] = entry_digest(data)
            if previous is not None and previous[1] + (data.find(b"\n") + 1 or len(data)) <= RUN_ENTRY_BYTES:
                raise LayoutError(f"entry {previous[0]!r} ends before it is full: the next line fits in it "
                                  f"(run entries are filled to {RUN_ENTRY_BYTES} bytes)")
            previous = (name, len(data))
            starts.append((line_no, name))
            if stream.file_error is not None:
                continue
            if not data.endswith(b"\n"):
                stream.file_error = f"{name} does not end with a newline"
                continue
            line_no = _cut(data, line_no, ordered.submit)
            if line_no - 1 > MAX_RUN_RECORDS:
                stream.file_error = f"the run has more than {MAX_RUN_RECORDS} records, over verify's limit"
    stream.finish()
    nodes.drain()
    checkpoint_ok = checkpoint is not None
    evidence.run_facts = [stream.first_fact] if stream.first_fact is not None and stream.file_error is None else None
    checks += [manifest_result(manifest, list(index.entries), digests, small[MANIFEST]), checkpoint_check,
               check_keys(evidence), stream.signatures(), stream.run_chain(), stream.inclusion(checkpoint_ok),
               stream.run_closed(checkpoint_ok), check_policy(evidence), stream.approvals()]
    return conclude(checks, assurance_of(evidence), stream.counts())


def _where(starts: list[tuple[int, str]], line_no: int) -> str:
    """``records/run-NNNNNN.jsonl line N`` for a line number counted over the whole run."""
    first, name = next(((first, name) for first, name in reversed(starts) if first <= line_no), (1, "records"))
    return f"{name} line {line_no - first + 1}"


def _cut(data: bytes, line_no: int, submit: Callable[[int, bytes], None]) -> int:
    """Hand ``data`` (whole lines) on in chunks of about ``CHUNK_BYTES``; returns the next line number."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", min(start + CHUNK_BYTES, len(data)) - 1) + 1 or len(data)
        chunk = data[start:end]
        submit(line_no, chunk)
        line_no += chunk.count(b"\n")
        start = end
    return line_no


class _NodeReader:
    """The tree nodes, one at a time, across the node entries (one entry in memory); hashes each entry read."""

    def __init__(self, index: ZipIndex, names: list[str], digests: dict[str, str]) -> None:
        self._index, self._names, self._digests = index, deque(names), digests
        self._data = b""
        self._at = 0

    def take(self) -> bytes | None:
        if self._at >= len(self._data):
            if not self._names:
                return None
            self._load()
        node = self._data[self._at:self._at + NODE_SIZE]
        self._at += NODE_SIZE
        return node

    def _load(self) -> None:
        name = self._names.popleft()
        self._data = b""
        self._data, self._at = self._index.read(name, copy=False), 0
        self._digests[name] = entry_digest(self._data)

    def drain(self) -> None:
        """Read (and hash) the entries not needed yet, for the manifest check."""
        while self._names:
            self._load()
        self._data = b""


class _OrderedChecks:
    """Checks chunks of lines in a process pool and here, and hands their facts to ``sink`` in submission order.

    At most ``2 × workers`` chunks wait in the pool; when it is full this process checks the next chunk itself,
    so every CPU works and memory holds only the chunks in flight.  A pool that cannot start or breaks leaves the
    work to this process.
    """

    def __init__(self, pinned: Mapping[str, bytes], workers: int, sink: Callable[[list[RecordFacts]], None]) -> None:
        self._pinned = dict(pinned)
        self._sink = sink
        self._queue: deque[tuple[Future[list[list[Any]]] | None, int, bytes, list[RecordFacts] | None]] = deque()
        self._pool: ProcessPoolExecutor | None = None
        self._in_pool = max(0, workers - 1)
        if self._in_pool:
            try:
                self._pool = ProcessPoolExecutor(max_workers=self._in_pool, mp_context=_context())
            except Exception:  # no processes here (sandbox, limits): check in this process
                self._pool = None

    def __enter__(self) -> _OrderedChecks:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self._drain(until_empty=True)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, first_line_no: int, data: bytes) -> None:
        waiting = sum(1 for future, *_ in self._queue if future is not None and not future.done())
        if self._pool is not None and waiting < 2 * self._in_pool:
            try:
                future = self._pool.submit(check_part, 0, first_line_no, 0, 0, 0, data, self._pinned)
                self._queue.append((future, first_line_no, data, None))
            except Exception:  # a broken pool: this process checks from now on
                self._pool = None
                self._queue.append((None, first_line_no, data, None))
        else:
            self._queue.append((None, first_line_no, data, check_chunk(data, first_line_no, self._pinned)))
        self._drain(until_empty=False)

    def _drain(self, *, until_empty: bool) -> None:
        queue = self._queue
        while queue:
            future, first_line_no, data, facts = queue[0]
            if future is not None and not future.done() and not until_empty and len(queue) <= 4 * self._in_pool + 2:
                return
            if facts is None:
                facts = self._result(future, first_line_no, data)
            queue.popleft()
            self._sink(facts)

    def _result(self, future: Future[list[list[Any]]] | None, first_line_no: int, data: bytes) -> list[RecordFacts]:
        if future is not None:
            try:
                return facts_of(future.result())
            except Exception:  # the pool broke: check here
                pass
        return check_chunk(data, first_line_no, self._pinned)


def _context() -> multiprocessing.context.BaseContext:
    # fork is cheapest, but only safe while this process has a single thread.
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                                        else "spawn")
