"""The process pool that checks records: JSONL files cut into chunks of whole lines, checked in parallel.

An Ed25519 verification costs about 65 µs, most of a record's cost; the strict parsing,
re-encoding and hashing around it hold the GIL, so threads would not help and big files
are checked by worker processes.  ``RecordCheck.chunks()`` yields each chunk's facts as it is done,
so the caller can use them (inclusion proofs) while the rest is checked; a pool that
cannot start or breaks falls back to checking here.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from .verify_records import RecordFacts, check_chunk

PARALLEL_MIN_RECORDS = 2000
MIN_CHUNK = 250


@dataclass
class _Chunk:
    file_index: int
    first_line_no: int
    data: bytes
    future: Future[list[RecordFacts]] | None = None


class RecordCheck:
    """Checks JSONL files (already framed by ``check_framing``), in a process pool when they are big.

    Files are cut at line boundaries into chunks; ``chunks()`` yields each chunk's facts as
    soon as it is done, so the caller can work on them while the pool checks the rest.
    """

    def __init__(self, files: Sequence[bytes], pinned: Mapping[str, bytes], *,
                 parallel_min: int = PARALLEL_MIN_RECORDS, workers: int | None = None) -> None:
        self._pinned = dict(pinned)
        self._file_count = len(files)
        self._pool: ProcessPoolExecutor | None = None
        total = sum(content.count(b"\n") for content in files)
        workers = workers or _usable_cpus()
        self.parallel = total >= parallel_min and workers > 1
        pieces = workers * 8 if self.parallel else 1  # small chunks: the workers finish together
        self._chunks = [chunk for index, content in enumerate(files) for chunk in _cut(index, content, total, pieces)]
        if self.parallel:
            self._start_pool(workers)

    def _start_pool(self, workers: int) -> None:
        try:
            self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=_context())
            for chunk in self._chunks:
                chunk.future = self._pool.submit(check_chunk, chunk.data, chunk.first_line_no, self._pinned)
        except Exception:  # no processes here (sandbox, limits): check in this process instead
            self.parallel = False
            self._shutdown()

    def chunks(self) -> Iterator[tuple[int, list[RecordFacts]]]:
        """``(file index, facts)`` per chunk, in the order they finish (facts carry their line numbers)."""
        done: set[int] = set()
        try:
            futures = {chunk.future: position for position, chunk in enumerate(self._chunks) if chunk.future}
            for future in as_completed(futures):
                position = futures[future]
                facts = future.result()
                done.add(position)
                yield self._chunks[position].file_index, facts
        except Exception:  # a broken pool: the chunks not yet done are checked here
            pass
        finally:
            self._shutdown()
        for position, chunk in enumerate(self._chunks):
            if position not in done:
                yield chunk.file_index, check_chunk(chunk.data, chunk.first_line_no, self._pinned)

    def results(self) -> list[list[RecordFacts]]:
        """Every file's facts in line order (waits for the pool)."""
        merged: list[list[RecordFacts]] = [[] for _ in range(self._file_count)]
        for index, facts in self.chunks():
            merged[index].extend(facts)
        return [sorted(facts, key=lambda fact: fact.line_no) for facts in merged]

    def close(self) -> None:
        """Stop the pool, if any (``chunks()`` already does; this is for early exits)."""
        self._shutdown()

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _cut(file_index: int, content: bytes, total_lines: int, pieces: int) -> list[_Chunk]:
    """``content`` in chunks of whole lines, about ``total_lines / pieces`` lines (at least MIN_CHUNK) each."""
    if not content:
        return []
    lines = content.count(b"\n")
    per_chunk = max(MIN_CHUNK, -(-total_lines // pieces)) if pieces > 1 else lines
    step = max(1, len(content) * per_chunk // max(lines, 1))  # bytes, for about per_chunk lines
    chunks, start, line_no = [], 0, 1
    while start < len(content):
        end = content.find(b"\n", min(start + step, len(content)) - 1) + 1 or len(content)
        chunks.append(_Chunk(file_index, line_no, content[start:end]))
        line_no += content.count(b"\n", start, end)
        start = end
    return chunks


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _context() -> multiprocessing.context.BaseContext:
    # fork is cheapest, but only safe while this process has a single thread.
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")
