"""Q3's sliding cell counts as numpy vectors: the array path of ``workers.heatmap``.

The per-event path keeps each window's sums as a dict of joint cells and, at
every emission, sums them into every grid in Python. Here each window keeps
its counts per grid cell directly, as one int64 vector holding every selected
grid side by side: a finished game-second bucket (a dict of joint cells and
ps, filled sample by sample) is turned once into grid cells with one
``np.bincount`` and added to every window; sliding subtracts the buckets that
leave. Emitting is then ``workers.sparse_heatmap``'s rounding and encoding, per grid.

Exactness: counts are integer ps. A bucket spans one game second, so a cell's
sum in it is at most 1e12 ps, exact in float64 (bincount's weights); window
counts are added in int64. Shares go through ``sparse_heatmap.shares_ppm`` as
on the per-event path (float64 division of two integers below 2**53 is the
correctly rounded quotient: a window never holds more than the game, ``GAME_PS``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from workers.gametime import GAME_PS
from workers.sparse_heatmap import EMPTY_BODY, encode_body, shares_ppm

assert GAME_PS < 2**53, "window totals must stay exact in float64"


class _Bucket:
    """A finished game second: the grid cells it touched (into the joint vector) and their ps."""

    __slots__ = ("cells", "end", "ps", "total")

    def __init__(self, end: int, cells: np.ndarray, ps: np.ndarray, total: int) -> None:
        self.end = end
        self.cells = cells
        self.ps = ps
        self.total = total


class GridWindows:
    """Windows of the given lengths (ps, None: the whole game) counting ps per cell of every grid in ``tables``.

    The same ``open`` / ``add`` / ``slide`` calls as ``workers.windows.Windows``; ``bodies(w)`` gives
    window ``w``'s compact maps, one per grid.
    """

    __slots__ = ("_bounded", "_cached", "_end", "_open", "_sizes", "_table", "counts", "lengths", "totals")

    def __init__(self, lengths: Sequence[int | None], table: np.ndarray, sizes: Sequence[int]) -> None:
        """``table[joint, g]`` is the joint cell's index in the side-by-side vector of grids of ``sizes``."""
        self.lengths = list(lengths)
        self._table = table
        self._sizes = list(sizes)
        self.counts = np.zeros((len(self.lengths), sum(sizes)), dtype=np.int64)
        self.totals = [0] * len(self.lengths)
        self._bounded = [(w, length, deque[_Bucket]()) for w, length in enumerate(self.lengths) if length is not None]
        self._open: dict[int, int] = {}
        self._end = 0
        #: per window, its last encoding while its counts have not changed since (a player without new data)
        self._cached: list[list[bytes] | None] = [None] * len(self.lengths)

    def open(self, start: int, end: int) -> None:
        """Start the bucket ``[start, end)`` (the previous one is finished and counted)."""
        self._flush()
        self._end = end

    def add(self, key: int, amount: int) -> None:
        """Add ``amount`` ps (> 0) for joint cell ``key`` to the open bucket."""
        own = self._open
        own[key] = own.get(key, 0) + amount

    def slide(self, now: int) -> None:
        """Count the open bucket, then drop from each window what ends at or before ``now`` minus its length."""
        self._flush()
        counts, totals = self.counts, self.totals
        for w, length, buckets in self._bounded:
            lowest = now - length
            while buckets and buckets[0].end <= lowest:
                b = buckets.popleft()
                counts[w, b.cells] -= b.ps
                totals[w] -= b.total
                self._cached[w] = None

    def _flush(self) -> None:
        own = self._open
        if not own:
            return
        self._open = {}
        n = len(own)
        keys = np.fromiter(own.keys(), dtype=np.int64, count=n)
        ps = np.fromiter(own.values(), dtype=np.int64, count=n)
        grids = self._table.shape[1]
        summed = np.bincount(self._table[keys].ravel(), weights=np.repeat(ps, grids), minlength=self.counts.shape[1])
        cells = np.flatnonzero(summed)
        cell_ps = summed[cells].astype(np.int64)
        total = int(ps.sum())
        self.counts[:, cells] += cell_ps
        for w in range(len(self.totals)):
            self.totals[w] += total
            self._cached[w] = None
        bucket = _Bucket(self._end, cells, cell_ps, total)
        for _w, _length, buckets in self._bounded:
            buckets.append(bucket)

    def bodies(self, w: int) -> list[bytes]:
        """Window ``w``'s compact maps per grid (``sparse_heatmap.encode_body``), empty while nothing counted."""
        total = self.totals[w]
        if not total:
            return [EMPTY_BODY] * len(self._sizes)
        cached = self._cached[w]
        if cached is not None:
            return cached
        ppm = shares_ppm(self.counts[w], total)
        out = []
        start = 0
        for size in self._sizes:
            out.append(encode_body(ppm[start:start + size]))
            start += size
        self._cached[w] = out
        return out
