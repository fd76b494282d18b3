"""Lost-input bookkeeping for the ``nfp`` detection policy of the ball components (docs/policies.md).

Sensor rows lost on the way in leave no index gap: the forwarder numbers what
arrives. They show as gaps in a sensor's ts sequence, whose sample period is
known (ball 2000 Hz, players 200 Hz, with a few percent of jitter): a step
of several periods means rows were lost in between. Tuples
missed between workers and late events come from ``OrderedComponent.input_lost``.
Both become *doubt ranges* of event time, open at both ends.
"""

from __future__ import annotations

from bisect import insort
from typing import Any

from workers import debs

BALL_PERIOD_PS = debs.PS_PER_MS // 2  # 2000 Hz
PLAYER_PERIOD_PS = 5 * debs.PS_PER_MS  # 200 Hz
#: A ball ts step longer than this many periods could hide a kick's spike or an exit row (a few rows lost).
BALL_GAP_PERIODS = 3
#: A player sensor whose latest row is older than this many periods lost at least one row
#: (jitter, 4.6-5.0 ms at 200 Hz, stays far below).
PLAYER_GAP_PERIODS = 1.6


class Doubts:
    """Event-time ranges ``(lo, hi)`` in which input may have been lost."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []  # sorted by lo
        self.count = 0

    def add(self, lo: int | None, hi: int | None) -> None:
        """A loss between ``lo`` and ``hi``; an unknown end stretches to the other one (or everywhere)."""
        lo = hi if lo is None else lo
        hi = lo if hi is None else hi
        if lo is None or hi is None:
            lo, hi = -(1 << 62), 1 << 62
        insort(self.ranges, (lo, hi))
        self.count += 1

    def touches(self, start: int, end: int) -> bool:
        """Could the loss reach into [start, end]? A range (lo, hi) lost rows strictly between its ends."""
        return any((lo < end and hi > start) or (lo == hi and start <= lo <= end) for lo, hi in self.ranges)

    def forget_before(self, ts: int) -> None:
        """Drop ranges that ended before ``ts`` (nothing older will be asked about)."""
        self.ranges = [r for r in self.ranges if r[1] >= ts]


class GapWatch:
    """Per-sensor ts steps longer than ``limit_ps``, reported to ``doubts``."""

    def __init__(self, limit_ps: int, doubts: Doubts) -> None:
        self.limit = limit_ps
        self.last: dict[Any, int] = {}
        self.doubts = doubts
        self.gaps = 0

    def see(self, key: Any, ts: int) -> tuple[int, int] | None:
        """A row of ``key`` at ``ts``; returns the gap it closes, if any."""
        last = self.last.get(key)
        self.last[key] = ts if last is None or ts > last else last
        if last is not None and ts - last > self.limit:
            self.gaps += 1
            self.doubts.add(last, ts)
            return last, ts
        return None


BALL_GAP_PS = BALL_GAP_PERIODS * BALL_PERIOD_PS
PLAYER_GAP_PS = round(PLAYER_GAP_PERIODS * PLAYER_PERIOD_PS)
