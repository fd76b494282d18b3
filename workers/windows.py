"""Sliding sums over game time: the one window implementation of Q1, Q2 and Q3.

Contributions (a key and an integer amount) go into *buckets*, spans
``[start, end)`` of the game clock (ps). A window of ``length`` ps at the
instant ``now`` holds every bucket that ends after ``now - length``; the
whole-game window (``length`` None) holds everything and keeps no buckets.
Per key a window keeps the running sum of the buckets it holds. Amounts are
non-negative integers, so a bucket leaves a window exactly as it came in:
sums never drift, however long the game.

Several windows of different lengths over the same contributions share their
buckets (``Windows``): a contribution is added once to the open bucket and to
each window's sums, and ``slide(now)`` drops from each window what it no
longer holds.

- Q1 (``workers.running``) and Q3 (``workers.heatmap``) open one bucket per
  game second ``[n s, (n+1) s)`` and slide to whole seconds, so a bucket is
  always wholly inside a window or wholly outside it.
- Q2 (``workers.possession``) opens one bucket per finished possession; a
  window may cut the oldest one, and the possession code trims that part.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Bucket(Generic[K]):
    """The amounts per key added during ``[start, end)`` of the game clock."""

    __slots__ = ("end", "start", "sums")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self.sums: dict[K, int] = {}


class Window(Generic[K]):
    """Per-key sums of the buckets inside a window of ``length`` ps (None: the whole game)."""

    __slots__ = ("buckets", "length", "sums")

    def __init__(self, length: int | None) -> None:
        if length is not None and length <= 0:
            raise ValueError(f"window length must be positive, got {length}")
        self.length = length
        #: the buckets still inside, oldest first (always empty for the whole game)
        self.buckets: deque[Bucket[K]] = deque()
        #: running sum per key; a key whose sum returns to 0 is dropped
        self.sums: dict[K, int] = {}

    def oldest(self) -> Bucket[K] | None:
        """The oldest bucket still inside, or None."""
        return self.buckets[0] if self.buckets else None

    def slide(self, now: int) -> None:
        """Drop every bucket that ends at or before ``now - length``; ``now`` must never decrease."""
        if self.length is None:
            return
        lowest, buckets, sums = now - self.length, self.buckets, self.sums
        while buckets and buckets[0].end <= lowest:
            for key, amount in buckets.popleft().sums.items():
                left = sums[key] - amount
                if left:
                    sums[key] = left
                else:
                    del sums[key]


class Windows(Generic[K]):
    """Windows of the given lengths (ps, None: the whole game) fed by the same contributions."""

    __slots__ = ("_bounded", "_sums", "bucket", "windows")

    def __init__(self, lengths: Sequence[int | None]) -> None:
        self.windows: list[Window[K]] = [Window(length) for length in lengths]
        self._bounded = [w for w in self.windows if w.length is not None]
        self._sums = [w.sums for w in self.windows]
        #: the bucket ``add`` writes to (None before the first ``open``)
        self.bucket: Bucket[K] | None = None

    def __iter__(self) -> Iterator[Window[K]]:
        return iter(self.windows)

    def __getitem__(self, i: int) -> Window[K]:
        return self.windows[i]

    def open(self, start: int, end: int) -> None:
        """Start the bucket ``[start, end)``: later ``add`` calls go into it. Buckets open in time order."""
        bucket: Bucket[K] = Bucket(start, end)
        self.bucket = bucket
        for w in self._bounded:
            w.buckets.append(bucket)

    def add(self, key: K, amount: int) -> None:
        """Add ``amount`` (>= 0) for ``key`` to the open bucket and to every window (after the first ``open``).

        A zero adds nothing: a key is in a window's sums exactly while a bucket inside holds it.
        """
        if amount <= 0:
            if amount < 0:
                raise ValueError(f"amounts must not be negative, got {amount}")
            return
        own = self.bucket.sums  # type: ignore[union-attr]  # None only before the first open
        own[key] = own.get(key, 0) + amount
        for sums in self._sums:
            sums[key] = sums.get(key, 0) + amount

    def slide(self, now: int) -> None:
        """Every window drops what ends at or before ``now`` minus its length."""
        for w in self._bounded:
            w.slide(now)
