"""Q3's sliding cell counts as numpy vectors: the array path of ``workers.heatmap``.

The per-event path keeps each window's sums as a dict of joint cells and, at
every emission, sums them into every grid in Python. Here each window keeps
its counts per grid cell directly, as one int64 vector holding every selected
grid side by side: a finished game-second bucket (a dict of joint cells and
ps, filled sample by sample) is turned once into grid cells with one
``np.bincount`` and added to every window; sliding subtracts the buckets that
leave. Emitting is then a division and ``orjson``'s numpy encoder.

Exactness: counts are integer ps. A bucket spans one game second, so a cell's
sum in it is at most 1e12 ps, exact in float64 (bincount's weights); window
counts are added in int64. Shares are ``count / total * 100`` in float64 as
the per-event path computes them (Python's int / int is the correctly rounded
quotient, and so is float64 division of two integers below 2**53: a window
never holds more than the game, ``GAME_PS``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np
import orjson

from workers.gametime import GAME_PS

assert GAME_PS < 2**53, "window totals must stay exact in float64"

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


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

    The same ``open`` / ``add`` / ``slide`` calls as ``workers.windows.Windows``; ``encoded(w)`` gives
    window ``w``'s share lists, one JSON list per grid.
    """

    __slots__ = ("_bounded", "_cached", "_end", "_open", "_sizes", "_table", "_zeros", "counts", "lengths", "totals")

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
        self._zeros = [orjson.dumps(np.zeros(size), option=_NUMPY) for size in self._sizes]
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

    def encoded(self, w: int) -> list[bytes]:
        """Window ``w``'s shares (``count / total * 100``, all 0.0 while nothing counted) per grid, as JSON lists."""
        total = self.totals[w]
        if not total:
            return self._zeros
        cached = self._cached[w]
        if cached is not None:
            return cached
        shares = self.counts[w] / total * 100
        out = []
        start = 0
        for size in self._sizes:
            out.append(orjson.dumps(shares[start:start + size], option=_NUMPY))
            start += size
        self._cached[w] = out
        return out
