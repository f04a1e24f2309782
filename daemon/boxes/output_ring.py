"""The tail of an output stream and a per-box byte budget over many of them, in memory and without I/O.

``OutputRing`` keeps exactly the last ``capacity`` bytes written to it, whatever the chunking (a circular buffer
once full: each write costs its own length, never the capacity).  ``OutputBudget`` counts the bytes kept by the
execs of one box and says whose output to drop so that a write fits: the oldest execs' first (in the order they
were added), never the exec being written.  Both are driven by ``exec_history.ExecHistory``.
"""

from __future__ import annotations


class OutputRing:
    """The last ``capacity`` bytes written; ``total`` counts every byte ever written, kept or not."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("a ring keeps at least one byte")
        self.capacity = capacity
        self.total = 0
        self._buffer = bytearray()  # grows up to capacity, then wraps
        self._head = 0  # once full: the index of the oldest byte kept
        self.dropped = False

    @property
    def kept(self) -> int:
        return len(self._buffer)

    def write(self, data: bytes) -> int:
        """Keep the end of ``data``; returns how many more bytes are kept than before (0 once full or dropped)."""
        self.total += len(data)
        if self.dropped or not data:
            return 0
        before = len(self._buffer)
        if before < self.capacity:  # filling: append, then cut what overflowed off the front (once)
            self._buffer += data[-self.capacity:]
            overflow = len(self._buffer) - self.capacity
            if overflow > 0:
                del self._buffer[:overflow]
                self._head = 0
            return len(self._buffer) - before
        view = memoryview(data)[-self.capacity:]
        first = min(len(view), self.capacity - self._head)
        self._buffer[self._head:self._head + first] = view[:first]
        rest = len(view) - first
        self._buffer[:rest] = view[first:]
        self._head = (self._head + len(view)) % self.capacity
        return 0

    def tail(self) -> bytes:
        """The bytes kept, oldest first."""
        return bytes(self._buffer[self._head:] + self._buffer[:self._head])

    def drop(self) -> int:
        """Forget what is kept, and keep nothing more; returns the bytes freed."""
        freed = len(self._buffer)
        self._buffer = bytearray()
        self._head = 0
        self.dropped = True
        return freed


class OutputBudget:
    """Bytes kept per exec (by id, in the order added) within ``limit`` for the whole box."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._kept: dict[int, int] = {}

    def add(self, exec_id: int, kept: int = 0) -> None:
        """Start counting an exec (newest last), with the bytes it keeps already (an exec loaded from disk)."""
        self._kept[exec_id] = self._kept.get(exec_id, 0) + kept
        self.used += kept

    def make_room(self, exec_id: int, more: int) -> list[int]:
        """The execs whose output must be dropped, oldest first, so that ``exec_id`` keeps ``more`` bytes more
        within the limit; they are no longer counted once returned.  Raises ``ValueError``, dropping nothing, when
        ``exec_id`` alone would not fit (its caller keeps both tails of an exec within the limit, so it cannot)."""
        if self._kept.get(exec_id, 0) + more > self.limit:
            raise ValueError(f"{more} bytes more do not fit a budget of {self.limit} bytes")
        victims: list[int] = []
        for other in list(self._kept):
            if self.used + more <= self.limit:
                break
            if other == exec_id or not self._kept[other]:
                continue
            victims.append(other)
            self.used -= self._kept[other]
            self._kept[other] = 0
        return victims

    def grow(self, exec_id: int, more: int) -> None:
        """Count ``more`` bytes for ``exec_id`` (after ``make_room`` made it fit)."""
        self._kept[exec_id] += more
        self.used += more

    def release(self, exec_id: int) -> None:
        """Count nothing more for ``exec_id`` until it grows again (its output was dropped)."""
        self.used -= self._kept.get(exec_id, 0)
        if exec_id in self._kept:
            self._kept[exec_id] = 0

    def forget(self, exec_id: int) -> None:
        """Stop counting an exec (its output was dropped or its record forgotten)."""
        self.used -= self._kept.pop(exec_id, 0)

    def kept(self, exec_id: int) -> int:
        return self._kept.get(exec_id, 0)
