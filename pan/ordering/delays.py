"""The delays an ordering unit learns K from: the window of measurements, the histogram, upstream notices.

Apart from the rest of the unit (pan/ordering/unit.py): how delays are measured and K follows from them,
whatever moves the clock (pan/ordering/clock.py) and however the runs are held (pan/ordering/runs.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from operator import mul
from typing import Any

import numpy as np

from pan.ordering.picoseconds import PS_PER_MS
from pan.ordering.settings import OrderingSettings, is_int

#: Upper bounds (ps) of the delay histogram buckets; a final +Inf bucket is implied.
DELAY_BUCKETS_PS: tuple[int, ...] = (
    0,
    PS_PER_MS // 1000,
    PS_PER_MS // 100,
    PS_PER_MS // 10,
    *(ms * PS_PER_MS for ms in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)),
)


# --------------------------------------------------------------------------- delay window


class DelayWindow:
    """The recent delay measurements K is computed from.

    Kept as two halves of ``window // 2`` measurements each: statistics cover the
    previous and the current half, i.e. the last ``window/2 .. window``
    measurements. An old peak is therefore forgotten after at most ``window``
    newer measurements, which is what lets K shrink. Sums are exact integers.
    """

    __slots__ = (
        "cur_max", "cur_n", "cur_smax", "cur_sq", "cur_sum", "half", "n_streams",
        "prev_max", "prev_n", "prev_smax", "prev_sq", "prev_sum", "total",
    )

    def __init__(self, window: int, n_streams: int) -> None:
        self.half = max(1, window // 2)
        self.n_streams = n_streams
        self.total = 0
        self.prev_n = self.prev_sum = self.prev_sq = self.prev_max = 0
        self.prev_smax = [0] * n_streams
        self._clear_current()

    def _clear_current(self) -> None:
        self.cur_n = self.cur_sum = self.cur_sq = self.cur_max = 0
        self.cur_smax = [0] * self.n_streams

    def add(self, ds: list[int], pos: int | None) -> None:
        """Add measurements of stream ``pos`` (None for pseudo measurements from notices)."""
        i, m = 0, len(ds)
        while i < m:
            room = self.half - self.cur_n
            chunk = ds if (i == 0 and m <= room) else ds[i : i + room]
            c = len(chunk)
            top = max(chunk)
            self.cur_n += c
            self.cur_sum += sum(chunk)
            self.cur_sq += sum(map(mul, chunk, chunk))
            if top > self.cur_max:
                self.cur_max = top
            if pos is not None and top > self.cur_smax[pos]:
                self.cur_smax[pos] = top
            self.total += c
            i += c
            if self.cur_n >= self.half:
                self.prev_n, self.prev_sum, self.prev_sq = self.cur_n, self.cur_sum, self.cur_sq
                self.prev_max, self.prev_smax = self.cur_max, self.cur_smax
                self._clear_current()

    def add_zeros(self, m: int) -> None:
        """``m`` zero delays: the common case of a clock stream arriving in order."""
        while m:
            take = min(m, self.half - self.cur_n)
            self.cur_n += take
            self.total += take
            m -= take
            if self.cur_n >= self.half:
                self.prev_n, self.prev_sum, self.prev_sq = self.cur_n, self.cur_sum, self.cur_sq
                self.prev_max, self.prev_smax = self.cur_max, self.cur_smax
                self._clear_current()

    @property
    def n(self) -> int:
        return self.prev_n + self.cur_n

    def max(self) -> int:
        return max(self.prev_max, self.cur_max)

    def stream_max(self, pos: int) -> int:
        return max(self.prev_smax[pos], self.cur_smax[pos])

    def std(self) -> float:
        n = self.n
        if n < 2:
            return 0.0
        s = self.prev_sum + self.cur_sum
        q = self.prev_sq + self.cur_sq
        return math.sqrt(max(0, n * q - s * s)) / n


def delays(start: int, tss: list[int] | np.ndarray) -> tuple[list[int], int]:
    """The positive delays of ``tss`` against their running maximum from ``start`` on (zeros are only counted
    by the caller), in order, and that maximum after the last."""
    if isinstance(tss, np.ndarray):
        running = np.maximum.accumulate(np.concatenate((np.array([start], dtype=np.int64), tss[:-1])))
        behind = running - tss
        return behind[behind > 0].tolist(), max(int(running[-1]), int(tss[-1]))
    ds = []
    add = ds.append
    top = start
    for t in tss:
        if t > top:
            top = t
        elif t < top:
            add(top - t)
    return ds, top


class DelayMeasurement:
    """The part of ``OrderingUnit`` that measures delays and sets K from them, upstream K notices included.

    Its state is set up in ``OrderingUnit.__init__`` (pan/ordering/unit.py), where each field is explained.
    """

    settings: OrderingSettings
    _pos: dict[str, int]
    _k: int
    _win: DelayWindow
    _pending: list[tuple[int, list[int], int | None]]
    _pending_n: int
    _up_k: dict[str, int]
    _hist: list[int]
    _hist_sum: int
    _hist_n: int
    _k_increases: int
    _unmeasured: int
    _notices_applied: int

    def notice_upstream_k(self, stream: str, k_upstream: int) -> bool:
        """React to the K an upstream producer of ``stream`` reports in its ``/data`` meta.

        Acts only when that K is new or grew: the stream's events will then lag by
        the growth on top of what was measured, so that predicted delay is entered
        as a measurement (a pseudo event). Returns True if our K rose.
        """
        pos = self._pos.get(stream)
        if pos is None:
            raise ValueError(f"unknown input stream {stream!r}")
        if not is_int(k_upstream) or k_upstream < 0:
            raise ValueError(f"upstream K must be an integer >= 0 (ps), got {k_upstream!r}")
        prev = self._up_k.get(stream)
        self._up_k[stream] = k_upstream
        if not self.settings.notices:
            return False
        seen = self._win.stream_max(pos)
        if prev is None:
            predicted = max(k_upstream, seen)
        elif k_upstream > prev:
            predicted = max(seen, prev) + (k_upstream - prev)
        else:
            return False
        if predicted <= self._win.max():
            return False
        self._notices_applied += 1
        self._win.add([predicted], None)
        old = self._k
        self._update_k()
        return self._k > old

    def _measure_pending(self, clk: int | None) -> None:
        """Measure the waiting events against ``clk`` (None: against the clk each batch found)."""
        for pos, tss, found in self._pending:
            if clk is None:
                if found is None:
                    self._unmeasured += len(tss)
                    continue
                self._record([found - t if t < found else 0 for t in tss], pos)
                continue
            self._record([clk - t if t < clk else 0 for t in tss], pos)
        self._pending.clear()
        self._pending_n = 0

    def _record(self, ds: list[int], pos: int) -> None:
        self._win.add(ds, pos)
        hist = self._hist
        if len(ds) <= 24:
            for d in ds:
                hist[bisect_left(DELAY_BUCKETS_PS, d)] += 1
        else:
            sds = sorted(ds)
            below = 0
            for i, le in enumerate(DELAY_BUCKETS_PS):
                c = bisect_right(sds, le)
                hist[i] += c - below
                below = c
            hist[-1] += len(sds) - below
        self._hist_sum += sum(ds)
        self._hist_n += len(ds)

    def _record_zeros(self, m: int) -> None:
        self._win.add_zeros(m)
        self._hist[0] += m
        self._hist_n += m

    def _update_k(self) -> None:
        s = self.settings
        win = self._win
        if win.n == 0:
            k = s.initial_k
        else:
            k = math.ceil(win.max() + s.lam * win.std())
            if win.total < s.window:  # warm-up: the offline estimate is a floor
                k = max(k, s.initial_k)
        k = min(max(k, s.min_k), s.max_k)
        if k > self._k:
            self._k_increases += 1
        self._k = k

    # ------------------------------------------------------------------ reporting

    def delay_histogram(self) -> dict[str, Any]:
        """Measured delays (clk - ts, ps) as Prometheus-style cumulative buckets."""
        cum, buckets = 0, []
        for le, c in zip((*DELAY_BUCKETS_PS, math.inf), self._hist, strict=True):
            cum += c
            buckets.append((le, cum))
        return {"buckets": buckets, "sum_ps": self._hist_sum, "count": self._hist_n}
