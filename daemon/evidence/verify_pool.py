"""The process pool that checks records: JSONL files cut into chunks of whole lines, checked in parallel.

An Ed25519 verification costs about 65 µs, most of a record's cost; the strict parsing,
re-encoding and hashing around it hold the GIL, so threads would not help and big files
are checked by worker processes.  ``RecordCheck.chunks()`` yields each chunk's facts as it is done,
so the caller can use them (inclusion proofs) while the rest is checked; a pool that
cannot start or breaks falls back to checking here.

Forked workers inherit the files (a module global set before the pool forks), so a task
is only ``(file, first line, start, end)``; spawned workers get the chunk's bytes.  Chunks
are small and queued in file order; whenever this process has nothing else to do it takes
(cancels and checks here) the last chunk no worker has started, so all CPUs stay busy to the end.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass

from .verify_records import RecordFacts, check_chunk

PARALLEL_MIN_RECORDS = 2000
CHUNK_LINES = 400  # about 30 ms of work: small enough to end together, big enough to cost little to send
MIN_CHUNKS_PER_WORKER = 4

# Files handed to forked workers, by the id of their RecordCheck: set before the pool forks,
# dropped when it stops.  A spawned worker has no such entry and gets the bytes in the task.
_INHERITED: dict[int, Sequence[bytes]] = {}


@dataclass
class _Chunk:
    file_index: int
    first_line_no: int
    start: int
    end: int
    future: Future[list[RecordFacts]] | None = None


def check_part(file_index: int, first_line_no: int, owner: int, start: int, end: int, data: bytes | None,
               pinned: Mapping[str, bytes]) -> list[RecordFacts]:
    """A pool task: check lines ``start:end`` of file ``file_index`` (inherited, unless ``data`` is given)."""
    if data is None:
        data = _INHERITED[owner][file_index][start:end]
    return check_chunk(data, first_line_no, pinned)


class RecordCheck:
    """Checks JSONL files (already framed by ``check_framing``), in a process pool when they are big.

    Files are cut at line boundaries into chunks; ``chunks()`` yields each chunk's facts as
    soon as it is done, so the caller can work on them while the pool checks the rest.
    """

    def __init__(self, files: Sequence[bytes], pinned: Mapping[str, bytes], *,
                 parallel_min: int = PARALLEL_MIN_RECORDS, workers: int | None = None,
                 line_counts: Sequence[int] | None = None) -> None:
        self._files = list(files)
        self._pinned = dict(pinned)
        self._file_count = len(files)
        self._pool: ProcessPoolExecutor | None = None
        counts = list(line_counts) if line_counts is not None else [content.count(b"\n") for content in files]
        total = sum(counts)
        workers = workers or _usable_cpus()
        self.parallel = total >= parallel_min and workers > 1
        per_chunk = max(1, min(CHUNK_LINES, -(-total // (workers * MIN_CHUNKS_PER_WORKER)))) if self.parallel else 0
        self._chunks = [chunk for index, content in enumerate(files)
                        for chunk in _cut(index, content, counts[index], per_chunk)]
        self._stealable = len(self._chunks)  # chunks below this index may have been started by a worker
        if self.parallel:
            self._start_pool(workers)

    def _start_pool(self, workers: int) -> None:
        try:
            context = _context()
            inherit = context.get_start_method() == "fork"
            if inherit:
                _INHERITED[id(self)] = self._files
            self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
            for chunk in self._chunks:
                data = None if inherit else self._data(chunk)
                chunk.future = self._pool.submit(check_part, chunk.file_index, chunk.first_line_no, id(self),
                                                 chunk.start, chunk.end, data, self._pinned)
        except Exception:  # no processes here (sandbox, limits): check in this process instead
            self.parallel = False
            self._shutdown()

    def _data(self, chunk: _Chunk) -> bytes:
        return self._files[chunk.file_index][chunk.start:chunk.end]

    def _check_here(self, chunk: _Chunk) -> list[RecordFacts]:
        return check_chunk(self._data(chunk), chunk.first_line_no, self._pinned)

    def _steal(self) -> int | None:
        """The position of the last chunk no worker has started, now cancelled in the pool; None if none is left."""
        if self._stealable == 0:
            return None
        position = self._stealable - 1
        future = self._chunks[position].future
        if future is None or not future.cancel():
            self._stealable = 0  # the pool starts chunks in order: every earlier one is taken too
            return None
        self._stealable = position
        return position

    def chunks(self) -> Iterator[tuple[int, list[RecordFacts]]]:
        """``(file index, facts)`` per chunk, in the order they finish (facts carry their line numbers)."""
        done: set[int] = set()
        try:
            waiting = {chunk.future: position for position, chunk in enumerate(self._chunks) if chunk.future}
            while waiting:
                finished = [future for future in waiting if future.done()]
                if not finished:
                    position = self._steal()
                    if position is not None:
                        del waiting[self._chunks[position].future]
                        facts = self._check_here(self._chunks[position])
                        done.add(position)
                        yield self._chunks[position].file_index, facts
                        continue
                    finished = list(wait(waiting, return_when=FIRST_COMPLETED).done)
                for future in finished:
                    position = waiting.pop(future)
                    facts = future.result()
                    done.add(position)
                    yield self._chunks[position].file_index, facts
        except Exception:  # a broken pool: the chunks not yet done are checked here
            pass
        finally:
            self._shutdown()
        for position, chunk in enumerate(self._chunks):
            if position not in done:
                yield chunk.file_index, self._check_here(chunk)

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
        _INHERITED.pop(id(self), None)


def _cut(file_index: int, content: bytes, lines: int, per_chunk: int) -> list[_Chunk]:
    """``content`` in chunks of whole lines, about ``per_chunk`` lines each (one chunk if ``per_chunk`` is 0)."""
    if not content:
        return []
    if not per_chunk or per_chunk >= lines:
        return [_Chunk(file_index, 1, 0, len(content))]
    step = max(1, len(content) * per_chunk // max(lines, 1))  # bytes, for about per_chunk lines
    chunks, start, line_no = [], 0, 1
    while start < len(content):
        end = content.find(b"\n", min(start + step, len(content)) - 1) + 1 or len(content)
        chunks.append(_Chunk(file_index, line_no, start, end))
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
