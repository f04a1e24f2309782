"""The process pool that checks records: JSONL files cut into chunks of whole lines, checked in parallel.

An Ed25519 verification costs about 65 µs, most of a record's cost; the strict parsing,
re-encoding and hashing around it hold the GIL, so threads would not help and big files
are checked by worker processes.  ``RecordCheck.chunks()`` yields each chunk's facts as it is done,
so the caller can use them (inclusion proofs) while the rest is checked; a pool that
cannot start or breaks falls back to checking here.

This process checks chunks too: whenever it has nothing else to do it takes (cancels in the
pool and checks here) the first chunk no worker has started, so all CPUs stay busy to the
end, and the pool has one worker fewer than there are CPUs.  Forked workers inherit the
files (a module global set before the pool forks), so a task is only ``(file, first line
number, start, end)``; spawned workers get the chunk's bytes.  Chunks are small, and smaller
towards the end, so that the processes finish together.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from .records import RecordError
from .verify_lines import check_chunk
from .verify_records import RecordFacts, check_framing

PARALLEL_MIN_RECORDS = 2000
CHUNK_LINES = 400  # about 30 ms of work: small enough to end together, big enough to cost little to send
MIN_CHUNKS_PER_WORKER = 4
TAPER = 8  # chunks shrink once fewer than TAPER full chunks' worth of lines remain
OPENING_BYTES = 128 << 10  # the first chunk, checked by a worker while this process cuts the rest

# Files handed to forked workers, by the token of their RecordCheck: set before the pool forks,
# dropped when it stops.  A spawned worker has no such entry and gets the bytes in the task.
_INHERITED: dict[int, Sequence[bytes]] = {}
_TOKENS = itertools.count(1)


@dataclass
class _Chunk:
    file_index: int
    first_line_no: int
    start: int
    end: int
    lines: int = 0
    future: Future[list[list[Any]]] | None = None

    @property
    def last_line_no(self) -> int:
        return self.first_line_no + self.lines - 1


def check_part(file_index: int, first_line_no: int, token: int, start: int, end: int, data: bytes | None,
               pinned: Mapping[str, bytes]) -> list[list[Any]]:
    """A pool task: check lines ``start:end`` of file ``file_index`` (inherited, unless ``data`` is given).

    The facts go back as columns (one list per field): a few lists of ints and shared strings
    pickle several times faster than thousands of named tuples.
    """
    if data is None:
        data = _INHERITED[token][file_index][start:end]
    return [list(column) for column in zip(*check_chunk(data, first_line_no, pinned), strict=True)]


def facts_of(columns: list[list[Any]]) -> list[RecordFacts]:
    """The facts a task sent back as columns."""
    return list(map(tuple.__new__, repeat(RecordFacts), zip(*columns, strict=True)))


class RecordCheck:
    """Frames JSONL files (``check_framing``) and checks their lines, in a process pool when they are big.

    Files are cut at line boundaries into chunks; ``chunks()`` yields each chunk's facts as
    soon as it is done, so the caller can work on them while the pool checks the rest.  A file
    that fails ``check_framing`` is not checked; its error is in ``file_errors``.

    The pool starts before anything is counted: its worker checks an opening chunk of the
    biggest file while this process counts and cuts the files (once: the counts frame them).
    """

    def __init__(self, files: Mapping[str, bytes], pinned: Mapping[str, bytes], *,
                 parallel_min: int = PARALLEL_MIN_RECORDS, workers: int | None = None) -> None:
        self.file_errors: dict[str, str] = {}
        self._files = list(files.values())
        self._pinned = dict(pinned)
        self._file_count = len(files)
        self._pool: ProcessPoolExecutor | None = None
        self._manager: threading.Thread | None = None
        self._token = next(_TOKENS)
        self._chunks: list[_Chunk] = []
        self._inherit = False  # workers inherit the files (forked)
        self._next_free = 0  # chunks before this one were started by a worker or taken here
        workers = workers or usable_cpus()
        framed = [index for index, content in enumerate(self._files) if content.endswith(b"\n")]
        estimate = sum(map(_estimated_lines, (self._files[index] for index in framed)))
        self.parallel = estimate >= parallel_min and workers > 1 and bool(framed)
        per_chunk = max(1, min(CHUNK_LINES, -(-estimate // (workers * MIN_CHUNKS_PER_WORKER)))) if self.parallel else 0
        opening = None
        if self.parallel:
            biggest = max(framed, key=lambda index: len(self._files[index]))
            opening = _Chunk(biggest, 1, 0, _line_end(self._files[biggest], OPENING_BYTES))
            self._start_pool(workers, opening)
        for index, (name, content) in enumerate(files.items()):
            start, line_no = (opening.end, 1 + content.count(b"\n", 0, opening.end)) if (
                opening and opening.file_index == index) else (0, 1)
            chunks = _cut(index, content, per_chunk, start, line_no) if index in framed else []
            try:
                check_framing(content, name, lines=chunks[-1].last_line_no if chunks else line_no - 1)
            except RecordError as exc:
                self.file_errors[name] = str(exc)
                continue
            if opening and opening.file_index == index:
                self._chunks.append(opening)
            self._chunks += chunks
        if self._pool is not None:
            self._submit()

    def _start_pool(self, workers: int, opening: _Chunk) -> None:
        try:
            context = _context()
            self._inherit = context.get_start_method() == "fork"
            if self._inherit:
                _INHERITED[self._token] = self._files
            self._pool = ProcessPoolExecutor(max_workers=max(1, workers - 1), mp_context=context)
            self._submit_one(opening)
            _yield_gil()  # for the pool's threads to hand the opening chunk over now
        except Exception:  # no processes here (sandbox, limits): check in this process instead
            self.parallel = False
            self._shutdown()

    def _submit_one(self, chunk: _Chunk) -> None:
        assert self._pool is not None
        chunk.future = self._pool.submit(check_part, chunk.file_index, chunk.first_line_no, self._token,
                                         chunk.start, chunk.end, None if self._inherit else self._data(chunk),
                                         self._pinned)

    def _submit(self) -> None:
        try:
            for chunk in self._chunks:
                if chunk.future is None:
                    self._submit_one(chunk)
        except Exception:  # a broken pool: chunks() checks here what it did not take
            return
        # Nothing more to submit: the workers can exit as soon as the last chunk is done (or taken
        # here), while this process finishes, instead of being stopped at the end.  The pool's
        # manager thread stops them; _shutdown joins it (shutdown(wait=False) forgets it).
        manager = getattr(self._pool, "_executor_manager_thread", None)
        if isinstance(manager, threading.Thread):
            self._manager = manager
            self._pool.shutdown(wait=False)  # type: ignore[union-attr]

    def _data(self, chunk: _Chunk) -> bytes:
        return self._files[chunk.file_index][chunk.start:chunk.end]

    def _check_here(self, chunk: _Chunk) -> list[RecordFacts]:
        return check_chunk(self._data(chunk), chunk.first_line_no, self._pinned)

    def _steal(self) -> int | None:
        """The position of the first chunk no worker has started, now cancelled in the pool; None if none is left."""
        while self._next_free < len(self._chunks):
            position = self._next_free
            self._next_free += 1
            future = self._chunks[position].future
            if future is not None and future.cancel():
                return position
        return None

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
                    facts = facts_of(future.result())
                    done.add(position)
                    yield self._chunks[position].file_index, facts
        except Exception:  # a broken pool: the chunks not yet done are checked here
            pass
        finally:
            if len(done) < len(self._chunks) or self._manager is None:
                self._shutdown()
            else:  # the workers exit by themselves while the caller goes on (close() joins them) ...
                _yield_gil()  # ... once the pool's threads (which need the GIL) have told them to
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
        """Stop the pool, if any, and wait for its processes to exit (call it in any case)."""
        self._shutdown()

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._manager is not None:
            self._manager.join()
            self._manager = None
        _INHERITED.pop(self._token, None)


def _cut(file_index: int, content: bytes, per_chunk: int, start: int = 0, line_no: int = 1) -> list[_Chunk]:
    """``content[start:]`` (whole lines, the first numbered ``line_no``) in chunks, counting its lines.

    About ``per_chunk`` lines each (one chunk if 0), then smaller towards the end (down to a
    sixteenth of that), so that the processes finish together.
    """
    if start >= len(content):
        return []
    if not per_chunk:
        return [_Chunk(file_index, line_no, start, len(content), lines=content.count(b"\n", start))]
    sample = min(len(content) - start, 1 << 16)
    line_bytes = sample / max(content.count(b"\n", start, start + sample), 1)  # about, from the first 64 KiB
    chunks = []
    while start < len(content):
        remaining = len(content) - start
        step = int(max(per_chunk // 16, min(per_chunk, remaining / line_bytes / TAPER)) * line_bytes) or 1
        end = _line_end(content, start + step)
        chunks.append(_Chunk(file_index, line_no, start, end, lines=content.count(b"\n", start, end)))
        line_no += chunks[-1].lines
        start = end
    return chunks


def _line_end(content: bytes, at: int) -> int:
    """The end of the line that byte ``at - 1`` is in (the whole of ``content`` if it has no newline there)."""
    return content.find(b"\n", min(max(at, 1), len(content)) - 1) + 1 or len(content)


def _estimated_lines(content: bytes) -> int:
    """About how many lines ``content`` has, from its first 64 KiB."""
    sample = min(len(content), 1 << 16)
    return content.count(b"\n", 0, sample) * len(content) // max(sample, 1)


def _yield_gil() -> None:
    """Let the pool's threads run: they need the GIL to pass tasks and results on, and would
    otherwise wait for this thread to give it up (up to ``sys.getswitchinterval()``, 5 ms)."""
    time.sleep(0.001)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _context() -> multiprocessing.context.BaseContext:
    # fork is cheapest, but only safe while this process has a single thread.
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")
