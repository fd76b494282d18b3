"""Fixed-capacity ring buffer addressed by monotonically increasing indices.

A stream's index is assigned by its original producer and kept by every
repeater, so slots are addressed by ``index % capacity``.  A repeater that
learns of a gap upstream appends with an explicit index; the skipped slots
become holes, which readers see as ``missed`` rather than silently.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_HOLE = object()


@dataclass(slots=True)
class ReadResult(Generic[T]):
    """One page of a read: items with their indices, plus what the reader lost."""

    items: list[T]
    indices: list[int]
    first: int  # oldest index still held, -1 if empty
    last: int  # newest index ever appended, -1 if empty
    missed: int  # tuples after the reader's position that were overwritten or never held


class RingBuffer(Generic[T]):
    """Append is O(1); reads are O(page size); waiters park on one shared future."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("ring buffer capacity must be >= 1")
        self.capacity = capacity
        self._slots: list[object] = [_HOLE] * capacity
        self._first = 0  # oldest held index (valid when _next > _first)
        self._next = 0  # index the next plain append gets
        # Runs of holes [start, end] (inclusive), oldest first, so that reads jump over a gap in O(log runs)
        # rather than walking it slot by slot; runs below ``_first`` are dead and trimmed on the next gap.
        self._hole_starts: list[int] = []
        self._hole_ends: list[int] = []
        self._waiter: asyncio.Future[None] | None = None  # readers of data only
        self._meta_waiter: asyncio.Future[None] | None = None  # readers of data or metadata changes

    # --- state -----------------------------------------------------------------

    @property
    def first(self) -> int:
        return self._first if self._next > self._first else -1

    @property
    def last(self) -> int:
        return self._next - 1

    @property
    def next_index(self) -> int:
        return self._next

    def __len__(self) -> int:
        return self._next - self._first

    # --- writing ---------------------------------------------------------------

    def append(self, item: T, index: int | None = None) -> int:
        """Store ``item`` under ``index`` (default: the next one) and wake readers."""
        if index is None:
            index = self._next
        elif index < self._next:
            raise ValueError(f"index {index} is not after the last index {self._next - 1}")
        elif index > self._next:
            self._skip_to(index)
        self._slots[index % self.capacity] = item
        self._next = index + 1
        if self._next - self._first > self.capacity:
            self._first = self._next - self.capacity
        self._wake()
        return index

    def extend(self, items: list[T]) -> None:
        """Append many items with consecutive indices; readers wake once."""
        count = len(items)
        kept = items if count <= self.capacity else items[-self.capacity :]  # the others would be overwritten
        write_wrapped(self._slots, self._next + count - len(kept), kept)
        self._appended(count)

    def _appended(self, count: int) -> None:
        """``count`` items were stored after the newest: the newest index moves, the oldest may, readers wake."""
        self._next += count
        if self._next - self._first > self.capacity:
            self._first = self._next - self.capacity
        self._wake()

    def resize(self, capacity: int) -> None:
        """Change the capacity, keeping every held item; ``capacity`` must fit them all."""
        self._check_fits(capacity)
        slots: list[object] = [_HOLE] * capacity
        for index in range(self._first, self._next):
            slots[index % capacity] = self._slots[index % self.capacity]
        self._slots, self.capacity = slots, capacity

    def _check_fits(self, capacity: int) -> None:
        if capacity < max(1, len(self)):
            raise ValueError(f"capacity {capacity} cannot hold the {len(self)} items held")

    def drop_before(self, index: int) -> None:
        """Forget the items older than ``index`` now, e.g. to stay within a byte budget.

        Readers see them as ``missed``, as if the ring had overwritten them. The
        newest item is always kept.
        """
        index = min(index, self._next - 1)
        if index <= self._first:
            return
        write_wrapped(self._slots, self._first, [_HOLE] * (index - self._first))  # frees the items now
        self._first = index

    def truncate_after(self, index: int) -> None:
        """Withdraw every item after ``index``: the next append gets ``index + 1`` again (a retraction)."""
        if index + 1 >= self._next:
            return
        for gone in range(max(index + 1, self._first, self._next - self.capacity), self._next):
            self._slots[gone % self.capacity] = _HOLE
        self._next = index + 1
        self._first = min(self._first, self._next)
        keep = bisect.bisect_right(self._hole_starts, index)
        del self._hole_starts[keep:], self._hole_ends[keep:]
        if self._hole_ends and self._hole_ends[-1] > index:
            self._hole_ends[-1] = index
        self.poke()

    def at(self, index: int) -> T | None:
        """The item stored under ``index`` (None: not held, or a hole)."""
        if not self._first <= index < self._next:
            return None
        item = self._slots[index % self.capacity]
        return None if item is _HOLE else item  # type: ignore[return-value]

    def reset(self, start_index: int = 0) -> None:
        """Forget everything, e.g. when an upstream producer restarted."""
        self._slots = [_HOLE] * self.capacity
        self._first = self._next = start_index
        self._hole_starts.clear()
        self._hole_ends.clear()
        self._wake()

    def _skip_to(self, index: int) -> None:
        gap = index - self._next
        if gap >= self.capacity:
            self._slots = [_HOLE] * self.capacity
            self._first = index
            self._hole_starts.clear()
            self._hole_ends.clear()
            return
        for skipped in range(self._next, index):
            self._slots[skipped % self.capacity] = _HOLE  # frees the overwritten item now
        dead = bisect.bisect_left(self._hole_ends, self._first)
        if dead:
            del self._hole_starts[:dead], self._hole_ends[:dead]
        self._hole_starts.append(self._next)
        self._hole_ends.append(index - 1)

    def poke(self) -> None:
        """Wake readers that asked to hear of metadata changes (``meta=True``), without new data."""
        self._meta_waiter = _resolve(self._meta_waiter)

    def wake_all(self) -> None:
        """Wake every waiting reader, e.g. because the server is stopping."""
        self._wake()

    def _wake(self) -> None:
        self._waiter = _resolve(self._waiter)
        self._meta_waiter = _resolve(self._meta_waiter)

    # --- reading ---------------------------------------------------------------

    def read(self, after: int = -1, *, oldest: int | None = None, latest: int | None = None) -> ReadResult[T]:
        """Items with index > ``after``: the ``oldest`` N of them, or the ``latest`` N.

        ``missed`` counts indices after ``after`` that the reader can no longer
        get: overwritten before this read, or holes left by an upstream gap.
        Indices skipped on purpose by ``latest`` are not missed.

        Holes do not count toward N: the newest index is never a hole, so a
        read returns at least one item whenever anything newer than ``after``
        is held, and a reader that resumes after the last index it got has
        moved past every gap (a page made only of holes would leave it asking
        the same question forever).
        """
        start, end, missed = self.span(after)
        if start >= end:
            return ReadResult([], [], self.first, self.last, missed)
        if not self._hole_ends or start > self._hole_ends[-1]:  # no holes: two slices instead of a loop
            start, end = _limited(start, end, oldest, latest)
            return ReadResult(self._slice(start, end), list(range(start, end)), self.first, self.last, missed)
        if latest is not None:
            ranges, holes = self._held_backward(start, end, latest)
        else:
            ranges, holes = self._held_forward(start, end, oldest)
        items: list[T] = []
        indices: list[int] = []
        for lo, hi in ranges:
            items += self._slice(lo, hi)
            indices += range(lo, hi)
        return ReadResult(items, indices, self.first, self.last, missed + holes)

    def span(self, after: int, *, oldest: int | None = None, latest: int | None = None) -> tuple[int, int, int]:
        """Indices [start, end) a read after ``after`` covers (the ``oldest`` or ``latest`` N of them, holes
        not skipped), and how many after ``after`` are no longer held (``missed``)."""
        start = max(after + 1, self._first)
        end = self._next  # exclusive
        missed = max(0, min(self._first, end) - (after + 1))
        return *_limited(min(start, end), end, oldest, latest), missed

    def _held_forward(self, start: int, end: int, limit: int | None) -> tuple[list[tuple[int, int]], int]:
        """Ranges [lo, hi) of held items from ``start`` on, up to ``limit`` items, and the holes passed."""
        starts, ends = self._hole_starts, self._hole_ends
        run = bisect.bisect_left(ends, start)  # the first run that ends at or after start
        need = end - start if limit is None else limit
        ranges: list[tuple[int, int]] = []
        holes = 0
        position = start
        while position < end and need > 0:
            if run < len(starts) and starts[run] <= position:  # inside a run of holes: jump over it
                past = min(ends[run] + 1, end)
                holes += past - position
                position = past
                run += 1
                continue
            stop = min(end, starts[run] if run < len(starts) else end, position + need)
            ranges.append((position, stop))
            need -= stop - position
            position = stop
        return ranges, holes

    def _held_backward(self, start: int, end: int, limit: int) -> tuple[list[tuple[int, int]], int]:
        """Ranges [lo, hi) of the newest ``limit`` held items at or after ``start``, and the holes passed."""
        starts, ends = self._hole_starts, self._hole_ends
        run = bisect.bisect_right(starts, end - 1) - 1  # the last run that starts before end
        need = limit
        ranges: list[tuple[int, int]] = []
        holes = 0
        position = end  # exclusive
        while position > start and need > 0:
            if run >= 0 and ends[run] >= position - 1:  # the slot below position is a hole
                lowest = max(starts[run], start)
                holes += position - lowest
                position = lowest
                run -= 1
                continue
            low = max(start, ends[run] + 1 if run >= 0 else start, position - need)
            ranges.append((low, position))
            need -= position - low
            position = low
        ranges.reverse()
        return ranges, holes

    def _slice(self, start: int, end: int) -> list[T]:
        """Slots for indices [start, end), which must all be held (end - start <= capacity)."""
        if start >= end:
            return []
        slots, capacity = self._slots, self.capacity
        lo, hi = start % capacity, end % capacity
        items = slots[lo:hi or capacity] if lo < hi or hi == 0 else slots[lo:] + slots[:hi]
        return items  # type: ignore[return-value]

    async def wait_beyond(self, index: int, timeout: float, *, meta: bool = False) -> bool:
        """Wait until something newer than ``index`` exists, or the timeout.

        With ``meta``, a ``poke`` (a metadata change) ends the wait too. Plain
        clients leave it off, so a producer's frequent watermark updates do
        not turn every client's long poll into a stream of empty answers.
        Returns whether newer data exists.
        """
        if self._next - 1 > index:
            return True
        waiter = self.waiter(meta=meta)
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.shield(waiter)
        return self._next - 1 > index

    def waiter(self, *, meta: bool = False) -> asyncio.Future[None]:
        """The future the next append (with ``meta``: also the next ``poke``) resolves, shared by every reader
        parked on it: never cancel it, shield it or wait on it with ``asyncio.wait``."""
        if meta:
            if self._meta_waiter is None:
                self._meta_waiter = asyncio.get_running_loop().create_future()
            return self._meta_waiter
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter


def _limited(start: int, end: int, oldest: int | None, latest: int | None) -> tuple[int, int]:
    """[start, end) cut to its ``latest`` N, else its ``oldest`` N (a read without holes)."""
    if latest is not None and end - start > latest:
        return end - latest, end
    if oldest is not None and end - start > oldest:
        return start, start + oldest
    return start, end


def write_wrapped(ring: MutableSequence[Any], start: int, items: Sequence[Any]) -> None:
    """Store ``items`` (at most ``len(ring)``) under indices from ``start`` on, slot ``index % len(ring)``: slice
    assignments, not a loop (a forwarder stores ~100k rows/s); ``ring`` a list or a numpy array."""
    size = len(ring)
    at = start % size
    head = min(len(items), size - at)
    ring[at : at + head] = items[:head]
    ring[: len(items) - head] = items[head:]


def _resolve(waiter: asyncio.Future[None] | None) -> None:
    """Wake everyone parked on ``waiter``; the next reader gets a fresh future."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
